// Command cgdelegate-hook is the OCI createRuntime hook of cgdelegate. It
// reads the container state from stdin, exits 0 silently when the container
// may start, and otherwise exits 1 with one line on stderr. See package
// github.com/cgdelegate/cgdelegate/hooks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cgdelegate/cgdelegate/hooks"
	"github.com/cgdelegate/cgdelegate/internal/config"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdin, os.Stderr))
}

func realMain(args []string, stdin io.Reader, stderr io.Writer) int {
	opts, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		def := hooks.DefaultOptions()
		fs := newFlagSet(&def, new(string))
		fs.SetOutput(stderr)
		fmt.Fprintln(stderr, "usage: cgdelegate-hook [flags] < state.json")
		fs.PrintDefaults()
		return 0
	}
	if err == nil {
		err = hooks.Run(context.Background(), opts, stdin)
	}
	if err != nil {
		msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
		fmt.Fprintln(stderr, "cgdelegate-hook: "+msg)
		return 1
	}
	return 0
}

// parseArgs parses the flags over the defaults, or over --config when
// given, so that flags always win.
func parseArgs(args []string) (hooks.Options, error) {
	opts := hooks.DefaultOptions()
	cfgPath, err := parseInto(&opts, args)
	if err != nil || cfgPath == "" {
		return opts, err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return opts, err
	}
	opts = hooks.OptionsFromConfig(cfg)
	_, err = parseInto(&opts, args)
	return opts, err
}

func newFlagSet(opts *hooks.Options, cfgPath *string) *flag.FlagSet {
	fs := flag.NewFlagSet("cgdelegate-hook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts.RegisterFlags(fs)
	fs.StringVar(cfgPath, "config", "", "cgdelegate YAML config for paths and bounds (flags win)")
	return fs
}

func parseInto(opts *hooks.Options, args []string) (cfgPath string, err error) {
	fs := newFlagSet(opts, &cfgPath)
	if err := fs.Parse(args); err != nil {
		return "", fmt.Errorf("%w; see cgdelegate-hook -h", err)
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected arguments %q; the hook takes only flags and the OCI state on stdin", fs.Args())
	}
	return cfgPath, nil
}
