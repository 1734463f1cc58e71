// Package nri holds cgdelegate's NRI event handlers. They are thin: they
// translate an event into calls to optin, hostcheck, ocispec and cgroupfs
// (writable cgroups) or podres and policy (CPU pinning), and turn the
// answers into an NRI adjustment, container updates or an error.
//
// Use New to build a Plugin and hand it to stub.New, then give the stub to
// SetUpdater so that updates of events that can not return them reach the
// runtime. Host paths come from the config; nothing here has a path of its
// own.
//
// With cpuPinning on, the plugin also subscribes to RunPodSandbox,
// StopContainer, RemoveContainer and RemovePodSandbox, and rebuilds its
// allocation state from every Synchronize (see pinning.go).
package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/cgroupfs"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/feature"
	"github.com/cgdelegate/cgdelegate/internal/hostcheck"
	"github.com/cgdelegate/cgdelegate/internal/optin"
	"github.com/cgdelegate/cgdelegate/internal/policy"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/ocispec"
)

// ErrRefused is wrapped by every error that refuses a container.
var ErrRefused = errors.New("cgdelegate refused the container")

// host is everything built from one config: replaced as a whole when the
// runtime sends a new config in Configure.
type host struct {
	cfg     config.Config
	checker *hostcheck.Checker
	fs      *cgroupfs.FS
	feature *feature.File
	status  *status.Publisher
	bounds  boundsCache
}

func newHost(cfg config.Config) *host {
	return &host{
		cfg:     cfg,
		checker: hostcheck.NewChecker(cfg.MountinfoPath, cfg.CgroupRoot),
		fs:      cgroupfs.New(cfg.CgroupRoot, cfg.SysfsRoot),
		feature: feature.New(cfg.FeatureFilePath()),
		status:  status.NewPublisher(cfg.StatusFilePath(), statusRefresh),
	}
}

// statusRefresh is how often an unchanged status report is rewritten, so
// its UpdatedAt shows the plugin is alive.
const statusRefresh = 30 * time.Second

// Plugin is the cgdelegate NRI plugin.
type Plugin struct {
	log  *slog.Logger
	base config.Config

	h atomic.Pointer[host]
	// pin is the CPU pinning state; nil when cpuPinning is off.
	pin  atomic.Pointer[pinning]
	send *sender

	mu      sync.Mutex
	runtime *status.Runtime
}

// New returns a plugin for cfg. base is the config before any Configure
// blob is merged in.
func New(base config.Config, log *slog.Logger) (*Plugin, error) {
	if err := base.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Plugin{log: log, base: base}
	p.h.Store(newHost(base))
	p.pin.Store(newPinning(base, log))
	p.send = newSender(log, p.currentAssignment)
	return p, nil
}

// SetUpdater attaches the runtime connection (the stub) used to send
// container updates from events that can not return them.
func (p *Plugin) SetUpdater(u Updater) { p.send.setUpdater(u) }

// WaitUpdates blocks until every queued container update has been sent.
func (p *Plugin) WaitUpdates() { p.send.wait() }

func (p *Plugin) currentAssignment(id string) (policy.Assignment, bool) {
	pn := p.pin.Load()
	if !pn.active() {
		return policy.Assignment{}, false
	}
	return pn.policy.Assignment(id)
}

// Config returns the config in force.
func (p *Plugin) Config() config.Config { return p.h.Load().cfg }

// Configure merges the runtime's config blob, records the runtime and
// subscribes to the events cgdelegate needs.
func (p *Plugin) Configure(_ context.Context, blob, runtime, version string) (api.EventMask, error) {
	cfg, err := config.Merge(p.base, blob)
	if err != nil {
		return 0, fmt.Errorf("configure from %s %s: %w", runtime, version, err)
	}
	old := p.h.Swap(newHost(cfg))
	if old != nil {
		_ = old.checker.Close()
	}
	if old == nil || pinningChanged(old.cfg, cfg) {
		// Synchronize follows Configure and fills the new policy.
		p.pin.Store(newPinning(cfg, p.log))
	}
	p.mu.Lock()
	p.runtime = &status.Runtime{Name: runtime, Version: version}
	p.mu.Unlock()
	p.log.Info("configured", "runtime", runtime, "version", version, "blob", len(blob) > 0)
	p.Refresh()
	// RemovePodSandbox lets the pod bounds cache forget the pod.
	events := "CreateContainer,RemovePodSandbox"
	if p.pin.Load().active() {
		events += "," + pinningEvents
	}
	return api.MustParseEventMask(events), nil
}

