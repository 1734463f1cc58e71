// Package nri holds cgdelegate's NRI event handlers. They only translate:
// an event goes to one decision (internal/writable for the cgroup mount,
// internal/cpumanager for CPUs), and the answer comes back as an NRI
// adjustment, container updates or an error.
//
// Use New to build a Plugin, with options for what plugs in from outside
// (metrics, an opt-in policy, a hook after Configure), and hand it to
// stub.New; then give the stub to SetUpdater so that updates of events that
// can not return them reach the runtime, and call StopUpdates once the stub
// has stopped, before the process exits. Host paths come from the config;
// nothing here has a path of its own.
package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// ErrRefused is wrapped by every error that refuses a container.
var ErrRefused = errors.New("cgdelegate refused the container")

// setup is everything built from one config: replaced as a whole when the
// runtime sends a new config in Configure.
type setup struct {
	cfg     config.Config
	checker *host.Checker
	decider *writable.Decider
	fs      *host.FS
	bounds  *host.PodBounds
}

// newSetup builds the setup for cfg. The mount-table checker of old is kept
// when it looks at the same table and root, with its open table and what it
// learned of the kernel.
func (p *Plugin) newSetup(cfg config.Config, old *setup) *setup {
	fs := host.NewFS(cfg.CgroupRoot, cfg.SysfsRoot)
	checker := host.NewChecker(cfg.MountinfoPath, cfg.CgroupRoot)
	if old != nil && old.cfg.MountinfoPath == cfg.MountinfoPath && old.cfg.CgroupRoot == cfg.CgroupRoot {
		checker = old.checker
	}
	return &setup{
		cfg:     cfg,
		checker: checker,
		decider: writable.New(cfg, p.opts.admissionFor(cfg, p.runtimeName())...),
		fs:      fs,
		bounds:  host.NewPodBounds(fs),
	}
}

// Plugin is the cgdelegate NRI plugin.
type Plugin struct {
	log  *slog.Logger
	opts options

	// mu orders config changes (Configure, Reload): base is the config
	// before any blob (the file), blob the last Configure blob.
	mu   sync.Mutex
	base config.Config
	blob string

	h atomic.Pointer[setup]
	// pin is the CPU pinning state; nil when cpuPinning is off.
	pin  atomic.Pointer[cpumanager.Manager]
	send *cpumanager.Sender
	// runtime is what Configure said about the runtime; nil before it.
	runtime atomic.Pointer[status.Runtime]
	// pending are the keys that need a restart the last reload asked to
	// change (it was refused); nil after a reload that changed none.
	pending atomic.Pointer[[]config.Change]
	// configured is called after every successful Configure or Reload.
	configured atomic.Pointer[func()]
	// writable is the node's live writable pods and containers: the node
	// budget of delegated cgroups, and who runs unsafely when the host
	// turns unsafe.
	writable *ledger
	// pinned names the pinned pods for the Events of updates given up;
	// nil without Events.
	pinned *pinnedPods
}

// New returns a plugin for cfg. base is the config before any Configure
// blob is merged in.
func New(base config.Config, log *slog.Logger, opts ...Option) (*Plugin, error) {
	if err := base.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Plugin{log: log, base: base, opts: newOptions(opts), writable: newLedger()}
	p.h.Store(p.newSetup(base, nil))
	p.pin.Store(cpumanager.New(base, log))
	p.send = cpumanager.NewSender(log, p.opts.metrics, p.pin.Load, func() cpumanager.CgroupWriter { return p.h.Load().fs })
	if p.opts.hold != nil {
		p.send.SetHold(*p.opts.hold)
	}
	if p.opts.post != nil {
		p.pinned = newPinnedPods()
		p.send.SetGiveUp(p.gaveUp)
	}
	return p, nil
}

// SetUpdater attaches the runtime connection (the stub) used to send
// container updates from events that can not return them.
func (p *Plugin) SetUpdater(u cpumanager.Updater) { p.send.SetUpdater(u) }

// OnConfigured calls fn after every successful Configure or Reload (the
// node advertisement refreshes there). It may be called at any time; a
// Configure before it calls nothing.
func (p *Plugin) OnConfigured(fn func()) { p.configured.Store(&fn) }

func (p *Plugin) notifyConfigured() {
	if fn := p.configured.Load(); fn != nil {
		(*fn)()
	}
}

// WaitUpdates blocks until every queued container update has been sent,
// given up after its retries, or dropped; before the runtime connection is
// attached it returns at once (cpumanager.Sender.Wait).
func (p *Plugin) WaitUpdates() { p.send.Wait() }

// StopUpdates stops sending container updates for good: what is queued,
// retries included, is dropped, and a send under way is waited for until
// ctx is done (cpumanager.Sender.Close). Call it before the process exits.
func (p *Plugin) StopUpdates(ctx context.Context) error { return p.send.Close(ctx) }

