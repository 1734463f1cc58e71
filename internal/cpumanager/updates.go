package cpumanager

import (
	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// Adjust records a container's assignment in its creation adjustment:
// cpuset, memory nodes, quota and the stamp that survives restarts.
func Adjust(adj *api.ContainerAdjustment, a policy.Assignment) {
	adj.SetLinuxCPUSetCPUs(a.CPUs.String())
	adj.SetLinuxCPUSetMems(a.Mems.String())
	if a.QuotaDisabled() {
		adj.SetLinuxCPUQuota(-1)
	}
	adj.AddAnnotation(policy.StampAnnotation, a.Stamp())
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
		cpu := &api.LinuxCPU{Cpus: str.of(a.CPUs), Mems: str.of(a.Mems)}
		switch {
		case a.QuotaDisabled():
			cpu.Quota = api.Int64(-1)
		case a.RestoreQuota > 0:
			cpu.Quota, cpu.Period = api.Int64(a.RestoreQuota), api.UInt64(budget.DefaultPeriod)
		}
		u := &api.ContainerUpdate{
			ContainerId: a.ContainerID,
			Linux:       &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: cpu}},
		}
		if i, ok := idx[a.ContainerID]; ok {
			out[i] = u
			continue
		}
		idx[a.ContainerID] = len(out)
		out = append(out, u)
	}
	return out
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
