package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/cgdelegate/cgdelegate/internal/logging"
)

// Defaults for an external plugin; a runtime that starts the plugin passes
// its own in the environment.
const (
	defaultIdx  = "50"
	defaultName = "cgdelegate"
)

const usage = `usage:
  cgdelegate [flags]          run as an NRI plugin (external, or started by the runtime)
  cgdelegate status [flags]   print the node's readiness as JSON; exit 1 when unsupported
                              (cgdelegate status -h for its flags)
  cgdelegate node-label withdraw [flags]
                              remove the node label from every node (helm uninstall's
                              Job); exit 1 if any removal failed (cgdelegate node-label -h)
  cgdelegate nodes [flags]    print every node's label, reason, fail-closed annotation and
                              plugin version from the API (cgdelegate nodes -h)
  cgdelegate install-profiles [flags]
                              install the engine pods' seccomp and AppArmor profiles
                              on the node (cgdelegate install-profiles -h)
  cgdelegate -version         print the version

flags:
`

// flags is the plugin's command line.
type flags struct {
	config, socket, idx, name string
	level                     slog.Level
	format                    logging.Format
	version                   bool
}

// parseFlags parses the plugin's command line. Every error has been
// printed to stderr, with the usage when it helps; flag.ErrHelp means -h.
func parseFlags(args []string, stderr io.Writer) (flags, error) {
	var f flags
	var lf logFlags
	fs := newFlagSet("cgdelegate", usage, stderr)
	fs.StringVar(&f.config, "config", "", "YAML config file (optional; the runtime's Configure blob is merged over it)")
	fs.StringVar(&f.socket, "socket", "", "NRI socket path (default: "+api.DefaultSocketPath+"; a runtime that starts the plugin passes a connection in $"+api.PluginSocketEnvVar+")")
	fs.StringVar(&f.idx, "idx", "", "plugin index, two digits (default: $"+api.PluginIdxEnvVar+" or "+defaultIdx+")")
	fs.StringVar(&f.name, "name", "", "plugin name, without '/' (default: $"+api.PluginNameEnvVar+" or "+defaultName+")")
	lf.register(fs)
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return flags{}, err
	}
	var err error
	f.level, f.format, err = lf.parse()
	err = errors.Join(err, checkArgs(fs.Args()), checkIdx(f.idx), checkName(f.name))
	if err != nil {
		logging.ErrorLine(stderr, "cgdelegate", fmt.Errorf("%w (see cgdelegate -h)", err))
		return flags{}, err
	}
	return f, nil
}

// subcommands are the words that may come first, each with its usage.
var subcommands = map[string]string{
	"status":           "cgdelegate status [flags]",
	"node-label":       "cgdelegate node-label withdraw [flags]",
	"nodes":            "cgdelegate nodes [flags]",
	"install-profiles": "cgdelegate install-profiles [flags]",
}

// checkArgs refuses positional words: a subcommand (subcommands) comes
// first, before any flag.
func checkArgs(args []string) error {
	if len(args) == 0 {
		return nil
	}
	if use, ok := subcommands[args[0]]; ok {
		return fmt.Errorf("%q must come first: %s", args[0], use)
	}
	return errUnexpected(args[0], "the subcommands are status, node-label, nodes and install-profiles")
}

func errUnexpected(arg, why string) error {
	return fmt.Errorf("unexpected argument %q: %s", arg, why)
}

// checkIdx: NRI orders plugins by a two-digit index.
func checkIdx(idx string) error {
	if idx == "" || len(idx) == 2 && '0' <= idx[0] && idx[0] <= '9' && '0' <= idx[1] && idx[1] <= '9' {
		return nil
	}
	return fmt.Errorf("-idx %q: want two digits, 00 to 99", idx)
}

// checkName: NRI builds paths from the plugin name.
func checkName(name string) error {
	if strings.Contains(name, "/") {
		return fmt.Errorf("-name %q: must not contain '/'", name)
	}
	return nil
}

// stubOptions connects the stub as the flags, the environment the runtime
// passes, or the defaults say, in that order, and logs through log.
func (f flags) stubOptions(log *slog.Logger) []stub.Option {
	opts := []stub.Option{stub.WithLogger(logging.NRI(log))}
	if f.socket != "" {
		opts = append(opts, stub.WithSocketPath(f.socket))
	}
	switch {
	case f.idx != "":
		opts = append(opts, stub.WithPluginIdx(f.idx))
	case os.Getenv(api.PluginIdxEnvVar) == "":
		opts = append(opts, stub.WithPluginIdx(defaultIdx))
	}
	switch {
	case f.name != "":
		opts = append(opts, stub.WithPluginName(f.name))
	case os.Getenv(api.PluginNameEnvVar) == "":
		opts = append(opts, stub.WithPluginName(defaultName))
	}
	return opts
}

// newFlagSet returns a flag set whose -h prints head, then the flags.
// logFlags are the -log-level and -log-format flags of every cgdelegate
// command.
type logFlags struct{ level, format string }

// register adds the two flags to fs.
func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
}

// parse returns the level and the format; an error names each flag whose
// value is not one of its words.
func (l logFlags) parse() (slog.Level, logging.Format, error) {
	level, errLevel := logging.ParseLevel(l.level)
	if errLevel != nil {
		errLevel = fmt.Errorf("-log-level %q: %w", l.level, errLevel)
	}
	format, errFormat := logging.ParseFormat(l.format)
	if errFormat != nil {
		errFormat = fmt.Errorf("-log-format %w", errFormat)
	}
	return level, format, errors.Join(errLevel, errFormat)
}

// finish ends the checks of a subcommand's flags: the log flags parsed,
// any argument left in fs refused (onlyFlags says what the subcommand
// takes), and every problem in errs and those joined into err.
func (l logFlags) finish(fs *flag.FlagSet, onlyFlags string, errs []error) (slog.Level, logging.Format, error) {
	level, format, err := l.parse()
	errs = append(errs, err)
	if fs.NArg() > 0 {
		errs = append(errs, errUnexpected(fs.Arg(0), onlyFlags))
	}
	return level, format, errors.Join(errs...)
}

func newFlagSet(name, head string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, head)
		fs.PrintDefaults()
	}
	return fs
}

// usageExit is the exit code of a command line that did not run: 0 for -h,
// 2 for a usage error.
func usageExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