// Config returns the config in force.
func (p *Plugin) Config() config.Config { return p.h.Load().cfg }

// HostStatus is the mount-table verdict now.
func (p *Plugin) HostStatus() (host.Status, error) { return p.h.Load().checker.Check() }

// MountCheck says how the mount-table verdict is read (host.Checker.Mode).
func (p *Plugin) MountCheck() string { return p.h.Load().checker.Mode() }

// RecheckKubeletState reads the kubelet's CPU manager state again if its
// file changed (one stat otherwise); pinning stops when the kubelet's
// static policy became active (cpumanager.Manager.RecheckKubelet). It reports
// whether the pinning status changed.
func (p *Plugin) RecheckKubeletState() bool { return p.pin.Load().RecheckKubelet(p.log) }

// Runtime is the runtime seen in Configure; nil before it.
func (p *Plugin) Runtime() *status.Runtime {
	if ri := p.runtime.Load(); ri != nil {
		rt := *ri
		return &rt
	}
	return nil
}

// runtimeName is the name of the runtime seen in Configure; "" before it.
func (p *Plugin) runtimeName() string {
	if ri := p.runtime.Load(); ri != nil {
		return ri.Name
	}
	return ""
}

// RestartPending lists the keys that need a restart whose change the last
// reload asked for, and was refused: the config file says one value, the
// plugin runs with another until it restarts. Nil when there are none.
func (p *Plugin) RestartPending() []config.Change {
	if c := p.pending.Load(); c != nil {
		return slices.Clone(*c)
	}
	return nil
}

// Pinning is the CPU pinning state; nil when pinning is off.
func (p *Plugin) Pinning() *status.Pinning { return p.pin.Load().Status() }

// Configure merges the runtime's config blob, records the runtime and
// subscribes to the events cgdelegate needs.
func (p *Plugin) Configure(_ context.Context, blob, runtime, version string) (api.EventMask, error) {
	p.mu.Lock()
	cfg, err := config.Merge(p.base, blob)
	if err != nil {
		p.mu.Unlock()
		return 0, fmt.Errorf("configure from %s %s: %w", runtime, version, err)
	}
	for _, c := range config.Changes(p.base, cfg, config.PartStartOnly) {
		p.log.Warn("the runtime's config sets a key read only at start-up, from the config file; the file's value stays",
			"key", c.Key, "inForce", c.Old, "runtimeValue", c.New)
	}
	cfg.StartOnly = p.base.StartOnly
	p.blob = blob
	// The runtime first: admission rules built from cfg may depend on it.
	p.runtime.Store(&status.Runtime{Name: runtime, Version: version})
	if old := p.apply(cfg); cpumanager.ConfigChanged(old, cfg) || !p.pin.Load().Active() {
		// Synchronize follows Configure and fills the new policy. Inactive
		// pinning holds nothing worth keeping (a suspended state is
		// stale), so it is built again: it resumes unless the kubelet's
		// static CPU manager is still active.
		p.pin.Store(cpumanager.New(cfg, p.log))
	}
	p.mu.Unlock()
	p.log.Info("configured", "runtime", runtime, "version", version, "blob", len(blob) > 0)
	p.notifyConfigured()
	// RemovePodSandbox lets the pod bounds memo forget the pod.
	events := "CreateContainer,RemovePodSandbox"
	if p.pin.Load().Active() {
		events += "," + pinningEvents
	}
	return api.MustParseEventMask(events), nil
}

// ErrReload is wrapped by a config Reload refuses; the config in force
// stays.
var ErrReload = errors.New("config not reloaded")

// Reload takes base as the new config before any blob (a re-read config
// file): the runtime's last Configure blob is merged over it again, and the
// result replaces the config in force, as Configure does. A config that
// does not validate, or that changes a key that needs a restart
// (config.RestartKeys: the CPU pinning settings, which need the runtime's
// Synchronize and event subscription, and the keys read at start-up), is
// refused with an error naming each such key with its value in force and
// the value asked, and the config in force stays.
func (p *Plugin) Reload(base config.Config) error {
	p.mu.Lock()
	cfg, err := config.Merge(base, p.blob)
	if err != nil {
		p.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrReload, err)
	}
	// The blob's start-only keys never apply (Configure says so).
	cfg.StartOnly = base.StartOnly
	if changes := config.RestartChanges(p.h.Load().cfg, cfg); len(changes) > 0 {
		p.pending.Store(&changes)
		p.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrReload, config.RestartError(changes))
	}
	p.pending.Store(nil)
	p.base = base
	p.apply(cfg)
	withBlob := p.blob != ""
	p.mu.Unlock()
	p.log.Info("config reloaded", "runtimeBlobMergedOver", withBlob)
	p.notifyConfigured()
	return nil
}

