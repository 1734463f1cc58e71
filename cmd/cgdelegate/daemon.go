package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/nri"
	"github.com/cgdelegate/cgdelegate/internal/reconnect"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/internal/version"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// kubeletStateEvery is how often the kubelet's CPU manager state file is
// looked at (one stat; read only when it changed).
const kubeletStateEvery = 5 * time.Second

// withdrawTimeout bounds the removal of the node label at exit, well inside
// a pod's default 30 s termination grace period.
const withdrawTimeout = 5 * time.Second

// updatesStopTimeout bounds the wait for a container update under way when
// the process stops.
const updatesStopTimeout = 2 * time.Second

// daemon is everything the plugin process runs. build makes every part
// before any of it runs, so nothing calls back into a part not yet built.
type daemon struct {
	log        *slog.Logger
	configPath string
	plugin     *nri.Plugin
	stub       stub.Stub
	adv        *advert.Advertiser
	// events posts Events on pods; nil when podEvents is off.
	events *advert.EventPoster
	// metricsSrv serves the recorder; nil when metrics are off.
	metricsSrv *metrics.Server
}

// startError is a part that could not be built: msg is what is logged.
type startError struct {
	msg string
	err error
}

func (e *startError) Error() string { return e.msg + ": " + e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

// build makes the parts in the order they need each other: the metrics
// recorder (bound to its address, so a busy one fails the start), the
// plugin that records to it, the stub that serves the plugin, the node
// advertisement that reads the plugin; then the links back, which only
// name parts that exist: the plugin's updates go out through the stub,
// every config the plugin takes refreshes the advertisement, and the
// recorder reads the node's state from both at scrape time.
func build(cfg config.Config, f flags, log *slog.Logger) (*daemon, error) {
	rec, metricsSrv, err := listenMetrics(cfg.MetricsAddress, cfg.Profiling)
	if err != nil {
		return nil, &startError{"cannot serve metrics", err}
	}
	// The opt-in policy and the runtime's validator settings are rules
	// built from every config that comes into force.
	fc := &failClosed{}
	d := &daemon{log: log, configPath: f.config, metricsSrv: metricsSrv}
	// The runtime's version, once Configure has recorded it (the rules are
	// first built inside nri.New, before d.plugin is set).
	version := func() string {
		if d.plugin != nil {
			if r := d.plugin.Runtime(); r != nil {
				return r.Version
			}
		}
		return ""
	}
	opts := []nri.Option{
		nri.WithAdmission(writable.OptInPolicy),
		nri.WithRuntimeAdmission(validatorRule(log, fc, version)),
	}
	stubOpts := f.stubOptions(log)
	if rec != nil {
		// Decisions are counted by the handlers; events are timed on the
		// stub's ttrpc server, off the handlers' path, and the unchanged
		// decisions are counted from the timed requests
		// (metrics.Outcomes).
		opts = append(opts, nri.WithMetrics(rec))
		stubOpts = append(stubOpts, metrics.StubOption(rec))
	}
	fail := func(msg string, err error) (*daemon, error) {
		if metricsSrv != nil {
			stopMetrics(metricsSrv, log)
		}
		return nil, &startError{msg, err}
	}
	var countEvent func(reason, result string)
	if rec != nil {
		countEvent = rec.PodEvent
	}
	if d.events, err = advert.NewEventPoster(cfg, os.Getenv, log, countEvent); err != nil {
		return fail("cannot post pod Events", err)
	}
	if d.events != nil {
		opts = append(opts, nri.WithEvents(d.events.Post))
	}
	if d.plugin, err = nri.New(cfg, log, opts...); err != nil {
		return fail("cannot create plugin", err)
	}
	if d.stub, err = stub.New(d.plugin, stubOpts...); err != nil {
		return fail("cannot create NRI stub", err)
	}
	label, err := advert.NewNodeLabeler(cfg, os.Getenv, log)
	if err != nil {
		return fail("cannot label the node", err)
	}
	d.adv = advert.New(d.plugin, log, advert.WithNodeLabel(label), advert.WithFailClosed(fc.Load))

	d.plugin.SetUpdater(d.stub)
	d.plugin.OnConfigured(d.adv.Refresh)
	if rec != nil {
		rec.ObserveNode(metrics.Options{
			Supported:  func() bool { return d.adv.Report().Supported },
			FailClosed: fc.Load,
			Pinning:    d.plugin.Pinning,
			Delegation: d.plugin.Delegation,
		})
	}
	return d, nil
}

// run starts the background work (config reload on hup, the mount-table
// and kubelet state watches, the metrics server) and serves the runtime
// until ctx is done. On return the container update sender is stopped, the
// metrics server too, and the node advertisement withdrawn.
func (d *daemon) run(ctx context.Context, hup <-chan os.Signal) error {
	p, adv, log := d.plugin, d.adv, d.log
	if d.metricsSrv != nil {
		defer stopMetrics(d.metricsSrv, log)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), withdrawTimeout)
		defer cancel()
		if err := adv.Withdraw(ctx); err != nil {
			log.Error("cannot withdraw the node advertisement", "error", err)
		}
	}()
	go reloadOnHangup(ctx, hup, d.configPath, p, log)
	// The status file shows when pinning stops for the kubelet.
	go every(ctx, kubeletStateEvery, func() {
		if p.RecheckKubeletState() {
			adv.Refresh()
		}
	})
	// Pod Events are posted off the NRI path; what is queued at exit is
	// dropped.
	go d.events.Run(ctx)
	// A writable pod that churns cgroups is held within its cap: looked
	// at more often while one churns.
	go afterEach(ctx, p.TightenBounds, p.TightenDelay)
	go func() {
		if err := adv.Watch(ctx, 10*time.Second); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("mount table watch stopped; the node advertisement is refreshed only on events", "error", err)
		}
	}()
	if d.metricsSrv != nil {
		go func() {
			if err := d.metricsSrv.Serve(); err != nil {
				log.Error("metrics server stopped", "error", err)
			}
		}()
		log.Info("serving metrics", "address", d.metricsSrv.Addr().String(), "path", "/metrics")
	}
	cfg := p.Config()
	log.Info("starting", "version", version.String(), "config", d.configPath, "cgroupRoot", cfg.CgroupRoot, "hook", cfg.HookPath)
	err := serve(ctx, log, d.stub.Run, os.Getenv(api.PluginSocketEnvVar) != "")
	stopUpdates(p, log)
	return err
}

