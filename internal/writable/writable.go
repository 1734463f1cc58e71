package writable

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/spec"
)

// Outcome is what the decision does to the container's cgroup mount.
type Outcome int

const (
	// Unchanged leaves the mount as the runtime built it: nothing was
	// asked, guard is off, or guard is warn and let an unsafe one through
	// (Plan.Warning).
	Unchanged Outcome = iota
	// Privileged leaves a privileged container's read-write cgroups alone.
	Privileged
	// ReadOnly turns a runtime-writable mount read-only, as annotated.
	ReadOnly
	// Writable makes the mount writable, as annotated.
	Writable
	// Guarded keeps a mount the runtime made writable, with the same
	// checks, bounds and hook as Writable.
	Guarded
)

func (o Outcome) String() string {
	switch o {
	case Privileged:
		return "privileged"
	case ReadOnly:
		return "readonly"
	case Writable:
		return "writable"
	case Guarded:
		return "guarded"
	}
	return "unchanged"
}

// Host gives the mount-table verdict: the parsed status, or the error
// reading it. It is asked only when a check needs it, so a container that
// asks for nothing costs no host check. *host.Checker is one.
type Host interface {
	Check() (host.Status, error)
}

// HostFunc adapts a function to Host.
type HostFunc func() (host.Status, error)

// Check implements Host.
func (f HostFunc) Check() (host.Status, error) { return f() }

// Input is one container to decide on.
type Input struct {
	Pod  *api.PodSandbox
	Ctr  *api.Container
	Host Host
}

// Plan is the decision for one container. Its Hook and the adjustment it
// returns are shared between the plans of one pod: treat them as
// read-only.
type Plan struct {
	Outcome Outcome
	// Request is what the annotations asked for.
	Request Request
	// Warning is the refusal guard: warn let through (Outcome Unchanged).
	Warning error
	// ReadOnlyMount replaces /sys/fs/cgroup when Outcome is ReadOnly.
	ReadOnlyMount *api.Mount
	// Spec are the mount and namespace changes (Writable, Guarded).
	Spec spec.Plan
	// PodCgroup is the pod cgroup relative to the cgroup root, and Bounds
	// the bounds it must carry before the container starts.
	PodCgroup string
	Bounds    host.Bounds
	// Hook is the createRuntime hook to add; nil when the container
	// already runs it (a hooks.d definition).
	Hook *api.Hook

	// shared is the pod's read-only adjustment of this shape.
	shared *api.ContainerAdjustment
}

// runtimeReason names the runtime as the one that asked for writable
// cgroups (guard).
const runtimeReason = "the runtime (a read-write /sys/fs/cgroup in the spec)"

// Reason says who asked for writable cgroups: "annotation <key>", or the
// runtime for a guarded container. Empty when nobody did.
func (p *Plan) Reason() string {
	switch {
	case p.Request.Mode == ModeWritable:
		return "annotation " + p.Request.Source
	case p.Outcome == Guarded || p.Warning != nil:
		return runtimeReason
	}
	return ""
}

// Delegates reports whether the plan makes the container's cgroups
// writable (and so needs the pod bounds in place).
func (p *Plan) Delegates() bool { return p.Outcome == Writable || p.Outcome == Guarded }

// Adjustment translates the plan into an NRI adjustment: nil when nothing
// changes. A writable container's adjustment is shared by every container
// of its pod with the same spec shape (NRI only marshals it): never modify
// it; use NewAdjustment to add to it.
func (p *Plan) Adjustment() *api.ContainerAdjustment {
	if p.shared != nil {
		return p.shared
	}
	return p.NewAdjustment()
}

// NewAdjustment is Adjustment in a new object the caller may add to.
func (p *Plan) NewAdjustment() *api.ContainerAdjustment {
	switch p.Outcome {
	case ReadOnly:
		adj := &api.ContainerAdjustment{}
		adj.RemoveMount(spec.CgroupMountPoint)
		adj.AddMount(p.ReadOnlyMount)
		return adj
	case Writable, Guarded:
		return p.writableAdjustment(boundsEnv(p.Bounds))
	}
	return nil
}

