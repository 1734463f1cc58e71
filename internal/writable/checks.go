package writable

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/spec"
)

// Candidate is a container on its way to writable cgroups, as the checks
// see it. Checks read Input and Config, and fill in their part of Plan.
type Candidate struct {
	Input
	Config *config.Config
	Plan   *Plan
	// Mounts describes the container's /sys and /sys/fs/cgroup.
	Mounts spec.MountState
}

// Check is one rule. It returns an error that refuses the container, naming
// the cause and the fix.
type Check func(*Candidate) error

// builtin are the safety rules, in order: the host first (cgroup v2 with
// nsdelegate), then the container's spec, then the pod bounds.
var builtin = []Check{hostSafe, privateNamespace, podBounds, podCgroup, podCgroupOwn}

// hostSafe: the cgroup root is cgroup2 with nsdelegate.
func hostSafe(c *Candidate) error {
	st, err := c.Host.Check()
	if err != nil {
		return fmt.Errorf("writable cgroups requested by %s, but the host check failed: %w", c.Plan.Reason(), err)
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("writable cgroups requested by %s are unsafe on this node: %w", c.Plan.Reason(), err)
	}
	return nil
}

// privateNamespace: the container gets (or has) a private cgroup namespace
// and no host cgroup tree bound over /sys/fs/cgroup.
func privateNamespace(c *Candidate) error {
	sp, err := spec.PlanWritable(c.Ctr, c.Mounts)
	if err != nil {
		return fmt.Errorf("writable cgroups requested by %s: %w", c.Plan.Reason(), err)
	}
	c.Plan.Spec = sp
	return nil
}

// podBounds: the node caps, lowered by the pod's annotations.
func podBounds(c *Candidate) error {
	d, errD := PodBound(c.Pod, annotations.MaxDescendants, c.Config.MaxDescendants)
	depth, errDepth := PodBound(c.Pod, annotations.MaxDepth, c.Config.MaxDepth)
	if err := errors.Join(errD, errDepth); err != nil {
		return err
	}
	c.Plan.Bounds = host.Bounds{Descendants: d, Depth: depth}
	return nil
}

// podCgroup: the pod cgroup the bounds go on is known. The hook that
// re-checks them at every start comes with it.
func podCgroup(c *Candidate) error {
	rel, err := host.PodPath(c.Pod.GetLinux().GetCgroupParent())
	if err != nil {
		return refusal.New(refusal.PodBounds, mark(fmt.Errorf("writable cgroups need pod bounds, but the pod cgroup is unknown: %w", err), ErrPodBounds))
	}
	c.Plan.PodCgroup = rel
	c.Plan.Hook = spec.Hook(c.Config.HookPath, HookArgs(c.Config.CgroupRoot, rel, c.Plan.Bounds), c.Config.HookTimeout)
	return nil
}

// podCgroupOwn: the pod cgroup is the pod's own, not the cgroup root or a
// cgroup of the kubelet or systemd that holds other pods or the system
// (host.CheckPodCgroup). It runs before the bounds are written, so a CRI
// client's cgroup parent of "/" or "kubepods.slice" never bounds the node.
func podCgroupOwn(c *Candidate) error {
	if err := host.CheckPodCgroup(c.Plan.PodCgroup); err != nil {
		return refusal.New(refusal.SharedCgroup, fmt.Errorf("writable cgroups requested by %s need the pod's own cgroup for the pod bounds, but cgroup parent %q is not: %w",
			c.Plan.Reason(), c.Pod.GetLinux().GetCgroupParent(), err))
	}
	return nil
}

// PodBound returns the pod's requested bound from annotation key, capped by
// nodeCap. A missing annotation yields nodeCap. A value above the cap is
// capped, not an error: the annotation may only lower the bound.
func PodBound(pod *api.PodSandbox, key annotations.Key, nodeCap int) (int, error) {
	f, ok := annotations.ForPod(pod, key)
	if !ok {
		return nodeCap, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(f.Value))
	if err != nil || n < 1 {
		return 0, badAnnotation(fmt.Errorf("%w: %s=%q: want a whole number of at least 1", ErrBadAnnotation, f.Key, f.Value))
	}
	return min(n, nodeCap), nil
}
