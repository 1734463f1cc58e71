package writable

import (
	"fmt"
	"strconv"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/cgroupfs"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/hostcheck"
	"github.com/cgdelegate/cgdelegate/internal/optin"
	"github.com/cgdelegate/cgdelegate/ocispec"
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

// HostVerdict returns the mount-table verdict: the parsed status, or the
// error reading it. It is called only when a check needs it, so a
// container that asks for nothing costs no host check.
type HostVerdict func() (hostcheck.Status, error)

// Input is one container to decide on.
type Input struct {
	Pod  *api.PodSandbox
	Ctr  *api.Container
	Host HostVerdict
}

// Plan is the decision for one container.
type Plan struct {
	Outcome Outcome
	// Request is what the annotations asked for.
	Request optin.Request
	// Reason says who asked for writable cgroups: "annotation <key>" or the
	// runtime. Empty unless Writable or Guarded (or a guard Warning).
	Reason string
	// Warning is the refusal guard: warn let through (Outcome Unchanged).
	Warning error
	// ReadOnlyMount replaces /sys/fs/cgroup when Outcome is ReadOnly.
	ReadOnlyMount *api.Mount
	// Spec are the mount and namespace changes (Writable, Guarded).
	Spec ocispec.Plan
	// PodCgroup is the pod cgroup relative to the cgroup root, and Bounds
	// the bounds it must carry before the container starts.
	PodCgroup string
	Bounds    cgroupfs.Bounds
	// Hook is the createRuntime hook to add; nil when the container
	// already runs it (a hooks.d definition).
	Hook *api.Hook
}

// Delegates reports whether the plan makes the container's cgroups
// writable (and so needs the pod bounds in place).
func (p *Plan) Delegates() bool { return p.Outcome == Writable || p.Outcome == Guarded }

// Adjustment translates the plan into an NRI adjustment: nil when nothing
// changes.
func (p *Plan) Adjustment() *api.ContainerAdjustment {
	switch p.Outcome {
	case ReadOnly:
		adj := &api.ContainerAdjustment{}
		adj.RemoveMount(ocispec.CgroupMountPoint)
		adj.AddMount(p.ReadOnlyMount)
		return adj
	case Writable, Guarded:
		adj := &api.ContainerAdjustment{}
		p.Spec.Apply(adj)
		if p.Hook != nil {
			adj.AddHooks(&api.Hooks{CreateRuntime: []*api.Hook{p.Hook}})
		}
		return adj
	}
	return nil
}

// Decider decides for one config. Build a new one when the config changes.
type Decider struct {
	cfg    config.Config
	checks []Check
}

// New returns a Decider for cfg. extra checks (an opt-in policy) run
// first, before the host and spec checks, on every container that would
// get writable cgroups, guarded ones included.
func New(cfg config.Config, extra ...Check) *Decider {
	checks := make([]Check, 0, len(extra)+len(builtin))
	checks = append(checks, extra...)
	return &Decider{cfg: cfg, checks: append(checks, builtin...)}
}

// Decide returns the plan for one container, or the error that refuses it.
func (d *Decider) Decide(in Input) (Plan, error) {
	req, err := optin.Resolve(in.Pod, in.Ctr)
	if err != nil {
		return Plan{}, err
	}
	plan := Plan{Request: req}
	mnt := ocispec.Inspect(in.Ctr.GetMounts())
	runtimeWritable := mnt.Mount != nil && mnt.ReadWrite && !mnt.Bind
	switch {
	case mnt.PrivilegedLike:
		plan.Outcome = Privileged
	case req.Mode == optin.Writable:
		plan.Outcome, plan.Reason = Writable, "annotation "+req.Source
		err = d.run(in, &plan)
	case req.Mode == optin.ReadOnly && runtimeWritable:
		plan.Outcome, plan.ReadOnlyMount = ReadOnly, ocispec.ReadOnlyMount(mnt.Mount)
	case req.Mode == optin.Unset && runtimeWritable && d.cfg.Guard != config.GuardOff:
		plan.Outcome, plan.Reason = Guarded, "the runtime (a read-write /sys/fs/cgroup in the spec)"
		err = d.run(in, &plan)
		if err != nil && d.cfg.Guard == config.GuardWarn {
			return Plan{Request: req, Reason: plan.Reason, Warning: err}, nil
		}
	}
	if err != nil {
		return Plan{}, err
	}
	return plan, nil
}

// run runs every check in order; the first error refuses the container.
func (d *Decider) run(in Input, plan *Plan) error {
	c := &Candidate{Input: in, Config: &d.cfg, Plan: plan}
	for _, check := range d.checks {
		if err := check(c); err != nil {
			return err
		}
	}
	if !ocispec.HasHook(in.Ctr, d.cfg.HookPath) {
		plan.Hook = ocispec.Hook(d.cfg.HookPath, HookArgs(d.cfg.CgroupRoot, plan.PodCgroup, plan.Bounds), d.cfg.HookTimeout)
	}
	return nil
}

// HookArgs tell the hook what to verify at every start.
func HookArgs(cgroupRoot, podCgroup string, b cgroupfs.Bounds) []string {
	return []string{
		"--cgroup-root", cgroupRoot,
		"--pod-cgroup", podCgroup,
		"--max-descendants", strconv.Itoa(b.Descendants),
		"--max-depth", strconv.Itoa(b.Depth),
	}
}

// BoundsError is the refusal for pod bounds that could not be put in place.
func BoundsError(podDir, parent string, err error) error {
	return fmt.Errorf("writable cgroups need pod bounds on %q (cgroup parent %q): %w", podDir, parent, err)
}
