// Package advert keeps the node advertisement true: the NFD feature file
// (cgdelegate.io/supports-cgroup-options), the same label on the plugin's
// own Node object (NodeLabeler, when the plugin runs in a pod) and the
// status file that `cgdelegate status` reads, all built from one readiness
// report.
//
// Use it from the plugin binary: New over the running plugin (a Source),
// Refresh after Configure, Watch for the process lifetime, and Withdraw
// when the plugin stops. It reads the plugin's state through Source and
// never changes it; it writes only the two files and the one label.
// ClusterWithdrawer, for `cgdelegate node-label withdraw` (the chart's
// uninstall Job), removes that label from every Node; FleetReader, for
// `cgdelegate nodes`, reads every Node's label and annotations (through a
// kubeconfig or the pod's service account). Do not use its API client for
// anything else: it knows a merge patch of a Node's label and annotations
// and a paged list (of Nodes, and of the plugin's pods for their version).
package advert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
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
	// MountCheck says how the verdict is read (host.Checker.Mode).
	MountCheck() string
	// Runtime is the runtime seen in Configure; nil before it.
	Runtime() *status.Runtime
	// Pinning is the CPU pinning state; nil when pinning is off.
	Pinning() *status.Pinning
	// Delegation is the node's writable pods and containers, looked at
	// now (nri.Plugin.Delegation: cgroupfs reads of the writable pods).
	Delegation() *status.Delegation
	// RestartPending are the keys whose change waits for a restart
	// (nri.Plugin.RestartPending).
	RestartPending() []config.Change
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
	// readiness is the last published report without its allocation
	// table and time (readinessKey; nil before the first), and tableAt
	// when the last report with the table was published: a mount table
	// change is compared with them.
	readiness *status.Report
	tableAt   time.Time
	// label keeps the Node label; nil when there is none.
	label *NodeLabeler
	// failClosed is whether the runtime enforces required-plugins; nil
	// when nothing reports it.
	failClosed func() *status.FailClosed
}

// Option configures an Advertiser.
type Option func(*Advertiser)

// WithNodeLabel keeps the advertisement on the Node too, through l; a nil
// l is no label.
func WithNodeLabel(l *NodeLabeler) Option {
	return func(a *Advertiser) { a.label = l }
}

// WithFailClosed reports, in the status, the readiness and beside the node
// label, whether the runtime enforces required-plugins, as fc says at each
// refresh.
func WithFailClosed(fc func() *status.FailClosed) Option {
	return func(a *Advertiser) { a.failClosed = fc }
}

// New returns an Advertiser over src. A nil log discards.
func New(src Source, log *slog.Logger, opts ...Option) *Advertiser {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Advertiser{src: src, log: log}
	for _, o := range opts {
		o(a)
	}
	return a
}

// NodeLabel is the last result of the node label's requests; nil when
// there is no node label.
func (a *Advertiser) NodeLabel() *LabelResult {
	if a.label == nil {
		return nil
	}
	r := a.label.Result()
	return &r
}

// Report builds the readiness report now.
func (a *Advertiser) Report() status.Report {
	r := a.readinessReport()
	r.Pinning = a.src.Pinning()
	return r
}

// readinessReport is Report without the allocation table, which is the
// part that grows with the node.
func (a *Advertiser) readinessReport() status.Report {
	cfg := a.src.Config()
	st, err := a.src.HostStatus()
	r := status.Evaluate(cfg, st, err)
	r.MountCheck = a.src.MountCheck()
	r.Runtime = a.src.Runtime()
	if r.Runtime == nil {
		// No container creation reaches a plugin no runtime configured:
		// the node must not draw the pods that ask.
		r.Unsupport(status.ReasonNotConfigured, status.ErrNotConfigured.Error())
	}
	if a.failClosed != nil {
		r.FailClosed = a.failClosed()
		if w := status.FailClosedWarning(r.FailClosed); w != "" && r.Runtime != nil {
			r.Warnings = append(r.Warnings, w)
		}
	}
	r.NodeLabel = a.NodeLabel()
	r.RestartPending = a.src.RestartPending()
	for _, c := range r.RestartPending {
		r.Warnings = append(r.Warnings, status.RestartWarning(c))
	}
	r.PluginPID = os.Getpid()
	r.UpdatedAt = time.Now().UTC()
	return r
}

