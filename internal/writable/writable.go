package writable

import (
	"strconv"
	"strings"

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

// Plan is the decision for one container.
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

// Adjustment translates the plan into a new NRI adjustment, which the
// caller may add to: nil when nothing changes.
func (p *Plan) Adjustment() *api.ContainerAdjustment {
	switch p.Outcome {
	case ReadOnly:
		adj := &api.ContainerAdjustment{}
		adj.RemoveMount(spec.CgroupMountPoint)
		adj.AddMount(p.ReadOnlyMount)
		return adj
	case Writable, Guarded:
		return p.writableAdjustment()
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

// EnvBound returns the EnvMaxDescendants value of a container cgdelegate
// made writable: the pod's cap when the container was created (its
// reservation in the node budget then). ok is false when the variable is
// absent or no value of it is a count ("max" is host.Unlimited); of
// several values the lowest counts.
func EnvBound(ctr *api.Container) (n int, ok bool) {
	prefix := EnvMaxDescendants + "="
	for _, kv := range ctr.GetEnv() {
		v, found := strings.CutPrefix(kv, prefix)
		if !found {
			continue
		}
		got := host.Unlimited
		if v != "max" {
			c, err := strconv.Atoi(v)
			if err != nil || c < 0 {
				continue
			}
			got = c
		}
		if !ok || (got != host.Unlimited && (n == host.Unlimited || got < n)) {
			n, ok = got, true
		}
	}
	return n, ok
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

// writableAdjustment builds a writable container's adjustment. It carries
// only what the container needs, each part for a reason (the round trip is
// measured against an adjustment that only turns the mount's ro into rw:
// BenchmarkCreateContainer, docs/performance.md):
//
//   - the removal marker of the runtime's /sys/fs/cgroup mount, when there
//     is one (the runtime-side adaptation drops it from what it forwards
//     once the new mount replaces it): it lets the new mount take the place
//     of one another plugin added there, instead of a conflict between the
//     two plugins' mounts;
//   - the cgroup2 mount, read-write, with the runtime defaults nosuid,
//     noexec, nodev and relatime always set (spec.WritableMount): the
//     writable cgroups themselves;
//   - a private cgroup namespace, only when the spec has none
//     (spec.Plan.AddCgroupNS): without it the mount would show the
//     runtime's cgroup tree;
//   - EnvMaxDescendants and EnvMaxDepth: the pod's budget, which the
//     container cannot read from above its cgroup namespace root
//     (cgdelegate-init check, package delegate), and which a restarted
//     plugin reads back as the pod's cap (EnvBound);
//   - the createRuntime hook (Plan.Hook, with its timeout, so that a hook
//     that hangs never hangs the start), only when the container does not
//     already run it from a hooks directory: the re-check of the host, the
//     namespace and the pod bounds at every start, the runtime's own.
//
// Nothing else: no annotation, no resources, no mount of the runtime's
// left as it was.
func (p *Plan) writableAdjustment() *api.ContainerAdjustment {
	env := boundsEnv(p.Bounds)
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
	p := *plan
	c := &Candidate{Input: in, Config: &d.cfg, Mounts: mnt, Plan: &p}
	for i, check := range d.checks {
		if err := check(c); err != nil {
			if i < d.extra {
				return refusal.New(refusal.Policy, mark(err, ErrNotAdmitted))
			}
			return err
		}
	}
	if spec.HasHook(in.Ctr, d.cfg.HookPath) {
		p.Hook = nil
	}
	*plan = p
	return nil
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
