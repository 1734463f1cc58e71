package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/podres"
)

// ContainerState is one container of a Synchronize snapshot. Pass only
// containers that are created, running or paused: a stopped container holds
// no CPUs.
type ContainerState struct {
	// Spec is the container, as for AddContainer.
	Spec ContainerSpec
	// Stamp is the value of its StampAnnotation, "" when it has none.
	Stamp string
	// CPUs and Mems are its current cpuset.cpus and cpuset.mems as the
	// runtime reports them; empty when unset.
	CPUs, Mems cpuset.CPUSet
}

// RebuildResult is what Rebuild did.
type RebuildResult struct {
	// Updates are the containers whose cpuset must change, sorted by id.
	Updates []Assignment
	// Conflicts describes every conflict found and how it was repaired,
	// for the log.
	Conflicts []string
}

// Rebuild replaces the whole state with one reconstructed from a
// Synchronize snapshot. Synchronize is the truth: every pod and container
// listed is kept, and nothing else.
//
// Steps, each in pod/container id order so that the result is
// deterministic:
//
//  1. keep every stamped bubble that has the budget's size, lies in the
//     usable CPUs and overlaps no bubble kept before it;
//  2. keep every stamped exclusive slice that has the container's size,
//     lies in its pod's kept bubble (or, in container scope, in the free
//     node pool) and overlaps no slice kept before it; then, by the same
//     rules, adopt the current cpuset of every exclusive-eligible container
//     without an exclusive stamp. Such a container was created while no
//     plugin ran and got its slice from an earlier rebuild, which can not
//     stamp it (an update carries no annotations): without adoption every
//     later rebuild would carve it afresh and might move it;
//  3. allocate fresh bubbles for budget pods without a kept one; a pod that
//     does not fit is degraded to the node shared pool;
//  4. carve fresh slices for exclusive-eligible containers without a kept
//     one; one that does not fit is placed in its shared pool;
//  5. put everything else in its shared pool;
//  6. report an update for every container whose current cpuset differs
//     from the result.
//
// Every stamp that was not kept is reported in Conflicts.
func (p *Policy) Rebuild(pods []PodSpec, ctrs []ContainerState) RebuildResult {
	// Hold the lock throughout, so that no event interleaves with the
	// rebuild and is lost when the new state replaces the old.
	p.mu.Lock()
	defer p.mu.Unlock()
	var res RebuildResult
	note := func(format string, args ...any) {
		res.Conflicts = append(res.Conflicts, fmt.Sprintf(format, args...))
	}
	st := newState()

	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b PodSpec) int { return cmp.Compare(a.ID, b.ID) })
	for _, ps := range pods {
		switch _, dup := st.pods[ps.ID]; {
		case ps.ID == "":
			note("pod %q without id ignored", ps.Name)
			continue
		case dup:
			note("pod %s listed twice; the second is ignored", ps.ID)
			continue
		}
		if err := ps.Budget.Validate(); err != nil {
			note("pod %s budget ignored: %v", ps.ID, err)
			ps.Budget = podres.Budget{}
		}
		st.addPod(podState{spec: ps, bubble: cpuset.New()})
	}

	ctrs = slices.Clone(ctrs)
	slices.SortFunc(ctrs, func(a, b ContainerState) int { return cmp.Compare(a.Spec.ID, b.Spec.ID) })
	stamps := map[string]*Stamp{}
	current := map[string]ContainerState{}
	hasRegular := map[string]bool{}
	for _, cs := range ctrs {
		if cs.Spec.Lifecycle == LifecycleRegular {
			hasRegular[cs.Spec.PodID] = true
		}
	}
	for _, cs := range ctrs {
		spec := cs.Spec
		switch _, dup := current[spec.ID]; {
		case spec.ID == "" || spec.PodID == "":
			note("container %q without id or pod id ignored", spec.Name)
			continue
		case dup:
			note("container %s listed twice; the second is ignored", spec.ID)
			continue
		case spec.Lifecycle == LifecycleInit && hasRegular[spec.PodID]:
			continue // completed: its CPUs belong to the app containers
		}
		if _, ok := st.pods[spec.PodID]; !ok {
			note("container %s (%q) refers to unknown pod %s; placed in the node shared pool", spec.ID, spec.Name, spec.PodID)
			st.addPod(podState{spec: PodSpec{ID: spec.PodID}, bubble: cpuset.New()})
		}
		switch spec.Lifecycle {
		case LifecycleRegular, LifecycleInit, LifecycleSidecar:
		default:
			note("container %s lifecycle %q treated as regular", spec.ID, spec.Lifecycle)
			spec.Lifecycle = LifecycleRegular
		}
		if err := spec.Resources.Validate(); err != nil {
			note("container %s resources ignored: %v", spec.ID, err)
			spec.Resources = podres.NewContainer(podres.Budget{})
		}
		cs.Spec = spec
		current[spec.ID] = cs
		st.addCtr(ctrState{spec: spec, pool: PoolNodeShared})
		if cs.Stamp != "" {
			s, err := ParseStamp(cs.Stamp)
			if err != nil {
				note("container %s: %v; ignored", spec.ID, err)
				continue
			}
			stamps[spec.ID] = &s
		}
	}
	podIDs := slices.Sorted(maps.Keys(st.pods))
	ctrIDs := slices.Sorted(maps.Keys(st.ctrs))

	// 1. Stamped bubbles.
	claimed := cpuset.New() // bubbles and node-level slices
	wantBubble := func(ps podState) bool { return p.scope == config.ScopePod && ps.spec.Budget.HasCPU() }
	var freshPods []string
	for _, id := range podIDs {
		ps := st.pods[id]
		if !wantBubble(ps) {
			continue
		}
		cand, votes := stampedBubble(st, stamps, id)
		if len(votes) > 1 {
			note("pod %s containers disagree on the bubble (%v); trying %s", id, votes, cand)
		}
		n := ps.spec.Budget.WholeCPUs()
		switch {
		case cand.IsEmpty():
			freshPods = append(freshPods, id)
			continue
		case cand.Size() != n:
			note("pod %s stamped bubble %s has %d cpus, its budget needs %d; reallocated", id, cand, cand.Size(), n)
		case !cand.IsSubsetOf(p.usable):
			note("pod %s stamped bubble %s includes unusable cpus %s (reserved, isolated or offline); reallocated",
				id, cand, cand.Difference(p.usable))
		case !cand.Intersection(claimed).IsEmpty():
			note("cpus %s claimed twice: pod %s stamped bubble %s overlaps an earlier claim; reallocated",
				cand.Intersection(claimed), id, cand)
		default:
			ps.bubble = cand
			st.pods[id] = ps
			claimed = claimed.Union(cand)
			continue
		}
		freshPods = append(freshPods, id)
	}

	// 2. Stamped slices.
	podClaimed := map[string]cpuset.CPUSet{} // slices inside each bubble
	var freshCtrs, unstamped []string
	for _, id := range ctrIDs {
		c := st.ctrs[id]
		n := c.spec.Resources.ExclusiveCPUs()
		ps := st.pods[c.spec.PodID]
		inBubble := !ps.bubble.IsEmpty()
		if n == 0 || (!inBubble && (p.scope != config.ScopeContainer || wantBubble(ps))) {
			continue
		}
		s := stamps[id]
		if s == nil {
			unstamped = append(unstamped, id)
			continue
		}
		if s.Pool != PoolExclusive {
			freshCtrs = append(freshCtrs, id)
			continue
		}
		domain, taken := p.usable, claimed
		if inBubble {
			domain, taken = ps.bubble, podClaimed[c.spec.PodID]
		}
		switch {
		case s.CPUs.Size() != n:
			note("container %s stamped slice %s has %d cpus, it needs %d; recarved", id, s.CPUs, s.CPUs.Size(), n)
		case !s.CPUs.IsSubsetOf(domain):
			note("container %s stamped slice %s lies outside %s; recarved", id, s.CPUs, domain)
		case !s.CPUs.Intersection(taken).IsEmpty():
			note("cpus %s claimed twice: container %s stamped slice %s overlaps an earlier claim; recarved",
				s.CPUs.Intersection(taken), id, s.CPUs)
		default:
			c.pool, c.slice = PoolExclusive, s.CPUs
			st.addCtr(c)
			if inBubble {
				podClaimed[c.spec.PodID] = taken.Union(s.CPUs)
			} else {
				claimed = claimed.Union(s.CPUs)
			}
			continue
		}
		freshCtrs = append(freshCtrs, id)
	}

	// 2b. Unstamped slices: adopt the current cpuset when it would be a
	// valid slice. Stamped slices were kept first: a stamp wins.
	for _, id := range unstamped {
		c := st.ctrs[id]
		cur := current[id].CPUs
		n := c.spec.Resources.ExclusiveCPUs()
		ps := st.pods[c.spec.PodID]
		inBubble := !ps.bubble.IsEmpty()
		domain, taken := p.usable, claimed
		if inBubble {
			domain, taken = ps.bubble, podClaimed[c.spec.PodID]
		}
		free := domain.Difference(taken)
		fits := cur.Size() == n && cur.IsSubsetOf(free)
		if inBubble {
			// The pod's shared containers keep a CPU...
			fits = fits && (free.Size() > n || !podHasShared(st, c.spec.PodID))
		} else {
			// ...and the node shared pool keeps one (container scope).
			fits = fits && free.Size() > n
		}
		if !fits {
			freshCtrs = append(freshCtrs, id)
			continue
		}
		c.pool, c.slice = PoolExclusive, cur
		st.addCtr(c)
		if inBubble {
			podClaimed[c.spec.PodID] = taken.Union(cur)
		} else {
			claimed = claimed.Union(cur)
		}
	}

	// 3. Fresh bubbles.
	for _, id := range freshPods {
		ps := st.pods[id]
		b, err := p.takeFromNode(p.usable.Difference(claimed), ps.spec.Budget.WholeCPUs(), "pod "+id+" bubble")
		if err != nil {
			ps.degraded = err.Error()
			st.pods[id] = ps
			note("pod %s gets no bubble, its containers run in the node shared pool: %v", id, err)
			continue
		}
		ps.bubble = b
		st.pods[id] = ps
		claimed = claimed.Union(b)
		for _, cid := range ctrIDs {
			c := st.ctrs[cid]
			if c.spec.PodID == id && c.spec.Resources.ExclusiveCPUs() > 0 && !slices.Contains(freshCtrs, cid) {
				freshCtrs = append(freshCtrs, cid)
			}
		}
	}
	slices.Sort(freshCtrs)

	// 4. Fresh slices.
	for _, id := range freshCtrs {
		c := st.ctrs[id]
		n := c.spec.Resources.ExclusiveCPUs()
		ps := st.pods[c.spec.PodID]
		var (
			slice cpuset.CPUSet
			err   error
		)
		switch {
		case !ps.bubble.IsEmpty():
			free := ps.bubble.Difference(podClaimed[c.spec.PodID])
			if free.Size() == n && podHasShared(st, c.spec.PodID) {
				err = ErrNoSharedCPUs
				break
			}
			slice, err = p.takeFrom(free, n, fmt.Sprintf("container %s slice in pod %s bubble", id, c.spec.PodID))
			if err == nil {
				podClaimed[c.spec.PodID] = podClaimed[c.spec.PodID].Union(slice)
			}
		case p.scope == config.ScopeContainer:
			slice, err = p.takeFromNode(p.usable.Difference(claimed), n, "container "+id+" exclusive cpus")
			if err == nil {
				claimed = claimed.Union(slice)
			}
		default:
			continue // degraded pod
		}
		if err != nil {
			note("container %s gets no exclusive cpus and runs in its shared pool: %v", id, err)
			continue
		}
		c.pool, c.slice = PoolExclusive, slice
		st.addCtr(c)
	}

	// 5. Shared pools.
	for _, id := range ctrIDs {
		c := st.ctrs[id]
		if c.pool == PoolExclusive {
			continue
		}
		c.pool = PoolNodeShared
		if !st.pods[c.spec.PodID].bubble.IsEmpty() {
			c.pool = PoolPodShared
		}
		st.addCtr(c)
	}
	v := newView(p.usable, st)
	for _, pid := range podIDs {
		if pool, ok := v.pod[pid]; ok && pool.IsEmpty() && st.hasPodShared(pid) {
			note("pod %s: %v (after rebuild)", pid, ErrNoSharedCPUs)
		}
	}
	if v.node.IsEmpty() {
		for _, id := range ctrIDs {
			if st.ctrs[id].pool == PoolNodeShared {
				note("the node shared pool is empty but container %s needs it", id)
				break
			}
		}
	}

	// 6. Updates.
	for _, id := range ctrIDs {
		c := st.ctrs[id]
		a := assign(p.topo, st, v, c)
		cur := current[id]
		if s := stamps[id]; s != nil && s.Pool == PoolExclusive && c.pool == PoolExclusive &&
			s.CPUs.Equals(c.slice) && !cur.CPUs.IsEmpty() && !cur.CPUs.Equals(c.slice) {
			note("container %s runs on cpus %s but its stamp says %s; repaired", id, cur.CPUs, s.CPUs)
		}
		if !cur.CPUs.Equals(a.CPUs) || !cur.Mems.Equals(a.Mems) {
			res.Updates = append(res.Updates, a)
		}
	}

	p.st, p.v = st, v
	return res
}

// stampedBubble returns the bubble most of the pod's stamps name (ties go
// to the lowest container id) and the distinct bubbles named, when more
// than one.
func stampedBubble(st *state, stamps map[string]*Stamp, podID string) (cpuset.CPUSet, []string) {
	count := map[string]int{}
	var order []string
	sets := map[string]cpuset.CPUSet{}
	for _, id := range st.podContainers(podID) {
		s := stamps[id]
		if s == nil || s.Bubble.IsEmpty() {
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

// podHasShared reports whether the pod has a container that is not
// exclusive-eligible (it will need the pod shared pool).
func podHasShared(st *state, podID string) bool {
	for _, c := range st.ctrs {
		if c.spec.PodID == podID && c.spec.Resources.ExclusiveCPUs() == 0 {
			return true
		}
	}
	return false
}
