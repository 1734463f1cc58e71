// Command cgdelegate is the cgdelegate NRI plugin.
//
//	cgdelegate [flags]          run as an NRI plugin (external, or started by the runtime)
//	cgdelegate status [flags]   print the node's readiness as JSON; exit 1 when unsupported
//	cgdelegate -version         print the version
//
// Run with no arguments it connects to /var/run/nri/nri.sock with the real
// host paths. Started by the runtime from /opt/nri/plugins it picks up the
// socket, name and index the runtime passes in its environment, and its
// config from the runtime's Configure call.
//
// SIGHUP re-reads the -config file: a valid one replaces the config in
// force (the runtime's Configure blob still merged over it), an invalid one
// is logged and the old one stays. On SIGINT, SIGTERM or any other exit the
// NFD feature file is removed, so the node no longer advertises writable
// cgroups.
//
// Exit codes: 0 on a clean stop, -h or -version; 1 when the plugin can not
// start or fails; 2 for a command line that can not run.
package main

import (
	"context"
	"errors"
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
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/nri"
	"github.com/cgdelegate/cgdelegate/internal/reconnect"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/internal/validatorcfg"
	"github.com/cgdelegate/cgdelegate/internal/version"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// kubeletStateEvery is how often the kubelet's CPU manager state file is
// looked at (one stat; read only when it changed).
const kubeletStateEvery = 5 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "status" {
		return runStatus(args[1:], stdout, stderr)
	}
	f, err := parseFlags(args, stderr)
	if err != nil {
		return usageExit(err)
	}
	if f.version {
		fmt.Fprintln(stdout, "cgdelegate", version.String())
		return 0
	}
	log := logging.New(stderr, f.level, f.format)
	logging.CaptureLogrus(log)
	cfg, err := loadConfig(f.config)
	if err != nil {
		log.Error("bad config", "error", err)
		return 1
	}
	// The node advertisement reads the plugin and refreshes after every
	// Configure, Reload and mount table change. The opt-in policy is built
	// from every config that comes into force. The metrics read the plugin
	// and the advertisement at scrape time, once serving starts below.
	var (
		adv *advert.Advertiser
		p   *nri.Plugin
	)
	opts := []nri.Option{
		nri.WithAdmission(writable.OptInPolicy),
		nri.WithRuntimeAdmission(validatorRule(log)),
		nri.WithConfigured(func() { adv.Refresh() }),
	}
	rec, metricsSrv, err := listenMetrics(cfg.MetricsAddress, metrics.Options{
		Supported: func() bool { return adv.Report().Supported },
		Pinning:   func() *status.Pinning { return p.Pinning() },
	})
	if err != nil {
		log.Error("cannot serve metrics", "error", err)
		return 1
	}
	stubOpts := f.stubOptions(log)
	if metricsSrv != nil {
		defer stopMetrics(metricsSrv, log)
		// Decisions are counted by the handlers; events are timed on the
		// stub's ttrpc server, off the handlers' path, and the unchanged
		// decisions are counted from the timed requests
		// (metrics.Outcomes).
		opts = append(opts, nri.WithMetrics(rec))
		stubOpts = append(stubOpts, metrics.StubOption(rec))
	}
	p, err = nri.New(cfg, log, opts...)
	if err != nil {
		log.Error("cannot create plugin", "error", err)
		return 1
	}
	s, err := stub.New(p, stubOpts...)
	if err != nil {
		log.Error("cannot create NRI stub", "error", err)
		return 1
	}
	p.SetUpdater(s)
	adv = advert.New(p, log)
	defer func() {
		if err := adv.Withdraw(); err != nil {
			log.Error("cannot withdraw the node advertisement", "error", err)
		}
	}()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnHangup(ctx, hup, f.config, p, log)
	go func() {
		if err := p.WatchHost(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("mount table watch stopped; every container start re-reads the mount table", "error", err)
		}
	}()
	// The status file shows when pinning stops for the kubelet.
	go every(ctx, kubeletStateEvery, func() {
		if p.RecheckKubeletState() {
			adv.Refresh()
		}
	})
	go func() {
		if err := adv.Watch(ctx, 10*time.Second); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("mount table watch stopped; the node advertisement is refreshed only on events", "error", err)
		}
	}()
	if metricsSrv != nil {
		go func() {
			if err := metricsSrv.Serve(); err != nil {
				log.Error("metrics server stopped", "error", err)
			}
		}()
		log.Info("serving metrics", "address", metricsSrv.Addr().String(), "path", "/metrics")
	}
	log.Info("starting", "version", version.String(), "config", f.config, "cgroupRoot", cfg.CgroupRoot, "hook", cfg.HookPath)
	if err := serve(ctx, log, s.Run, os.Getenv(api.PluginSocketEnvVar) != ""); err != nil {
		log.Error("plugin exited", "error", err)
		return 1
	}
	return 0
}

// serve runs the plugin's connection (run, the stub's Run) until ctx is
// done. An external plugin reconnects when the runtime drops it (a request
// over plugin_request_timeout, a runtime restart), and the runtime
// configures and synchronizes it again. A plugin the runtime started on a
// connection it passed (launched) exits instead: that connection can not
// be dialled again, and the runtime starts a new process.
func serve(ctx context.Context, log *slog.Logger, run func(context.Context) error, launched bool) error {
	if !launched {
		return reconnect.Run(ctx, log, reconnect.Default, run)
	}
	if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// reloadOnHangup reloads the config file on every signal on hup, until ctx
// is done.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, path string, p *nri.Plugin, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload(path, p, log)
		}
	}
}

// reload re-reads the config file and puts it in force; an invalid one is
// logged and the config in force stays.
func reload(path string, p *nri.Plugin, log *slog.Logger) {
	if path == "" {
		log.Info("SIGHUP: no -config file to re-read; the config in force stays")
		return
	}
	cfg, err := config.Load(path)
	if err == nil {
		err = p.Reload(cfg)
	}
	if err != nil {
		log.Error("config reload failed; the config in force stays", "config", path, "error", err)
	}
}

func loadConfig(path string) (config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}

// every calls fn every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// validatorRule builds, from every config that comes into force, the rule
// that refuses a container the runtime's NRI default validator is set to
// refuse (validatorcfg): containerd's or CRI-O's config, by the runtime
// seen in Configure, is read then, so a runtime restarted with new
// settings is seen at its Configure. A config that can not be read is
// logged and sets no rule.
func validatorRule(log *slog.Logger) func(config.Config, string) writable.Check {
	return func(cfg config.Config, runtime string) writable.Check {
		kind := validatorcfg.RuntimeOf(runtime)
		check, err := validatorcfg.FromConfig(cfg, kind)
		if err != nil {
			log.Warn("the runtime's NRI validator settings are not known; a refusal by its reject settings will not name them",
				"runtime", kind, "error", err)
		}
		return check
	}
}
