package cpumanager

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// Adjust records a container's assignment in its creation adjustment:
// cpuset, memory nodes, quota and the stamp that survives restarts. It
// returns the CPU settings it set (for Sender.Created).
func Adjust(adj *api.ContainerAdjustment, a policy.Assignment) *api.LinuxCPU {
	cpu := &api.LinuxCPU{Cpus: a.CPUs.String(), Mems: a.Mems.String()}
	adj.SetLinuxCPUSetCPUs(cpu.Cpus)
	adj.SetLinuxCPUSetMems(cpu.Mems)
	if a.QuotaDisabled() {
		cpu.Quota = api.Int64(-1)
		adj.SetLinuxCPUQuota(-1)
	}
	adj.AddAnnotation(policy.StampAnnotation, a.Stamp())
	return cpu
}

// CgroupWriter writes a cgroup's cpuset; *host.FS is one.
type CgroupWriter interface {
	SetCpuset(rel, cpus, mems string) error
}

// Enforce writes the cpusets and memory nodes of as straight to the
// containers' cgroups, so that a carved bubble or slice is exclusive when
// the event's handler returns. The runtime applies the same assignments
// afterwards, as container updates (the adjustment's, or the Sender's),
// and keeps its own record of them: it applies them one container at a
// time (a `runc update` each), so on a node with a hundred containers in
// the node shared pool it would take seconds, during which the "exclusive"
// CPUs are still shared.
//
// A container without a known cgroup, with an empty cpuset (never
// written: an empty cpuset.cpus means the parent's), or whose cgroup is
// gone (it is being removed) is skipped. It returns how many it wrote and
// the other failures, joined, each naming the container; those
// containers change with the runtime's update only.
func Enforce(w CgroupWriter, as []policy.Assignment) (int, error) {
	written := 0
	var errs []error
	var str setStrings
	for _, a := range as {
		if a.Cgroup == "" || a.CPUs.IsEmpty() || a.Mems.IsEmpty() {
			continue
		}
		err := w.SetCpuset(a.Cgroup, str.of(a.CPUs), str.of(a.Mems))
		switch {
		case err == nil:
			written++
		case errors.Is(err, os.ErrNotExist):
		default:
			errs = append(errs, fmt.Errorf("container %s: %w", a.ContainerID, err))
		}
	}
	return written, errors.Join(errs...)
}

// cgroupWrites are the Sender's writes of cpusets to cgroups (Enforce),
// ordered across callers: each reads the container's assignment from the
// Manager in force when it writes, so the last write a cgroup gets is the
// assignment of the last change before it.
type cgroupWrites struct {
	mu sync.Mutex
	// cgroups is where the cpusets go (nil: nowhere); manager is the
	// pinning state in force.
	cgroups func() CgroupWriter
	manager func() *Manager
}

// enforce writes the current assignment of every container of as that the
// Manager in force knows, and returns how many it wrote.
func (c *cgroupWrites) enforce(as []policy.Assignment) (int, error) {
	if c.cgroups == nil || len(as) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.cgroups()
	if w == nil {
		return 0, nil
	}
	pn := c.manager()
	cur := make([]policy.Assignment, 0, len(as))
	for _, a := range as {
		if now, ok := pn.Assignment(a.ContainerID); ok {
			cur = append(cur, now)
		}
	}
	return Enforce(w, cur)
}

// Enforce writes the current assignment of every container of as that the
// Manager in force knows straight to its cgroup (the package's Enforce),
// and returns how many it wrote. The writes of all callers are ordered,
// and each reads the assignment when it writes: the last write a cgroup
// gets is the assignment of the last change before it.
func (s *Sender) Enforce(as []policy.Assignment) (int, error) { return s.writes.enforce(as) }

// rewrite writes again the cgroups of the containers the runtime just
// updated with an assignment that changed while the call was in flight:
// the runtime wrote the older cpuset over the newer one the event wrote
// (Enforce). Without it such a container would keep the older cpuset until
// its next update went out, behind every other container queued.
func (s *Sender) rewrite(batch []policy.Assignment, failed map[string]bool) {
	pn := s.manager()
	var stale []policy.Assignment
	for _, a := range batch {
		if cur, ok := pn.Assignment(a.ContainerID); ok && !failed[a.ContainerID] && !sameCPUs(cur, a) {
			stale = append(stale, cur)
		}
	}
	if _, err := s.Enforce(stale); err != nil {
		s.log.Warn("cannot write some cpusets to their cgroups again; the runtime's container updates set them, later", "error", err)
	}
}

// Updates turns assignments into NRI container updates. A later assignment
// for the same container wins.
func Updates(as []policy.Assignment) []*api.ContainerUpdate {
	if len(as) == 0 {
		return nil
	}
	out := make([]*api.ContainerUpdate, 0, len(as))
	idx := make(map[string]int, len(as))
	var str setStrings
	for _, a := range as {
		u := update(&str, a)
		if i, ok := idx[a.ContainerID]; ok {
			out[i] = u
			continue
		}
		idx[a.ContainerID] = len(out)
		out = append(out, u)
	}
	return out
}

// update is a's container update: cpuset, memory nodes and the quota
// change, if any.
func update(str *setStrings, a policy.Assignment) *api.ContainerUpdate {
	cpu := &api.LinuxCPU{Cpus: str.of(a.CPUs), Mems: str.of(a.Mems)}
	switch {
	case a.QuotaDisabled():
		cpu.Quota = api.Int64(-1)
	case a.RestoreQuota > 0:
		cpu.Quota, cpu.Period = api.Int64(a.RestoreQuota), api.UInt64(budget.DefaultPeriod)
	}
	return &api.ContainerUpdate{
		ContainerId: a.ContainerID,
		Linux:       &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: cpu}},
	}
}

// setStrings memoizes cpuset.String: the containers of one pool share their
// sets, and formatting dominates a 50-container update otherwise.
type setStrings []struct {
	set cpuset.CPUSet
	s   string
}

func (c *setStrings) of(set cpuset.CPUSet) string {
	for _, e := range *c {
		// Size and subset, not Equals: Equals is reflect.DeepEqual.
		if e.set.Size() == set.Size() && e.set.IsSubsetOf(set) {
			return e.s
		}
	}
	s := set.String()
	if len(*c) < 8 {
		*c = append(*c, struct {
			set cpuset.CPUSet
			s   string
		}{set, s})
	}
	return s
}