// Env vars a writable container gets, so that cgdelegate-init check (and
// any program inside) knows the pod's cgroup budget. The container cannot
// read them from the pod cgroup: it sits above its cgroup namespace root.
// github.com/cgdelegate/cgdelegate/delegate reads them.
const (
	EnvMaxDescendants = "CGDELEGATE_MAX_DESCENDANTS"
	EnvMaxDepth       = "CGDELEGATE_MAX_DEPTH"
)

// boundsEnv returns the values of EnvMaxDescendants and EnvMaxDepth.
func boundsEnv(b host.Bounds) [2]string {
	return [2]string{boundValue(b.Descendants), boundValue(b.Depth)}
}

func boundValue(n int) string {
	if n == host.Unlimited {
		return "max"
	}
	return strconv.Itoa(n)
}

// writableAdj holds every piece of a writable container's adjustment, so
// that building it, on every writable container's start, is one allocation.
type writableAdj struct {
	adj    api.ContainerAdjustment
	mounts [2]*api.Mount
	marker api.Mount
	mount  api.Mount
	hooks  api.Hooks
	hook   [1]*api.Hook
	env    [2]*api.KeyValue
	kv     [2]api.KeyValue
}

// writableAdjustment builds the adjustment; env are the values of
// EnvMaxDescendants and EnvMaxDepth (boundsEnv).
func (p *Plan) writableAdjustment(env [2]string) *api.ContainerAdjustment {
	w := &writableAdj{}
	w.kv = [2]api.KeyValue{{Key: EnvMaxDescendants, Value: env[0]}, {Key: EnvMaxDepth, Value: env[1]}}
	w.env = [2]*api.KeyValue{&w.kv[0], &w.kv[1]}
	w.adj.Env = w.env[:]
	n := 0
	if p.Spec.RemoveOld {
		w.marker.Destination = removedCgroupMount
		w.mounts[n] = &w.marker
		n++
	}
	spec.SetWritableMount(&w.mount)
	w.mounts[n] = &w.mount
	w.adj.Mounts = w.mounts[: n+1 : n+1]
	if p.Spec.AddCgroupNS {
		w.adj.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "cgroup"})
	}
	if p.Hook != nil {
		w.hook[0] = p.Hook
		w.hooks.CreateRuntime = w.hook[:]
		w.adj.Hooks = &w.hooks
	}
	return &w.adj
}

// removedCgroupMount is NRI's removal marker for the mount at
// /sys/fs/cgroup.
var removedCgroupMount = api.MarkForRemoval(spec.CgroupMountPoint)

// Decider decides for one config. Build a new one when the config changes.
type Decider struct {
	cfg    config.Config
	checks []Check
	// extra is how many of checks are admission checks (they come first).
	extra int
	pods  podMemo
}

// New returns a Decider for cfg. extra checks (an opt-in policy) run
// first, before the host and spec checks, on every container that would
// get writable cgroups, guarded ones included; their refusals match
// ErrNotAdmitted.
func New(cfg config.Config, extra ...Check) *Decider {
	checks := make([]Check, 0, len(extra)+len(builtin))
	checks = append(checks, extra...)
	return &Decider{cfg: cfg, checks: append(checks, builtin...), extra: len(extra)}
}

// Decide returns the plan for one container, or the error that refuses it.
func (d *Decider) Decide(in Input) (Plan, error) {
	req, err := ResolveRequest(in.Pod, in.Ctr)
	if err != nil {
		return Plan{}, err
	}
	plan := Plan{Request: req}
	mnt := spec.Inspect(in.Ctr.GetMounts())
	runtimeWritable := mnt.RuntimeWritable()
	switch {
	case mnt.PrivilegedLike:
		plan.Outcome = Privileged
	case req.Mode == ModeWritable:
		plan.Outcome = Writable
		err = d.run(in, mnt, &plan)
	case req.Mode == ModeReadOnly && runtimeWritable:
		plan.Outcome, plan.ReadOnlyMount = ReadOnly, spec.ReadOnlyMount(mnt.Mount)
	case req.Mode == ModeUnset && runtimeWritable && d.cfg.Guard != config.GuardOff:
		plan.Outcome = Guarded
		err = d.run(in, mnt, &plan)
		if err != nil && d.cfg.Guard == config.GuardWarn {
			return Plan{Request: req, Warning: err}, nil
		}
	}
	if err != nil {
		return Plan{}, err
	}
	return plan, nil
}

