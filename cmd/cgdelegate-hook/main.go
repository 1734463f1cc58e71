// Command cgdelegate-hook is the OCI createRuntime hook of cgdelegate. It
// reads the container state from stdin, exits 0 silently when the container
// may start, and otherwise exits 1 with one line on stderr. See package
// github.com/cgdelegate/cgdelegate/hook.
//
//	cgdelegate-hook [flags] < state.json
//	cgdelegate-hook -version
//	cgdelegate-hook -install-to /host/usr/local/bin/cgdelegate-hook
//
// -install-to copies the running binary to a path, atomically (a running
// hook is never overwritten in place), and exits: the DaemonSet's init
// container installs the hook on the host with it, from an image that has
// no shell or install(1).
//
// -h prints the flags and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/hook"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/version"
)

const prog = "cgdelegate-hook"

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func realMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	opts, cmd, err := parseArgs(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(stderr)
		return 0
	case err == nil && cmd.version:
		fmt.Fprintln(stdout, prog, version.String())
		return 0
	case err == nil && cmd.installTo != "":
		err = installSelf(cmd.installTo)
	case err == nil:
		err = hook.Run(context.Background(), opts, stdin)
	}
	if err != nil {
		logging.ErrorLine(stderr, prog, err)
		return 1
	}
	return 0
}

// cmdFlags are the command's own flags, beside the hook's options.
type cmdFlags struct {
	config    string
	version   bool
	installTo string
}

// parseArgs parses the flags over the defaults, or over --config when
// given, so that flags always win.
func parseArgs(args []string) (hook.Options, cmdFlags, error) {
	opts := hook.DefaultOptions()
	cmd, err := parseInto(&opts, args)
	if err != nil || cmd.config == "" || cmd.version || cmd.installTo != "" {
		return opts, cmd, err
	}
	cfg, err := config.Load(cmd.config)
	if err != nil {
		return opts, cmd, err
	}
	opts = hook.OptionsFromConfig(cfg)
	_, err = parseInto(&opts, args)
	return opts, cmd, err
}

func newFlagSet(opts *hook.Options, cmd *cmdFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts.RegisterFlags(fs)
	fs.StringVar(&cmd.config, "config", "", "cgdelegate YAML config for paths and bounds (flags win)")
	fs.BoolVar(&cmd.version, "version", false, "print the version and exit")
	fs.StringVar(&cmd.installTo, "install-to", "", "copy this binary to the given path, atomically, and exit")
	return fs
}

func parseInto(opts *hook.Options, args []string) (cmdFlags, error) {
	var cmd cmdFlags
	fs := newFlagSet(opts, &cmd)
	if err := fs.Parse(args); err != nil {
		return cmdFlags{}, fmt.Errorf("%w; see %s -h", err, prog)
	}
	if fs.NArg() > 0 {
		return cmdFlags{}, fmt.Errorf("unexpected arguments %q; the hook takes only flags and the OCI state on stdin", fs.Args())
	}
	return cmd, nil
}

// installSelf copies the running executable to dst.
func installSelf(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return install(self, dst)
}

// install copies src to dst with mode 0755, through a temporary file and a
// rename, so a hook the runtime is executing is replaced, never rewritten.
func install(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := host.WriteFileAtomic(dst, data, 0o755); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	return nil
}

// printUsage prints the usage with the built-in defaults.
func printUsage(w io.Writer) {
	def := hook.DefaultOptions()
	fs := newFlagSet(&def, new(cmdFlags))
	fs.SetOutput(w)
	fmt.Fprintln(w, "usage: "+prog+" [flags] < state.json\n       "+prog+" -version\n       "+prog+" -install-to PATH")
	fs.PrintDefaults()
}
