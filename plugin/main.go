// Command cgdelegate is the cgdelegate NRI plugin.
//
//	cgdelegate [flags]          run as an NRI plugin (external, or started by the runtime)
//	cgdelegate status [flags]   print the node's readiness as JSON; exit 1 when unsupported
//
// Run with no arguments it connects to /var/run/nri/nri.sock with the real
// host paths. Started by the runtime from /opt/nri/plugins it picks up the
// socket, name and index the runtime passes in its environment, and its
// config from the runtime's Configure call.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/hostcheck"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/nri"
)

// defaultIdx orders cgdelegate among external plugins.
const defaultIdx = "50"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "status" {
		return runStatus(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("cgdelegate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "YAML config file (optional; the runtime's Configure blob is merged over it)")
	socket := fs.String("socket", "", "NRI socket path (default: $NRI_PLUGIN_SOCKET or /var/run/nri/nri.sock)")
	idx := fs.String("idx", "", "plugin index (default: $NRI_PLUGIN_IDX or "+defaultIdx+")")
	name := fs.String("name", "", "plugin name (default: $NRI_PLUGIN_NAME or cgdelegate)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		fmt.Fprintln(stderr, "cgdelegate:", err)
		return 2
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		log.Error("bad config", "error", err)
		return 1
	}
	// The node advertisement reads the plugin and refreshes after every
	// Configure and mount table change.
	var adv *advert.Advertiser
	p, err := nri.New(cfg, log, nri.WithConfigured(func() { adv.Refresh() }))
	if err != nil {
		log.Error("cannot create plugin", "error", err)
		return 1
	}

	var opts []stub.Option
	if *socket != "" {
		opts = append(opts, stub.WithSocketPath(*socket))
	}
	switch {
	case *idx != "":
		opts = append(opts, stub.WithPluginIdx(*idx))
	case os.Getenv(api.PluginIdxEnvVar) == "":
		opts = append(opts, stub.WithPluginIdx(defaultIdx))
	}
	switch {
	case *name != "":
		opts = append(opts, stub.WithPluginName(*name))
	case os.Getenv(api.PluginNameEnvVar) == "":
		opts = append(opts, stub.WithPluginName("cgdelegate"))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		log.Error("cannot create NRI stub", "error", err)
		return 1
	}
	p.SetUpdater(s)
	adv = advert.New(p, log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		if err := adv.Watch(ctx, 10*time.Second); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("mount table watch stopped; the node advertisement is refreshed only on events", "error", err)
		}
	}()
	log.Info("starting", "config", *cfgPath, "cgroupRoot", cfg.CgroupRoot, "hook", cfg.HookPath)
	if err := s.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("plugin exited", "error", err)
		return 1
	}
	return 0
}

func loadConfig(path string) (config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// runStatus prints the live readiness merged with what the running plugin
// published.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cgdelegate status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "YAML config file (the same one the plugin uses)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "cgdelegate status:", err)
		return 2
	}
	checker := hostcheck.NewChecker(cfg.MountinfoPath, cfg.CgroupRoot)
	defer checker.Close()
	st, readErr := checker.Check()
	pub, pubErr := status.ReadPublished(cfg.StatusFilePath())
	r := status.Live(status.Evaluate(cfg, st, readErr), pub, pubErr)
	if _, err := stdout.Write(r.Marshal()); err != nil {
		return 2
	}
	if !r.Supported {
		return 1
	}
	return 0
}
