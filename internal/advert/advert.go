// Package advert keeps the node advertisement true: the NFD feature file
// (cgdelegate.io/supports-cgroup-options) and the status file that
// `cgdelegate status` reads, both built from one readiness report.
//
// Use it from the plugin binary: New over the running plugin (a Source),
// Refresh after Configure, Watch for the process lifetime, and Withdraw
// when the plugin stops. It reads the
// plugin's state through Source and never changes it; it writes only the two
// files.
package advert

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// StatusRefresh is how often an unchanged status report is rewritten, so
// its UpdatedAt shows the plugin is alive.
const StatusRefresh = 30 * time.Second

// Source is what the advertisement reports on: the running plugin.
type Source interface {
	// Config is the config in force.
	Config() config.Config
	// HostStatus is the mount-table verdict now.
	HostStatus() (host.Status, error)
	// Runtime is the runtime seen in Configure; nil before it.
	Runtime() *status.Runtime
	// Pinning is the CPU pinning state; nil when pinning is off.
	Pinning() *status.Pinning
}

// Advertiser writes the feature file and the status file.
type Advertiser struct {
	src Source
	log *slog.Logger

	// mu serializes Refresh and Withdraw, so no refresh writes after a
	// withdrawal.
	mu        sync.Mutex
	feature   *featureFile
	pub       *status.Publisher
	pubPath   string
	withdrawn bool
}

// New returns an Advertiser over src. A nil log discards.
func New(src Source, log *slog.Logger) *Advertiser {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Advertiser{src: src, log: log}
}

// Report builds the readiness report now.
func (a *Advertiser) Report() status.Report {
	cfg := a.src.Config()
	st, err := a.src.HostStatus()
	r := status.Evaluate(cfg, st, err)
	r.Runtime = a.src.Runtime()
	r.Pinning = a.src.Pinning()
	r.PluginPID = os.Getpid()
	r.UpdatedAt = time.Now().UTC()
	return r
}

// Refresh re-runs the host checks, updates the feature file and publishes
// the status file. The paths follow the config in force. After Withdraw it
// does nothing.
func (a *Advertiser) Refresh() {
	r := a.Report()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.withdrawn {
		return
	}
	f, pub := a.files(r.Config)
	if wrote, err := f.Set(r.Supported); err != nil {
		a.log.Error("cannot update the feature file", "path", f.Path(), "error", err)
	} else if wrote {
		a.log.Info("node advertisement changed", "label", FeatureLabel, "supported", r.Supported, "problems", r.Problems)
	}
	if _, err := pub.Publish(r); err != nil {
		a.log.Error("cannot publish status", "path", r.Config.StatusFilePath(), "error", err)
	}
}

// Withdraw removes the feature file, so that a node whose plugin has
// stopped does not advertise writable cgroups, and stops every later
// Refresh. The status file stays: `cgdelegate status` sees that its
// publisher is gone. Call it when the plugin exits.
func (a *Advertiser) Withdraw() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.withdrawn = true
	f := a.feature
	if path := a.src.Config().FeatureFilePath(); f == nil || f.Path() != path {
		f = newFeatureFile(path)
	}
	if err := f.Remove(); err != nil {
		return fmt.Errorf("withdraw the node advertisement: %w", err)
	}
	if f.Path() != "" {
		a.log.Info("node advertisement withdrawn", "path", f.Path())
	}
	return nil
}

// files returns the writers for cfg's paths, new ones when a path changed.
// The caller holds a.mu.
func (a *Advertiser) files(cfg config.Config) (*featureFile, *status.Publisher) {
	if a.feature == nil || a.feature.Path() != cfg.FeatureFilePath() {
		a.feature = newFeatureFile(cfg.FeatureFilePath())
	}
	if a.pub == nil || a.pubPath != cfg.StatusFilePath() {
		a.pub, a.pubPath = status.NewPublisher(cfg.StatusFilePath(), StatusRefresh), cfg.StatusFilePath()
	}
	return a.feature, a.pub
}

// Watch refreshes on every mount table change and at least every interval,
// until ctx is done.
func (a *Advertiser) Watch(ctx context.Context, interval time.Duration) error {
	return host.WatchMountinfo(ctx, a.src.Config().MountinfoPath, interval, a.Refresh)
}