// run runs every check in order on a copy of *plan; the first error
// refuses the container, else the copy becomes the plan.
func (d *Decider) run(in Input, mnt spec.MountState, plan *Plan) error {
	c := candidates.Get().(*candidate)
	c.Candidate = Candidate{Input: in, Config: &d.cfg, Mounts: mnt, decider: d}
	c.plan = *plan
	c.Plan = &c.plan
	err := d.check(c)
	*plan = c.plan
	*c = candidate{}
	candidates.Put(c)
	return err
}

func (d *Decider) check(c *candidate) error {
	for i, check := range d.checks {
		if err := check(&c.Candidate); err != nil {
			if i < d.extra {
				return refusal.New(refusal.Policy, mark(err, ErrNotAdmitted))
			}
			return err
		}
	}
	if spec.HasHook(c.Ctr, d.cfg.HookPath) {
		c.plan.Hook = nil
	}
	c.plan.shared = c.pod.adjustment(&c.plan)
	return nil
}

// candidate is a Candidate with the plan it fills in. They are recycled:
// every container start that asks for writable cgroups needs one, and a
// Check must not keep the *Candidate it is given.
type candidate struct {
	Candidate
	plan Plan
}

var candidates = sync.Pool{New: func() any { return new(candidate) }}

// podMemo remembers what is the same for every container of a pod: its
// cgroup path and hook, by cgroup parent and bounds. It is a cache of a
// pure function, bounded so that it can not grow without limit.
type podMemo struct {
	// last is the pod asked for last: a pod's containers are created one
	// after another, so most lookups end here without a lock.
	last atomic.Pointer[podPart]

	mu sync.Mutex
	m  map[podKey]*podPart
}

type podKey struct {
	parent string
	bounds host.Bounds
}

type podPart struct {
	key  podKey
	rel  string
	hook *api.Hook
	// env is boundsEnv(key.bounds), formatted once per pod.
	env [2]string
	// adjs are the pod's writable adjustments, by shape (see shape), built
	// the first time a container needs one.
	adjs [8]atomic.Pointer[api.ContainerAdjustment]
}

// shape indexes the writable adjustments a pod's containers can need.
func shape(p *Plan) int {
	i := 0
	if p.Spec.RemoveOld {
		i |= 1
	}
	if p.Spec.AddCgroupNS {
		i |= 2
	}
	if p.Hook != nil {
		i |= 4
	}
	return i
}

// adjustment returns the pod's adjustment for the plan's shape. Two
// containers racing to build it may both do so; one of the two is kept.
func (part *podPart) adjustment(p *Plan) *api.ContainerAdjustment {
	slot := &part.adjs[shape(p)]
	if adj := slot.Load(); adj != nil {
		return adj
	}
	slot.CompareAndSwap(nil, p.writableAdjustment(part.env))
	return slot.Load()
}

// podMemoMax caps the memo; past it the memo starts over.
const podMemoMax = 4096

// pod returns the pod cgroup path and hook for a cgroup parent and bounds.
func (d *Decider) pod(parent string, b host.Bounds) (*podPart, error) {
	k := podKey{parent, b}
	if last := d.pods.last.Load(); last != nil && last.key == k {
		return last, nil
	}
	d.pods.mu.Lock()
	part, ok := d.pods.m[k]
	d.pods.mu.Unlock()
	if ok {
		d.pods.last.Store(part)
		return part, nil
	}
	rel, err := host.PodPath(parent)
	if err != nil {
		return nil, err
	}
	part = &podPart{key: k, rel: rel, hook: spec.Hook(d.cfg.HookPath, HookArgs(d.cfg.CgroupRoot, rel, b), d.cfg.HookTimeout), env: boundsEnv(b)}
	d.pods.mu.Lock()
	defer d.pods.mu.Unlock()
	if d.pods.m == nil || len(d.pods.m) >= podMemoMax {
		d.pods.m = make(map[podKey]*podPart)
	}
	d.pods.m[k] = part
	d.pods.last.Store(part)
	return part, nil
}

// HookArgs tell the hook what to verify at every start.
func HookArgs(cgroupRoot, podCgroup string, b host.Bounds) []string {
	return []string{
		"--cgroup-root", cgroupRoot,
		"--pod-cgroup", podCgroup,
		"--max-descendants", strconv.Itoa(b.Descendants),
		"--max-depth", strconv.Itoa(b.Depth),
	}
}