// apply puts cfg in force and returns the config it replaced; the caller
// holds p.mu. A replaced mount-table checker is closed.
func (p *Plugin) apply(cfg config.Config) config.Config {
	old := p.h.Load()
	h := p.newSetup(cfg, old)
	p.h.Store(h)
	if h.checker != old.checker {
		_ = old.checker.Close()
	}
	return old.cfg
}

// CreateContainer decides the container's cgroup mount (writable.Decider),
// puts the pod bounds in place, and pins its CPUs when cpuPinning is on.
//
// The CPU policy goes last: the cgroup checks can fail, the policy step then
// never ran, so a refused container never holds CPUs. The returned updates
// are the other containers whose pool shrank, applied by the runtime with
// this container's creation.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (adj *api.ContainerAdjustment, upd []*api.ContainerUpdate, err error) {
	if pod == nil || ctr == nil {
		p.opts.metrics.Container(writable.Unchanged.String(), nil) // left as it is
		return nil, nil, nil
	}
	h := p.h.Load()
	plan, err := h.decider.Decide(writable.Input{Pod: pod, Ctr: ctr, Host: h.checker})
	undo := func() {}
	if err == nil && plan.Delegates() {
		want := plan.Bounds.Descendants
		undo, err = p.writable.admit(pod, ctr, plan.PodCgroup, want, h.cfg.NodeMaxDelegatedCgroups)
		if err == nil {
			if err = p.ensureBounds(h, pod, &plan); err == nil {
				plan.Bounds.Descendants = p.writable.settle(pod.GetId(), want, plan.Bounds.Descendants)
			}
		}
	}
	if err == nil {
		adj, upd, err = p.adjust(pod, ctr, &plan)
	}
	if err != nil {
		if undo != nil {
			undo()
		}
		p.opts.metrics.Container("refused", err)
		err = fmt.Errorf("%w %s/%s: %w", ErrRefused, pod.GetName(), ctr.GetName(), err)
		p.eventLog(pod, ctr).Error("container refused", "error", err)
		return nil, nil, err
	}
	if o := p.opts.outcomes; o != nil {
		o.Inc(int(plan.Outcome)) // one atomic add; none for Unchanged once it is derived (metrics.Outcomes)
	} else {
		p.opts.metrics.Container(plan.Outcome.String(), nil)
	}
	plan.Log(p.log, pod, ctr)
	return adj, upd, nil
}

// ensureBounds puts the plan's bounds on the pod cgroup.
func (p *Plugin) ensureBounds(h *setup, pod *api.PodSandbox, plan *writable.Plan) error {
	got, err := h.bounds.Ensure(plan.PodCgroup, plan.Bounds)
	if err != nil {
		return writable.BoundsError(h.fs.Dir(plan.PodCgroup), pod.GetLinux().GetCgroupParent(), err)
	}
	plan.Bounds = got
	return nil
}

// Delegation reads the writable pods' and the cgroup root's cgroup.stat,
// drops the writable containers that stopped, logs every writable
// container found running on a host that is no longer safe (once), and
// returns the ledger for the status and the metrics. It does cgroupfs
// reads of the node's writable pods: call it off the container creation
// path (the advertisement's refresh, a scrape).
func (p *Plugin) Delegation() *status.Delegation {
	h := p.h.Load()
	st, err := h.checker.Check()
	if err == nil {
		err = st.Err()
	}
	return p.writable.look(p.log, h.fs, h.cfg.NodeMaxDelegatedCgroups, err, p.opts.post)
}

// TightenBounds reads the writable pods' and the cgroup root's
// cgroup.stat and puts each writable pod's cgroup.max.descendants at its
// cap less its dying cgroups, so that a pod that churns cgroups is refused
// its own mkdir once its live and dying cgroups reach its cap. Delegation
// does the same; this is the cheap part, to call more often (every
// TightenEvery). It does cgroupfs reads and writes: call it off the
// container creation path.
func (p *Plugin) TightenBounds() {
	p.writable.tighten(p.log, p.h.Load().fs)
}

// TightenDelay is how long the daemon waits before its next
// TightenBounds: TightenFast while a writable pod's dying cgroups grew at
// the last one (a pod that churns cgroups can go past its cap by what it
// churns until the next), TightenEvery otherwise.
func (p *Plugin) TightenDelay() time.Duration {
	if p.writable.churning() {
		return TightenFast
	}
	return TightenEvery
}

// TightenEvery and TightenFast are the delays between two TightenBounds
// (TightenDelay): each reads the cgroup.stat of every writable pod and of
// the cgroup root, and writes only the bounds that change.
const (
	TightenEvery = time.Second
	TightenFast  = 200 * time.Millisecond
)

// eventLog is a logger for one event; the plugin's logger is never changed.
func (p *Plugin) eventLog(pod *api.PodSandbox, ctr *api.Container) *slog.Logger {
	return logging.Event(p.log, pod, ctr)
}
