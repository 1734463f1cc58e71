package policy

import (
	"maps"
	"slices"

	"k8s.io/utils/cpuset"
)

// podState is one pod.
type podState struct {
	spec PodSpec
	// bubble is empty for pods without one.
	bubble cpuset.CPUSet
	// degraded says why a pod that should have a bubble has none (set by
	// Rebuild only).
	degraded string
	// extraMems are the memory nodes the bubble was widened to beyond
	// the nodes of its CPUs, when those could not hold the pod's memory.
	extraMems cpuset.CPUSet
	// memShare is the memory the bubble reserves on each node.
	memShare map[int]int64
}

// memNodes are the pod's memory nodes: those of its bubble and the ones it
// was widened to.
func (p *Policy) podMems(ps podState) cpuset.CPUSet { return p.pinnedMems(ps, ps.bubble) }

// ctrState is one container.
type ctrState struct {
	spec ContainerSpec
	pool Pool
	// slice is the exclusive slice (PoolExclusive only). It lies in the
	// pod's bubble when the pod has one, otherwise in the node pool.
	slice cpuset.CPUSet
	// extraMems and memShare are, for a node-level slice (container
	// scope), the memory nodes beyond those of the slice's CPUs and the
	// memory the container reserves on each node, as a bubble's are.
	// A slice in a bubble has neither: the bubble holds the pod's memory.
	extraMems cpuset.CPUSet
	memShare  map[int]int64
	// released marks a plain init container a regular sibling released
	// (its CPUs went back to its pool) whose Stop or Remove has not come
	// yet. The kubelet's rules say it has completed; the lifecycle
	// annotation is the pod author's word, so it may still run. It stays,
	// in the node shared pool, and follows that pool's updates until it
	// goes; it counts for no budget and holds no CPUs of its own.
	released bool
}

// state is the whole allocation. The pools are derived from it (see view).
// Change containers only through addCtr and delCtr, which keep the indexes.
type state struct {
	pods map[string]podState
	ctrs map[string]ctrState
	// byPod indexes container ids by pod id; every pod has an entry.
	byPod map[string]map[string]struct{}
	// nodeShared holds the ids of the node-shared containers.
	nodeShared map[string]struct{}
	// memHolders holds the ids of the containers that reserve memory
	// (ctrState.memShare).
	memHolders map[string]struct{}
}

func newState() *state {
	return &state{
		pods: map[string]podState{}, ctrs: map[string]ctrState{},
		byPod: map[string]map[string]struct{}{}, nodeShared: map[string]struct{}{},
		memHolders: map[string]struct{}{},
	}
}

func (s *state) addPod(ps podState) {
	s.pods[ps.spec.ID] = ps
	if s.byPod[ps.spec.ID] == nil {
		s.byPod[ps.spec.ID] = map[string]struct{}{}
	}
}

func (s *state) addCtr(c ctrState) {
	s.ctrs[c.spec.ID] = c
	s.byPod[c.spec.PodID][c.spec.ID] = struct{}{}
	if c.pool == PoolNodeShared {
		s.nodeShared[c.spec.ID] = struct{}{}
	} else {
		delete(s.nodeShared, c.spec.ID)
	}
	if len(c.memShare) > 0 {
		s.memHolders[c.spec.ID] = struct{}{}
	} else {
		delete(s.memHolders, c.spec.ID)
	}
}

func (s *state) delCtr(id string) {
	c, ok := s.ctrs[id]
	if !ok {
		return
	}
	delete(s.ctrs, id)
	delete(s.byPod[c.spec.PodID], id)
	delete(s.nodeShared, id)
	delete(s.memHolders, id)
}

// podContainers returns the ids of the pod's containers, sorted.
func (s *state) podContainers(podID string) []string {
	return slices.Sorted(maps.Keys(s.byPod[podID]))
}

// podSharedUsed reports whether a container of the pod runs in the pod's
// shared pool now.
func (s *state) podSharedUsed(podID string) bool {
	for id := range s.byPod[podID] {
		if s.ctrs[id].pool == PoolPodShared {
			return true
		}
	}
	return false
}

// view is the derived pools of one state.
type view struct {
	// node is the node shared pool.
	node cpuset.CPUSet
	// pod holds the shared pool of every pod with a bubble.
	pod map[string]cpuset.CPUSet
}

// newView derives the pools of s from the usable CPUs.
func newView(usable cpuset.CPUSet, s *state) *view {
	var claimed []cpuset.CPUSet
	podSlices := map[string][]cpuset.CPUSet{}
	for id, p := range s.pods {
		if !p.bubble.IsEmpty() {
			claimed = append(claimed, p.bubble)
			podSlices[id] = nil
		}
	}
	for _, c := range s.ctrs {
		if c.pool != PoolExclusive {
			continue
		}
		if _, inBubble := podSlices[c.spec.PodID]; inBubble {
			podSlices[c.spec.PodID] = append(podSlices[c.spec.PodID], c.slice)
		} else {
			claimed = append(claimed, c.slice)
		}
	}
	v := &view{node: usable.Difference(cpuset.New().Union(claimed...)), pod: make(map[string]cpuset.CPUSet, len(podSlices))}
	for id, sl := range podSlices {
		v.pod[id] = s.pods[id].bubble.Difference(cpuset.New().Union(sl...))
	}
	return v
}

// nodeCPUs is the node shared pool under v: the free usable CPUs and the
// shared reserved ones.
func (p *Policy) nodeCPUs(v *view) cpuset.CPUSet {
	if p.sharedReserved.IsEmpty() {
		return v.node
	}
	return v.node.Union(p.sharedReserved)
}

// assign builds the Assignment of c in s under v. Pinned containers (an
// exclusive slice, a pod shared pool) get the NUMA nodes of their CPUs as
// mems, and the nodes their bubble's (or, for a node-level slice, their
// own) memory was widened to; node-shared ones every memory node, as the
// kubelet never narrows the memory of its shared pool.
func (p *Policy) assign(s *state, v *view, c ctrState) Assignment {
	a := Assignment{
		ContainerID: c.spec.ID,
		PodID:       c.spec.PodID,
		Cgroup:      c.spec.Cgroup,
		Pool:        c.pool,
		Bubble:      s.pods[c.spec.PodID].bubble,
	}
	switch c.pool {
	case PoolExclusive:
		a.CPUs = c.slice
	case PoolPodShared:
		a.CPUs = v.pod[c.spec.PodID]
	default:
		a.CPUs, a.Mems = p.nodeCPUs(v), p.memNodes
		return a
	}
	a.Mems = p.pinnedMems(s.pods[c.spec.PodID], a.CPUs)
	if !c.extraMems.IsEmpty() {
		a.Mems = a.Mems.Union(c.extraMems)
	}
	return a
}

// notGuaranteed returns the first container of pod podID whose
// oom_score_adj says the pod is not Guaranteed (ContainerSpec.notGuaranteed).
func (s *state) notGuaranteed(podID string) (ContainerSpec, bool) {
	for _, cid := range s.podContainers(podID) {
		if c := s.ctrs[cid].spec; c.notGuaranteed() {
			return c, true
		}
	}
	return ContainerSpec{}, false
}
