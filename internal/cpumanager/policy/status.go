package policy

import (
	"cmp"
	"maps"
	"slices"
)

// Status is the allocation table for `cgdelegate status`. Sets are Linux
// cpuset lists ("0-3,8"); an empty string is the empty set.
type Status struct {
	Scope        string `json:"scope"`
	UsableCPUs   string `json:"usableCPUs"`
	ReservedCPUs string `json:"reservedCPUs"`
	// ReservedMemory is the memory kept back per NUMA node, in the
	// config's form ("0:memory=1Gi"); empty when none.
	ReservedMemory string      `json:"reservedMemory,omitempty"`
	NodeSharedPool string      `json:"nodeSharedPool"`
	NodeSharedMems string      `json:"nodeSharedMems"`
	Pods           []PodStatus `json:"pods"`
}

// PodStatus is one pod in the table.
type PodStatus struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Budget string `json:"budget,omitempty"`
	Bubble string `json:"bubble,omitempty"`
	// SharedPool is the bubble minus its slices (pods with a bubble).
	SharedPool string `json:"sharedPool,omitempty"`
	// Mems are the bubble's memory nodes: those of its CPUs, and those it
	// was widened to when they could not hold the pod's memory.
	Mems string `json:"mems,omitempty"`
	// Degraded says why a budget pod has no bubble after a rebuild.
	Degraded   string            `json:"degraded,omitempty"`
	Containers []ContainerStatus `json:"containers"`
}

// ContainerStatus is one container in the table.
type ContainerStatus struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	Lifecycle string `json:"lifecycle,omitempty"`
	Pool      Pool   `json:"pool"`
	CPUs      string `json:"cpus"`
	Mems      string `json:"mems"`
	// Released says an init container whose CPUs went to its pod's app
	// containers has not stopped yet: it runs in the node shared pool.
	Released bool `json:"released,omitempty"`
}

// Snapshot returns the allocation table, pods and containers sorted by id.
func (p *Policy) Snapshot() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Status{
		Scope:          string(p.scope),
		UsableCPUs:     p.usable.String(),
		ReservedCPUs:   p.reserved.String(),
		ReservedMemory: p.mem.reservedString(),
		NodeSharedPool: p.nodeCPUs(p.v).String(),
		NodeSharedMems: p.memNodes.String(),
		Pods:           []PodStatus{},
	}
	for _, id := range slices.Sorted(maps.Keys(p.st.pods)) {
		ps := p.st.pods[id]
		st := PodStatus{ID: id, Name: ps.spec.Name, Bubble: ps.bubble.String(), Degraded: ps.degraded, Containers: []ContainerStatus{}}
		if !ps.spec.Budget.IsZero() {
			st.Budget = ps.spec.Budget.String()
		}
		if pool, ok := p.v.pod[id]; ok {
			st.SharedPool = pool.String()
			st.Mems = p.podMems(ps).String()
		}
		for _, cid := range p.st.podContainers(id) {
			c := p.st.ctrs[cid]
			a := p.assign(p.st, p.v, c)
			st.Containers = append(st.Containers, ContainerStatus{
				ID: cid, Name: c.spec.Name, Lifecycle: string(c.spec.Lifecycle), Pool: c.pool,
				CPUs: a.CPUs.String(), Mems: a.Mems.String(), Released: c.released,
			})
		}
		s.Pods = append(s.Pods, st)
	}
	return s
}

// allAssignments returns every container's assignment, sorted by id.
func (p *Policy) allAssignments(s *state, v *view) []Assignment {
	out := make([]Assignment, 0, len(s.ctrs))
	for _, c := range s.ctrs {
		out = append(out, p.assign(s, v, c))
	}
	slices.SortFunc(out, func(a, b Assignment) int { return cmp.Compare(a.ContainerID, b.ContainerID) })
	return out
}
