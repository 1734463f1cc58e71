package policy

import (
	"cmp"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/topology"
)

// podState is one pod. Values are never mutated in place once stored:
// operations copy the maps and replace entries.
type podState struct {
	spec PodSpec
	// bubble is empty for pods without one.
	bubble cpuset.CPUSet
	// degraded says why a pod that should have a bubble has none (set by
	// Rebuild only).
	degraded string
}

// ctrState is one container.
type ctrState struct {
	spec ContainerSpec
	pool Pool
	// slice is the exclusive slice (PoolExclusive only). It lies in the
	// pod's bubble when the pod has one, otherwise in the node pool.
	slice cpuset.CPUSet
}

// state is the whole allocation. The pools are derived from it (see view).
type state struct {
	pods map[string]podState
	ctrs map[string]ctrState
}

func newState() *state {
	return &state{pods: map[string]podState{}, ctrs: map[string]ctrState{}}
}

func (s *state) clone() *state {
	return &state{pods: maps.Clone(s.pods), ctrs: maps.Clone(s.ctrs)}
}

// podContainers returns the ids of the pod's containers, sorted.
func (s *state) podContainers(podID string) []string {
	var ids []string
	for id, c := range s.ctrs {
		if c.spec.PodID == podID {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// hasPodShared reports whether the pod has a container in its shared pool.
func (s *state) hasPodShared(podID string) bool {
	for _, c := range s.ctrs {
		if c.spec.PodID == podID && c.pool == PoolPodShared {
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

// cpusOf returns the CPUs container c runs on under v.
func (v *view) cpusOf(c ctrState) cpuset.CPUSet {
	switch c.pool {
	case PoolExclusive:
		return c.slice
	case PoolPodShared:
		return v.pod[c.spec.PodID]
	default:
		return v.node
	}
}

// assign builds the Assignment of c under v.
func assign(t *topology.Topology, s *state, v *view, c ctrState) Assignment {
	cpus := v.cpusOf(c)
	return Assignment{
		ContainerID:  c.spec.ID,
		PodID:        c.spec.PodID,
		Pool:         c.pool,
		CPUs:         cpus,
		Mems:         t.MemsOf(cpus),
		Bubble:       s.pods[c.spec.PodID].bubble,
		Exclusive:    c.pool == PoolExclusive,
		DisableQuota: c.pool == PoolExclusive,
	}
}

// changes lists the containers of next, other than skip, whose CPUs differ
// between the two views, with their new assignments, sorted by id.
func changes(t *topology.Topology, next *state, before, after *view, skip string) []Assignment {
	nodeChanged := !before.node.Equals(after.node)
	podChanged := map[string]bool{}
	mems := map[string]cpuset.CPUSet{}
	var out []Assignment
	for id, c := range next.ctrs {
		if id == skip {
			continue
		}
		key := "node"
		switch c.pool {
		case PoolExclusive:
			continue // slices never move outside Rebuild
		case PoolPodShared:
			pid := c.spec.PodID
			key = "pod/" + pid
			changed, ok := podChanged[pid]
			if !ok {
				old, had := before.pod[pid]
				changed = !had || !old.Equals(after.pod[pid])
				podChanged[pid] = changed
			}
			if !changed {
				continue
			}
		default:
			if !nodeChanged {
				continue
			}
		}
		a := Assignment{
			ContainerID: id, PodID: c.spec.PodID, Pool: c.pool,
			CPUs: after.cpusOf(c), Bubble: next.pods[c.spec.PodID].bubble,
		}
		m, ok := mems[key]
		if !ok {
			m = t.MemsOf(a.CPUs)
			mems[key] = m
		}
		a.Mems = m
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Assignment) int { return cmp.Compare(a.ContainerID, b.ContainerID) })
	return out
}
