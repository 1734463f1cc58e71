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
// Exit codes: 0 on a clean stop, -h or -version; 1 when the plugin can not
// start or fails; 2 for a command line that can not run.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/stub"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/metrics/prom"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/internal/version"
	"github.com/cgdelegate/cgdelegate/nri"
)

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
	log := logging.New(stderr, f.level)
	logging.CaptureLogrus(log)
	cfg, err := loadConfig(f.config)
	if err != nil {
		log.Error("bad config", "error", err)
		return 1
	}
	// The node advertisement reads the plugin and refreshes after every
	// Configure and mount table change; the metrics read both at scrape
	// time, once serving starts below.
	var (
		adv *advert.Advertiser
		p   *nri.Plugin
	)
	opts := []nri.Option{nri.WithConfigured(func() { adv.Refresh() })}
	rec, metricsSrv, err := listenMetrics(cfg.MetricsAddress, prom.Options{
		Supported: func() bool { return adv.Report().Supported },
		Pinning:   func() *status.Pinning { return p.Pinning() },
	})
	if err != nil {
		log.Error("cannot serve metrics", "error", err)
		return 1
	}
	if metricsSrv != nil {
		defer stopMetrics(metricsSrv, log)
		opts = append(opts, nri.WithMetrics(rec))
	}
	p, err = nri.New(cfg, log, opts...)
	if err != nil {
		log.Error("cannot create plugin", "error", err)
		return 1
	}
	s, err := stub.New(p, f.stubOptions(log)...)
	if err != nil {
		log.Error("cannot create NRI stub", "error", err)
		return 1
	}
	p.SetUpdater(s)
	adv = advert.New(p, log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		if err := p.WatchHost(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("mount table watch stopped; every container start re-reads the mount table", "error", err)
		}
	}()
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
