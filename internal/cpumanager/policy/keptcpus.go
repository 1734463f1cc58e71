package policy

import (
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// keepStampedBubbles keeps the stamped bubbles that are still valid and
// claims them; it returns the budget pods that need a fresh one (step 2).
func (p *Policy) keepStampedBubbles(st *state, snap snapshot, cl *claims, log *conflicts) (fresh []string) {
	for _, id := range snap.podIDs {
		ps := st.pods[id]
		if !p.wantsBubble(ps.spec) {
			continue
		}
		if c, ok := st.notGuaranteed(id); ok {
			ps.degraded = demoted(c)
			st.pods[id] = ps
			continue
		}
		cand, votes := stampedBubble(st, snap.stamps, id)
		if len(votes) > 1 {
			log.add("pod %s containers disagree on the bubble (%v); trying %s", id, votes, cand)
		}
		n := ps.spec.Budget.BubbleCPUs()
		switch {
		case cand.IsEmpty():
			fresh = append(fresh, id)
			continue
		case cand.Size() != n:
			log.add("pod %s stamped bubble %s has %d cpus, its budget needs %d; reallocated", id, cand, cand.Size(), n)
		case !cand.IsSubsetOf(p.usable):
			log.add("pod %s stamped bubble %s includes unusable cpus %s (reserved, isolated or offline); reallocated",
				id, cand, cand.Difference(p.usable))
		case !cand.Intersection(cl.node).IsEmpty():
			log.add("cpus %s claimed twice: pod %s stamped bubble %s overlaps an earlier claim; reallocated",
				cand.Intersection(cl.node), id, cand)
		default:
			ps.bubble = cand
			st.pods[id] = ps
			cl.node = cl.node.Union(cand)
			continue
		}
		fresh = append(fresh, id)
	}
	return fresh
}

// stampedBubble returns the bubble most of the pod's pinned stamps name
// (ties go to the lowest container id) and the distinct bubbles named,
// when more than one.
func stampedBubble(st *state, stamps map[string]*Stamp, podID string) (cpuset.CPUSet, []string) {
	count := map[string]int{}
	var order []string
	sets := map[string]cpuset.CPUSet{}
	for _, id := range st.podContainers(podID) {
		s := stamps[id]
		// A node-shared stamp names the bubble but not the memory nodes
		// it was widened to: it does not vote.
		if s == nil || s.Bubble.IsEmpty() || s.Pool == PoolNodeShared {
			continue
		}
		k := s.Bubble.String()
		if count[k] == 0 {
			order = append(order, k)
			sets[k] = s.Bubble
		}
		count[k]++
	}
	if len(order) == 0 {
		return cpuset.New(), nil
	}
	best := order[0]
	for _, k := range order[1:] {
		if count[k] > count[best] {
			best = k
		}
	}
	if len(order) == 1 {
		return sets[best], nil
	}
	return sets[best], order
}

// sliceRoom returns where c's slice may lie (domain) and what of it is
// taken so far: its pod's bubble and the slices kept in it, or, without a
// bubble, the usable cpus and the bubbles and node-level slices kept.
func (p *Policy) sliceRoom(st *state, cl *claims, c ctrState) (domain, taken cpuset.CPUSet) {
	if b := st.pods[c.spec.PodID].bubble; !b.IsEmpty() {
		return b, cl.pods[c.spec.PodID]
	}
	return p.usable, cl.node
}

// keepSlice makes slice c's exclusive slice in st and claims it.
func keepSlice(st *state, cl *claims, c ctrState, slice cpuset.CPUSet) {
	c.pool, c.slice = PoolExclusive, slice
	st.addCtr(c)
	if pid := c.spec.PodID; !st.pods[pid].bubble.IsEmpty() {
		cl.pods[pid] = cl.pods[pid].Union(slice)
	} else {
		cl.node = cl.node.Union(slice)
	}
}

// keepStampedSlices keeps the stamped exclusive slices that are still
// valid and claims them. Of the other exclusive-eligible containers whose
// pool is known, it returns those without a stamp (unstamped) and those
// that need a fresh slice (fresh) (step 3).
func (p *Policy) keepStampedSlices(st *state, snap snapshot, cl *claims, log *conflicts) (unstamped, fresh []string) {
	for _, id := range snap.ctrIDs {
		c := st.ctrs[id]
		ps := st.pods[c.spec.PodID]
		n := p.exclusiveCPUs(ps, c.spec)
		if n == 0 || c.released || (ps.bubble.IsEmpty() && (p.scope != config.ScopeContainer || p.wantsBubble(ps.spec))) {
			continue
		}
		s := snap.stamps[id]
		if s == nil {
			unstamped = append(unstamped, id)
			continue
		}
		if s.Pool != PoolExclusive {
			fresh = append(fresh, id)
			continue
		}
		domain, taken := p.sliceRoom(st, cl, c)
		switch {
		case s.CPUs.Size() != n:
			log.add("container %s stamped slice %s has %d cpus, it needs %d; recarved", id, s.CPUs, s.CPUs.Size(), n)
		case !s.CPUs.IsSubsetOf(domain):
			log.add("container %s stamped slice %s lies outside %s; recarved", id, s.CPUs, domain)
		case !s.CPUs.Intersection(taken).IsEmpty():
			log.add("cpus %s claimed twice: container %s stamped slice %s overlaps an earlier claim; recarved",
				s.CPUs.Intersection(taken), id, s.CPUs)
		default:
			keepSlice(st, cl, c, s.CPUs)
			continue
		}
		fresh = append(fresh, id)
	}
	return unstamped, fresh
}

// adoptUnstampedSlices keeps and claims the current cpuset of each
// unstamped container when it would be a valid slice, and returns the
// others: they need a fresh slice (step 4). Stamped slices were kept
// first: a stamp wins.
func (p *Policy) adoptUnstampedSlices(st *state, snap snapshot, cl *claims, unstamped []string) (fresh []string) {
	for _, id := range unstamped {
		c := st.ctrs[id]
		cur := snap.current[id].CPUs
		n := p.exclusiveCPUs(st.pods[c.spec.PodID], c.spec)
		domain, taken := p.sliceRoom(st, cl, c)
		free := domain.Difference(taken)
		fits := cur.Size() == n && cur.IsSubsetOf(free)
		if !st.pods[c.spec.PodID].bubble.IsEmpty() {
			// The pod's shared containers keep a CPU...
			fits = fits && (free.Size() > n || !podSharedNeeded(st, snap.stamps, c.spec.PodID))
		} else {
			// ...and the node shared pool keeps one (container scope).
			fits = fits && free.Size() > n
		}
		if !fits {
			fresh = append(fresh, id)
			continue
		}
		keepSlice(st, cl, c, cur)
	}
	return fresh
}