// pinningChanged reports whether the CPU pinning state must be rebuilt.
func pinningChanged(a, b config.Config) bool {
	return a.CPUPinning != b.CPUPinning || a.TopologyScope != b.TopologyScope ||
		a.ReservedCPUs != b.ReservedCPUs || a.SysfsRoot != b.SysfsRoot ||
		a.KubeletCPUManagerState != b.KubeletCPUManagerState ||
		a.AllowKubeletStaticCPUManager != b.AllowKubeletStaticCPUManager
}

// Report builds the current readiness report.
func (p *Plugin) Report() status.Report {
	h := p.h.Load()
	st, err := h.checker.Check()
	r := status.Evaluate(h.cfg, st, err)
	p.mu.Lock()
	if p.runtime != nil {
		rt := *p.runtime
		r.Runtime = &rt
	}
	p.mu.Unlock()
	r.Pinning = p.pin.Load().report()
	r.PluginPID = os.Getpid()
	r.UpdatedAt = time.Now().UTC()
	return r
}

// Refresh re-runs the host checks, updates the NFD feature file and
// publishes the status file.
func (p *Plugin) Refresh() {
	h := p.h.Load()
	r := p.Report()
	if wrote, err := h.feature.Set(r.Supported); err != nil {
		p.log.Error("cannot update the feature file", "path", h.feature.Path(), "error", err)
	} else if wrote {
		p.log.Info("node advertisement changed", "label", feature.Label, "supported", r.Supported, "problems", r.Problems)
	}
	if _, err := h.status.Publish(r); err != nil {
		p.log.Error("cannot publish status", "path", h.cfg.StatusFilePath(), "error", err)
	}
}

// Watch keeps the node advertisement current: it refreshes on every mount
// table change and at least every interval, until ctx is done.
func (p *Plugin) Watch(ctx context.Context, interval time.Duration) error {
	return hostcheck.Watch(ctx, p.h.Load().cfg.MountinfoPath, interval, p.Refresh)
}

// CreateContainer makes an opted-in container's cgroups writable, guards
// containers the runtime already made writable, pins its CPUs when
// cpuPinning is on, and refuses every unsafe case with an error that names
// the cause.
//
// The CPU policy goes last: the cgroup checks can fail, the policy step then
// never ran, so a refused container never holds CPUs. The returned updates
// are the other containers whose pool shrank, applied by the runtime with
// this container's creation.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (adj *api.ContainerAdjustment, upd []*api.ContainerUpdate, err error) {
	if pod == nil || ctr == nil {
		return nil, nil, nil
	}
	l := p.eventLog(pod, ctr)
	defer func() {
		if err != nil {
			l.Error("container refused", "error", err)
		}
	}()
	h := p.h.Load()
	adj, err = p.cgroupAdjustment(h, l, pod, ctr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w %s/%s: %w", ErrRefused, pod.GetName(), ctr.GetName(), err)
	}
	if !p.pin.Load().active() {
		return adj, nil, nil
	}
	if adj == nil {
		adj = &api.ContainerAdjustment{}
	}
	upd, err = p.pinContainer(l, pod, ctr, adj)
	if err != nil {
		return nil, nil, fmt.Errorf("%w %s/%s: %w", ErrRefused, pod.GetName(), ctr.GetName(), err)
	}
	return adj, upd, nil
}

// cgroupAdjustment decides the cgroup mount of one container.
func (p *Plugin) cgroupAdjustment(h *host, l *slog.Logger, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	req, err := optin.Resolve(pod, ctr)
	if err != nil {
		return nil, err
	}
	mnt := ocispec.Inspect(ctr.GetMounts())
	runtimeWritable := mnt.Mount != nil && mnt.ReadWrite && !mnt.Bind

	switch {
	case mnt.PrivilegedLike:
		if req.Mode == optin.Writable {
			l.Info("privileged container already has read-write cgroups; left alone", "annotation", req.Source)
		}
		return nil, nil
	case req.Mode == optin.Writable:
		return p.makeWritable(h, l, pod, ctr, "annotation "+req.Source)
	case req.Mode == optin.ReadOnly && runtimeWritable:
		adj := &api.ContainerAdjustment{}
		adj.RemoveMount(ocispec.CgroupMountPoint)
		adj.AddMount(ocispec.ReadOnlyMount(mnt.Mount))
		l.Info("runtime made cgroups writable; made read-only as annotated", "annotation", req.Source)
		return adj, nil
	case req.Mode == optin.Unset && runtimeWritable:
		return p.guard(h, l, pod, ctr)
	}
	return nil, nil
}