// readinessKey is what a mount table change is compared with: the report
// without its time, allocation table and ledger of writable pods.
func readinessKey(r status.Report) *status.Report {
	r.UpdatedAt, r.Pinning, r.Delegation = time.Time{}, nil, nil
	return &r
}

// Refresh re-runs the host checks, updates the feature file, asks for the
// node label to follow (sent in the background by Watch) and publishes the
// status file with the allocation table. The paths follow the config in
// force. It never waits for the API. After Withdraw it does nothing.
func (a *Advertiser) Refresh() { a.refresh(0) }

// refresh is Refresh, except that the allocation table (of the node's
// size to build and write) is published only when the last one is at
// least tableEvery old or the readiness changed. The feature file and the
// label follow the host checks every time.
func (a *Advertiser) refresh(tableEvery time.Duration) {
	now := time.Now()
	r := a.readinessReport()
	// Every refresh looks at the writable pods: the dying cgroups the node
	// budget counts, and the writable containers a host turned unsafe
	// leaves running, which make the node a problem of its own.
	d := a.src.Delegation()
	if n := len(d.Unsafe); n > 0 {
		r.Unsupport(status.ReasonUnsafeContainers, status.UnsafeProblem(d.Unsafe))
	}
	key := readinessKey(r)
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
	if a.label != nil {
		if r.FailClosed != nil {
			a.label.SetFailClosed(r.FailClosed.State)
		}
		a.label.SetWithReason(r.Supported, r.Reason)
	}
	if a.readiness != nil && reflect.DeepEqual(key, a.readiness) && time.Since(a.tableAt) < tableEvery {
		return
	}
	r.Pinning, r.Delegation = a.src.Pinning(), d
	if _, err := pub.Publish(r); err != nil {
		a.log.Error("cannot publish status", "path", r.Config.StatusFilePath(), "error", err)
		a.readiness = nil
		return
	}
	a.readiness, a.tableAt = key, now
}

// Withdraw removes the feature file and the node label, so that a node
// whose plugin has stopped does not advertise writable cgroups, and stops
// every later Refresh. ctx bounds the API request that removes the label.
// The status file stays: `cgdelegate status` sees that its publisher is
// gone. Call it when the plugin exits.
func (a *Advertiser) Withdraw(ctx context.Context) error {
	errs := []error{a.withdrawFile()}
	// Outside a.mu: a Refresh now does nothing, and waits for no request.
	if a.label != nil {
		errs = append(errs, a.label.Withdraw(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("withdraw the node advertisement: %w", err)
	}
	return nil
}

// withdrawFile stops every later Refresh and removes the feature file.
func (a *Advertiser) withdrawFile() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.withdrawn = true
	f := a.feature
	if path := a.src.Config().FeatureFilePath(); f == nil || f.Path() != path {
		f = newFeatureFile(path)
	}
	if err := f.Remove(); err != nil {
		return err
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

// RefreshGap is the least time between two refreshes that mount table
// changes cause. Each refresh checks the table (the whole table where
// statmount(2) can not answer: host.Checker) and writes the feature and
// status files, and a node with a
// hundred containers has hundreds of mounts and changes them with every
// container started or removed: without a gap that is work of the node's
// size for every container (under emulation it was the most of the
// plugin's CPU while a fleet grew, at one refresh a second). A change after
// quiet RefreshGap is seen at once. The feature file is read by NFD every
// minute by default; the verdict the handlers and the hook's checks use
// (host.Checker, asked on every writable container) follows every change,
// with no gap.
const RefreshGap = 5 * time.Second

// Watch refreshes on mount table changes (RefreshGap apart at the least)
// and at least every interval, and sends the node label's changes, until
// ctx is done. A change refreshes the feature file and the label, and the
// status file when the readiness changed; the status file's allocation
// table, which grows with the node while the mount table changes with
// every container, is rebuilt only when half an interval old (so that the
// refresh every interval always includes it).
func (a *Advertiser) Watch(ctx context.Context, interval time.Duration) error {
	if a.label != nil {
		go func() { _ = a.label.Run(ctx) }()
	}
	return host.WatchMountinfo(ctx, a.src.Config().MountinfoPath, interval, RefreshGap, func() { a.refresh(interval / 2) })
}
