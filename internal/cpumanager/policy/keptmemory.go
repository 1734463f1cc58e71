package policy

import (
	"cmp"
	"slices"

	"k8s.io/utils/cpuset"
)

// memHolder is a kept bubble or node-level slice whose memory keptMemory
// reserves.
type memHolder struct {
	pod, ctr string // one of them
	cpuNodes cpuset.CPUSet
	extra    cpuset.CPUSet
	mem      int64
}

// keptMemory gives the kept bubbles and node-level slices their memory
// back (step 5). Their memory nodes are those of their CPUs and those the
// stamps of their pinned containers name beyond them (a widened bubble or
// slice; an adopted slice has no stamp, its current mems say). The memory
// is reserved there within the nodes' capacity when possible
// (memory.spread), beyond it otherwise (what runs, runs). Holders on fewer
// memory nodes go first, pods before containers, each by id.
func (p *Policy) keptMemory(st *state, snap snapshot) {
	hs := append(p.keptBubbleMemory(st, snap), p.keptSliceMemory(st, snap)...)
	if !p.mem.known {
		return
	}
	slices.SortStableFunc(hs, func(a, b memHolder) int {
		return cmp.Compare(a.cpuNodes.Union(a.extra).Size(), b.cpuNodes.Union(b.extra).Size())
	})
	var ds []demand
	var with []memHolder
	for _, h := range hs {
		if h.mem > 0 {
			ds = append(ds, demand{group: h.cpuNodes.Union(h.extra).List(), first: h.cpuNodes, mem: h.mem})
			with = append(with, h)
		}
	}
	for k, share := range p.mem.spread(ds) {
		if h := with[k]; h.pod != "" {
			ps := st.pods[h.pod]
			ps.memShare = share
			st.pods[h.pod] = ps
		} else {
			c := st.ctrs[h.ctr]
			c.memShare = share
			st.addCtr(c)
		}
	}
}

// keptBubbleMemory sets the memory nodes of the kept bubbles beyond their
// CPUs' and returns the bubbles as holders, by pod id.
func (p *Policy) keptBubbleMemory(st *state, snap snapshot) []memHolder {
	var hs []memHolder
	for _, id := range snap.podIDs {
		ps := st.pods[id]
		if ps.bubble.IsEmpty() {
			continue
		}
		cpuNodes := p.topo.MemsOf(ps.bubble)
		for _, cid := range st.podContainers(id) {
			if s := snap.stamps[cid]; s != nil && s.Pool != PoolNodeShared && s.Bubble.Equals(ps.bubble) {
				ps.extraMems = ps.extraMems.Union(s.Mems.Difference(cpuNodes))
			}
		}
		ps.extraMems = ps.extraMems.Intersection(p.memNodes)
		st.pods[id] = ps
		hs = append(hs, memHolder{pod: id, cpuNodes: cpuNodes, extra: ps.extraMems, mem: podMemory(ps.spec.Budget)})
	}
	return hs
}

// keptSliceMemory sets the memory nodes of the kept node-level slices
// beyond their CPUs' and returns the slices as holders, by container id.
func (p *Policy) keptSliceMemory(st *state, snap snapshot) []memHolder {
	var hs []memHolder
	for _, id := range snap.ctrIDs {
		c := st.ctrs[id]
		if c.pool != PoolExclusive || !st.pods[c.spec.PodID].bubble.IsEmpty() {
			continue
		}
		cpuNodes := p.topo.MemsOf(c.slice)
		mems := snap.current[id].Mems
		if s := snap.stamps[id]; s != nil {
			mems = s.Mems
		}
		c.extraMems = mems.Difference(cpuNodes).Intersection(p.memNodes)
		st.addCtr(c)
		hs = append(hs, memHolder{ctr: id, cpuNodes: cpuNodes, extra: c.extraMems, mem: podMemory(c.spec.Resources.Budget)})
	}
	return hs
}