// guard handles a container whose runtime already made /sys/fs/cgroup
// writable (containerd cgroup_writable, CRI-O's annotation handled by the
// runtime alone). In enforce mode it gets the full safety treatment.
func (p *Plugin) guard(h *host, l *slog.Logger, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	if h.cfg.Guard == config.GuardOff {
		return nil, nil
	}
	adj, err := p.makeWritable(h, l, pod, ctr, "the runtime (a read-write /sys/fs/cgroup in the spec)")
	if err != nil && h.cfg.Guard == config.GuardWarn {
		l.Warn("runtime-writable cgroups on an unsafe host; allowed because guard is warn", "error", err)
		return nil, nil
	}
	return adj, err
}

// makeWritable runs every safety check in order and returns the
// adjustment, or an error naming the first check that failed. Pod bounds
// are written only after the spec checks pass.
func (p *Plugin) makeWritable(h *host, l *slog.Logger, pod *api.PodSandbox, ctr *api.Container, why string) (*api.ContainerAdjustment, error) {
	st, err := h.checker.Check()
	if err != nil {
		return nil, fmt.Errorf("writable cgroups requested by %s, but the host check failed: %w", why, err)
	}
	if err := st.Err(); err != nil {
		return nil, fmt.Errorf("writable cgroups requested by %s are unsafe on this node: %w", why, err)
	}
	plan, err := ocispec.PlanWritable(ctr)
	if err != nil {
		return nil, fmt.Errorf("writable cgroups requested by %s: %w", why, err)
	}
	want, err := podBounds(pod, h.cfg)
	if err != nil {
		return nil, err
	}
	parent := pod.GetLinux().GetCgroupParent()
	podRel, err := cgroupfs.PodPath(parent)
	if err != nil {
		return nil, fmt.Errorf("writable cgroups need pod bounds, but the pod cgroup is unknown: %w", err)
	}
	podDir := h.fs.Dir(podRel)
	got, cached := h.bounds.lookup(podDir, want)
	if !cached {
		got, err = h.fs.ApplyBounds(podRel, want)
		if err != nil {
			return nil, fmt.Errorf("writable cgroups need pod bounds on %q (cgroup parent %q): %w", podDir, parent, err)
		}
		h.bounds.store(podDir, want, got)
	}

	adj := &api.ContainerAdjustment{}
	plan.Apply(adj)
	if !ocispec.HasHook(ctr, h.cfg.HookPath) {
		adj.AddHooks(&api.Hooks{CreateRuntime: []*api.Hook{ocispec.Hook(h.cfg.HookPath, hookArgs(h.cfg, podRel, want), h.cfg.HookTimeout)}})
	}
	l.Info("cgroups made writable", "reason", why, "podCgroup", podRel, "bounds", got.String(), "addedCgroupNS", plan.AddCgroupNS)
	return adj, nil
}

// podBounds are the node caps, lowered by the pod's annotations.
func podBounds(pod *api.PodSandbox, cfg config.Config) (cgroupfs.Bounds, error) {
	d, errD := optin.PodBound(pod, optin.MaxDescendantsKey, cfg.MaxDescendants)
	depth, errDepth := optin.PodBound(pod, optin.MaxDepthKey, cfg.MaxDepth)
	if err := errors.Join(errD, errDepth); err != nil {
		return cgroupfs.Bounds{}, err
	}
	return cgroupfs.Bounds{Descendants: d, Depth: depth}, nil
}

// hookArgs tell the hook what to verify at every start.
func hookArgs(cfg config.Config, podRel string, b cgroupfs.Bounds) []string {
	return []string{
		"--cgroup-root", cfg.CgroupRoot,
		"--pod-cgroup", podRel,
		"--max-descendants", strconv.Itoa(b.Descendants),
		"--max-depth", strconv.Itoa(b.Depth),
	}
}