// stopUpdates stops the plugin's container update sender, waiting at most
// updatesStopTimeout for a send under way (the stub's connection is closed
// by then, so it ends soon).
func stopUpdates(p *nri.Plugin, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), updatesStopTimeout)
	defer cancel()
	if err := p.StopUpdates(ctx); err != nil {
		log.Warn("exiting with a container update under way", "error", err)
	}
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

// every calls fn every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, fn func()) {
	afterEach(ctx, fn, func() time.Duration { return interval })
}

// afterEach calls fn after delay(), and again after each delay() that
// follows it, until ctx is done.
func afterEach(ctx context.Context, fn func(), delay func() time.Duration) {
	t := time.NewTimer(delay())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
			t.Reset(delay())
		}
	}
}

// failClosed is the last fail-closed report, made by validatorRule whenever
// a config comes into force (before the advertisement's refresh that
// follows it).
type failClosed struct {
	atomic.Pointer[status.FailClosed]
}

// validatorRule builds, from every config that comes into force, the rule
// that refuses a container the runtime's NRI default validator is set to
// refuse (writable.ValidatorCheck): containerd's or CRI-O's config, by the
// runtime seen in Configure, is read then, so a runtime restarted with new
// settings is seen at its Configure. A config that can not be read is
// logged and sets no rule. The same read says whether the runtime fails
// closed (into fc); a runtime that does not is warned about once per
// Configure or reload.
func validatorRule(log *slog.Logger, fc *failClosed, version func() string) func(config.Config, string) writable.Check {
	return func(cfg config.Config, runtime string) writable.Check {
		kind := config.RuntimeOf(runtime)
		v, known, err := config.ReadValidator(cfg, kind)
		if err != nil {
			log.Warn("the runtime's NRI validator settings are not known; a refusal by its reject settings will not name them",
				"runtime", kind, "error", err)
		}
		report := status.NewFailClosed(runtime, version(), kind, v, known, err)
		fc.Store(report)
		if runtime != "" && !report.Enforced() {
			log.Warn("the runtime does not enforce required-plugins: opted-in pods start without cgdelegate while it is down",
				"runtime", runtime, "failClosed", report.State, "reason", report.Reason)
		}
		if err != nil || !known {
			return nil
		}
		return writable.ValidatorCheck(v, cfg.HookPath)
	}
}
