package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
)

// ContainerState is one container of a Synchronize snapshot. Pass only
// containers that are created, running or paused: a stopped container holds
// no CPUs.
type ContainerState struct {
	// Spec is the container, as for AddContainer, with the resources the
	// runtime reports now.
	Spec ContainerSpec
	// Stamp is the value of its StampAnnotation, "" when it has none.
	Stamp string
	// CPUs and Mems are its current cpuset.cpus and cpuset.mems as the
	// runtime reports them; empty when unset.
	CPUs, Mems cpuset.CPUSet
	// CPUQuota is its CFS quota as the runtime reports it: -1 for no
	// quota, 0 when the runtime reports none.
	CPUQuota int64
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
//  1. admit the snapshot: drop what has no id or is listed twice; repair
//     bad budgets and lifecycles; put the init containers of pods whose
//     app containers exist in the node shared pool, released (they still
//     run, see Policy.release); give back the CPU limit of every container
//     whose quota cgdelegate removed (restoreLimit);
//  2. keep every stamped bubble that has the budget's size, lies in the
//     usable CPUs and overlaps no bubble kept before it;
//  3. keep every stamped exclusive slice that has the container's size,
//     lies in its pod's kept bubble (or, in container scope, in the free
//     node pool) and overlaps no slice kept before it;
//  4. by the same rules, adopt the current cpuset of every
//     exclusive-eligible container without an exclusive stamp. Such a
//     container was created while no plugin ran and got its slice from an
//     earlier rebuild, which can not stamp it (an update carries no
//     annotations): without adoption every later rebuild would carve it
//     afresh and might move it;
//  5. reserve the memory of the kept bubbles and node-level slices on their
//     memory nodes (a max flow, memory.spread);
//  6. allocate fresh bubbles for budget pods without a kept one; a pod that
//     does not fit is degraded to the node shared pool;
//  7. carve fresh slices for exclusive-eligible containers without a kept
//     one (in container scope, where their memory fits); one that does not
//     fit is placed in its shared pool;
//  8. put everything else in its shared pool;
//  9. report an update for every container whose current cpuset differs
//     from the result.
//
// Every stamp that was not kept is reported in Conflicts.
func (p *Policy) Rebuild(pods []PodSpec, ctrs []ContainerState) RebuildResult {
	// Hold the lock throughout, so that no event interleaves with the
	// rebuild and is lost when the new state replaces the old.
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &rebuild{
		p: p, st: newState(), stamps: map[string]*Stamp{}, current: map[string]ContainerState{},
		claimed: cpuset.New(), podClaimed: map[string]cpuset.CPUSet{},
	}
	r.admitPods(pods)
	r.admitContainers(ctrs)
	r.keepStampedBubbles()
	r.keepStampedSlices()
	r.adoptUnstampedSlices()
	r.keptMemory()
	r.allocateBubbles()
	r.carveSlices()
	v := r.placeShared()
	r.diff(v)
	p.st, p.v = r.st, v
	return r.res
}

// rebuild is one Rebuild in progress: the state it builds and what its
// steps hand to each other.
type rebuild struct {
	p   *Policy
	st  *state
	res RebuildResult
	// stamps holds the stamps that parse, by container id.
	stamps map[string]*Stamp
	// current holds the admitted containers of the snapshot, by id.
	current map[string]ContainerState
	// podIDs and ctrIDs are the admitted ids, sorted.
	podIDs, ctrIDs []string
	// claimed holds the bubbles and node-level slices kept so far.
	claimed cpuset.CPUSet
	// podClaimed holds the slices kept so far inside each bubble.
	podClaimed map[string]cpuset.CPUSet
	// freshPods need a new bubble; freshCtrs need a new slice; unstamped
	// are exclusive-eligible containers without a stamp.
	freshPods, freshCtrs, unstamped []string
}

func (r *rebuild) note(format string, args ...any) {
	r.res.Conflicts = append(r.res.Conflicts, fmt.Sprintf(format, args...))
}

// admitPods records the valid pods of the snapshot (step 1).
func (r *rebuild) admitPods(pods []PodSpec) {
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b PodSpec) int { return cmp.Compare(a.ID, b.ID) })
	for _, ps := range pods {
		switch _, dup := r.st.pods[ps.ID]; {
		case ps.ID == "":
			r.note("pod %q without id ignored", ps.Name)
			continue
		case dup:
			r.note("pod %s listed twice; the second is ignored", ps.ID)
			continue
		}
		if err := ps.Budget.Validate(); err != nil {
			r.note("pod %s budget ignored: %v", ps.ID, err)
			ps.Budget = budget.Budget{}
		}
		r.st.addPod(podState{spec: ps, bubble: cpuset.New(), extraMems: cpuset.New()})
	}
}

// admitContainers records the containers of the snapshot that hold CPUs,
// all in the node shared pool for now, and parses their stamps (step 1).
// A container of an unlisted pod gets a pod without budget.
func (r *rebuild) admitContainers(ctrs []ContainerState) {
	ctrs = slices.Clone(ctrs)
	slices.SortFunc(ctrs, func(a, b ContainerState) int { return cmp.Compare(a.Spec.ID, b.Spec.ID) })
	hasRegular := map[string]bool{}
	for _, cs := range ctrs {
		if cs.Spec.Lifecycle == LifecycleRegular {
			hasRegular[cs.Spec.PodID] = true
		}
	}
	for _, cs := range ctrs {
		spec := cs.Spec
		switch _, dup := r.current[spec.ID]; {
		case spec.ID == "" || spec.PodID == "":
			r.note("container %q without id or pod id ignored", spec.Name)
			continue
		case dup:
			r.note("container %s listed twice; the second is ignored", spec.ID)
			continue
		}
		// An init container listed beside an app container of its pod has
		// not stopped (Synchronize lists live containers only): its CPUs
		// belong to the app containers, and it runs in the node shared
		// pool until it goes (Policy.release).
		released := spec.Lifecycle == LifecycleInit && hasRegular[spec.PodID]
		if _, ok := r.st.pods[spec.PodID]; !ok {
			r.note("container %s (%q) refers to unknown pod %s; placed in the node shared pool", spec.ID, spec.Name, spec.PodID)
			r.st.addPod(podState{spec: PodSpec{ID: spec.PodID}, bubble: cpuset.New(), extraMems: cpuset.New()})
		}
		switch spec.Lifecycle {
		case LifecycleRegular, LifecycleInit, LifecycleSidecar:
		default:
			r.note("container %s lifecycle %q treated as regular", spec.ID, spec.Lifecycle)
			spec.Lifecycle = LifecycleRegular
		}
		stamp, stampErr := cs.parsedStamp()
		if err := stamp.agrees(cs.CPUs); err != nil {
			// A released init container left its slice: its stamp is
			// stale, and says nothing worth a note.
			if !released {
				r.note("container %s: %v; stamp ignored", spec.ID, err)
			}
			stamp = nil
		}
		spec = restoreLimit(spec, stamp, cs.CPUQuota)
		if err := spec.Resources.Validate(); err != nil {
			r.note("container %s resources ignored: %v", spec.ID, err)
			spec.Resources = budget.NewContainer(budget.Budget{})
		}
		cs.Spec = spec
		r.current[spec.ID] = cs
		r.st.addCtr(ctrState{spec: spec, pool: PoolNodeShared, released: released})
		if stampErr != nil {
			r.note("container %s: %v; ignored", spec.ID, stampErr)
		}
		if stamp != nil {
			r.stamps[spec.ID] = stamp
		}
	}
	r.podIDs = slices.Sorted(maps.Keys(r.st.pods))
	r.ctrIDs = slices.Sorted(maps.Keys(r.st.ctrs))
}

// parsedStamp returns the container's stamp: nil when it has none or when
// it does not parse (then with the error).
func (cs ContainerState) parsedStamp() (*Stamp, error) {
	if cs.Stamp == "" {
		return nil, nil
	}
	s, err := ParseStamp(cs.Stamp)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// agrees checks a stamp against the cpuset the runtime reports the
// container runs on (cur): an exclusive stamp's cpus must be exactly
// cur, and a pod-shared container must run inside the stamped bubble.
// A stamp is an annotation, and cgdelegate is not the only one that
// writes annotations: a runtime may copy the pod's onto its containers
// (CRI-O copies them all), so a pod author can put any stamp on a
// container created while no plugin pinned. Checked this way, a stamp
// can only keep a container on CPUs it already runs on; it can never
// claim another container's. A node-shared stamp claims no CPUs and is
// not checked. A nil stamp agrees.
func (s *Stamp) agrees(cur cpuset.CPUSet) error {
	if s == nil {
		return nil
	}
	switch {
	case s.Pool == PoolExclusive && !cur.Equals(s.CPUs):
		return fmt.Errorf("its stamp says exclusive cpus %s, but it runs on cpus %q", s.CPUs, cur.String())
	case s.Pool == PoolPodShared && (cur.IsEmpty() || !cur.IsSubsetOf(s.Bubble)):
		return fmt.Errorf("its stamp says pod-shared in bubble %q, but it runs on cpus %q", s.Bubble.String(), cur.String())
	}
	return nil
}

// restoreLimit undoes cgdelegate's own quota change: an exclusive
// container runs with CFS quota -1, so the runtime now reports no CPU
// limit. Its limit was its request (it was Guaranteed), so put it back for
// the rebuild to recognise the slice. stamp is the container's parsed
// stamp, nil without a valid one.
//
// The quota is cgdelegate's when the stamp says exclusive, or, for a
// container without a valid stamp, when the quota is exactly -1: a
// container created while no plugin ran got its slice (and quota -1) from a
// Synchronize update, which can not add the stamp annotation. The kubelet
// sends quota 0, never -1, for a container without a CPU limit.
func restoreLimit(spec ContainerSpec, stamp *Stamp, quota int64) ContainerSpec {
	b := spec.Resources.Budget
	if b.CPULimit != 0 || b.CPURequest == 0 {
		return spec
	}
	switch {
	case stamp != nil && stamp.Pool != PoolExclusive:
		return spec
	case stamp == nil && quota != -1:
		return spec
	}
	b.CPULimit = b.CPURequest
	spec.Resources = budget.NewContainer(b)
	return spec
}

// keepStampedBubbles keeps the stamped bubbles that are still valid and
// lists the budget pods that need a fresh one (step 2).
func (r *rebuild) keepStampedBubbles() {
	for _, id := range r.podIDs {
		ps := r.st.pods[id]
		if !r.p.wantsBubble(ps.spec) {
			continue
		}
		if c, ok := r.st.notGuaranteed(id); ok {
			ps.degraded = demoted(c)
			r.st.pods[id] = ps
			continue
		}
		cand, votes := stampedBubble(r.st, r.stamps, id)
		if len(votes) > 1 {
			r.note("pod %s containers disagree on the bubble (%v); trying %s", id, votes, cand)
		}
		n := ps.spec.Budget.BubbleCPUs()
		switch {
		case cand.IsEmpty():
			r.freshPods = append(r.freshPods, id)
			continue
		case cand.Size() != n:
			r.note("pod %s stamped bubble %s has %d cpus, its budget needs %d; reallocated", id, cand, cand.Size(), n)
		case !cand.IsSubsetOf(r.p.usable):
			r.note("pod %s stamped bubble %s includes unusable cpus %s (reserved, isolated or offline); reallocated",
				id, cand, cand.Difference(r.p.usable))
		case !cand.Intersection(r.claimed).IsEmpty():
			r.note("cpus %s claimed twice: pod %s stamped bubble %s overlaps an earlier claim; reallocated",
				cand.Intersection(r.claimed), id, cand)
		default:
			ps.bubble = cand
			r.st.pods[id] = ps
			r.claimed = r.claimed.Union(cand)
			continue
		}
		r.freshPods = append(r.freshPods, id)
	}
}

// keptMemory gives the kept bubbles and node-level slices their memory
// back (step 5). Their memory nodes are those of their CPUs and those the
// stamps of their pinned containers name beyond them (a widened bubble or
// slice; an adopted slice has no stamp, its current mems say). The memory
// is reserved there within the nodes' capacity when possible
// (memory.spread), beyond it otherwise (what runs, runs). Holders on fewer
// memory nodes go first, pods before containers, each by id.
func (r *rebuild) keptMemory() {
	type holder struct {
		pod, ctr string // one of them
		cpuNodes cpuset.CPUSet
		extra    cpuset.CPUSet
		mem      int64
	}
	var hs []holder
	for _, id := range r.podIDs {
		ps := r.st.pods[id]
		if ps.bubble.IsEmpty() {
			continue
		}
		cpuNodes := r.p.topo.MemsOf(ps.bubble)
		for _, cid := range r.st.podContainers(id) {
			if st := r.stamps[cid]; st != nil && st.Pool != PoolNodeShared && st.Bubble.Equals(ps.bubble) {
				ps.extraMems = ps.extraMems.Union(st.Mems.Difference(cpuNodes))
			}
		}
		ps.extraMems = ps.extraMems.Intersection(r.p.memNodes)
		r.st.pods[id] = ps
		hs = append(hs, holder{pod: id, cpuNodes: cpuNodes, extra: ps.extraMems, mem: podMemory(ps.spec.Budget)})
	}
	for _, id := range r.ctrIDs {
		c := r.st.ctrs[id]
		if c.pool != PoolExclusive || !r.st.pods[c.spec.PodID].bubble.IsEmpty() {
			continue
		}
		cpuNodes := r.p.topo.MemsOf(c.slice)
		mems := r.current[id].Mems
		if st := r.stamps[id]; st != nil {
			mems = st.Mems
		}
		c.extraMems = mems.Difference(cpuNodes).Intersection(r.p.memNodes)
		r.st.addCtr(c)
		hs = append(hs, holder{ctr: id, cpuNodes: cpuNodes, extra: c.extraMems, mem: podMemory(c.spec.Resources.Budget)})
	}
	slices.SortStableFunc(hs, func(a, b holder) int {
		return cmp.Compare(a.cpuNodes.Union(a.extra).Size(), b.cpuNodes.Union(b.extra).Size())
	})
	if !r.p.mem.known {
		return
	}
	var ds []demand
	var with []holder
	for _, h := range hs {
		if h.mem > 0 {
			ds = append(ds, demand{group: h.cpuNodes.Union(h.extra).List(), first: h.cpuNodes, mem: h.mem})
			with = append(with, h)
		}
	}
	for k, share := range r.p.mem.spread(ds) {
		if h := with[k]; h.pod != "" {
			ps := r.st.pods[h.pod]
			ps.memShare = share
			r.st.pods[h.pod] = ps
		} else {
			c := r.st.ctrs[h.ctr]
			c.memShare = share
			r.st.addCtr(c)
		}
	}
}

// sliceRoom returns where c's slice may lie (domain) and what of it is
// taken so far: its pod's bubble and the slices kept in it, or, without a
// bubble, the usable cpus and the bubbles and node-level slices kept.
func (r *rebuild) sliceRoom(c ctrState) (domain, taken cpuset.CPUSet) {
	if b := r.st.pods[c.spec.PodID].bubble; !b.IsEmpty() {
		return b, r.podClaimed[c.spec.PodID]
	}
	return r.p.usable, r.claimed
}

// keepSlice makes slice c's exclusive slice and claims it.
func (r *rebuild) keepSlice(c ctrState, slice cpuset.CPUSet) {
	c.pool, c.slice = PoolExclusive, slice
	r.st.addCtr(c)
	if pid := c.spec.PodID; !r.st.pods[pid].bubble.IsEmpty() {
		r.podClaimed[pid] = r.podClaimed[pid].Union(slice)
	} else {
		r.claimed = r.claimed.Union(slice)
	}
}

// keepStampedSlices keeps the stamped exclusive slices that are still
// valid, and sorts the other exclusive-eligible containers whose pool is
// known into unstamped and fresh (step 3).
func (r *rebuild) keepStampedSlices() {
	for _, id := range r.ctrIDs {
		c := r.st.ctrs[id]
		n := r.p.exclusiveCPUs(r.st.pods[c.spec.PodID], c.spec)
		ps := r.st.pods[c.spec.PodID]
		if n == 0 || c.released || (ps.bubble.IsEmpty() && (r.p.scope != config.ScopeContainer || r.p.wantsBubble(ps.spec))) {
			continue
		}
		s := r.stamps[id]
		if s == nil {
			r.unstamped = append(r.unstamped, id)
			continue
		}
		if s.Pool != PoolExclusive {
			r.freshCtrs = append(r.freshCtrs, id)
			continue
		}
		domain, taken := r.sliceRoom(c)
		switch {
		case s.CPUs.Size() != n:
			r.note("container %s stamped slice %s has %d cpus, it needs %d; recarved", id, s.CPUs, s.CPUs.Size(), n)
		case !s.CPUs.IsSubsetOf(domain):
			r.note("container %s stamped slice %s lies outside %s; recarved", id, s.CPUs, domain)
		case !s.CPUs.Intersection(taken).IsEmpty():
			r.note("cpus %s claimed twice: container %s stamped slice %s overlaps an earlier claim; recarved",
				s.CPUs.Intersection(taken), id, s.CPUs)
		default:
			r.keepSlice(c, s.CPUs)
			continue
		}
		r.freshCtrs = append(r.freshCtrs, id)
	}
}

// adoptUnstampedSlices keeps the current cpuset of an unstamped container
// when it would be a valid slice (step 4). Stamped slices were kept first:
// a stamp wins.
func (r *rebuild) adoptUnstampedSlices() {
	for _, id := range r.unstamped {
		c := r.st.ctrs[id]
		cur := r.current[id].CPUs
		n := r.p.exclusiveCPUs(r.st.pods[c.spec.PodID], c.spec)
		domain, taken := r.sliceRoom(c)
		free := domain.Difference(taken)
		fits := cur.Size() == n && cur.IsSubsetOf(free)
		if !r.st.pods[c.spec.PodID].bubble.IsEmpty() {
			// The pod's shared containers keep a CPU...
			fits = fits && (free.Size() > n || !r.podSharedNeeded(c.spec.PodID))
		} else {
			// ...and the node shared pool keeps one (container scope).
			fits = fits && free.Size() > n
		}
		if !fits {
			r.freshCtrs = append(r.freshCtrs, id)
			continue
		}
		r.keepSlice(c, cur)
	}
}

// allocateBubbles gives the pods in freshPods a new bubble, or degrades
// them to the node shared pool; the exclusive-eligible containers of a pod
// that got one need a fresh slice (step 6).
func (r *rebuild) allocateBubbles() {
	for _, id := range r.freshPods {
		ps := r.st.pods[id]
		b, extra, share, err := r.p.placeBubble(r.st, r.p.usable.Difference(r.claimed), ps.spec.Budget.BubbleCPUs(), podMemory(ps.spec.Budget), "pod "+id+" bubble")
		if err != nil {
			ps.degraded = err.Error()
			r.st.pods[id] = ps
			r.note("pod %s gets no bubble, its containers run in the node shared pool: %v", id, err)
			continue
		}
		ps.bubble, ps.extraMems, ps.memShare = b, extra, share
		r.st.pods[id] = ps
		r.claimed = r.claimed.Union(b)
		for _, cid := range r.st.podContainers(id) {
			if c := r.st.ctrs[cid]; r.p.exclusiveCPUs(ps, c.spec) > 0 && !c.released && !slices.Contains(r.freshCtrs, cid) {
				r.freshCtrs = append(r.freshCtrs, cid)
			}
		}
	}
	slices.Sort(r.freshCtrs)
}

// carveSlices gives the containers in freshCtrs a new slice; one that does
// not fit stays shared (step 7).
func (r *rebuild) carveSlices() {
	for _, id := range r.freshCtrs {
		c := r.st.ctrs[id]
		n := r.p.exclusiveCPUs(r.st.pods[c.spec.PodID], c.spec)
		inBubble := !r.st.pods[c.spec.PodID].bubble.IsEmpty()
		if !inBubble && r.p.scope != config.ScopeContainer {
			continue // degraded pod
		}
		domain, taken := r.sliceRoom(c)
		free := domain.Difference(taken)
		var (
			slice cpuset.CPUSet
			err   error
		)
		switch {
		case inBubble && free.Size() == n && r.podSharedNeeded(c.spec.PodID):
			err = ErrNoSharedCPUs
		case inBubble:
			slice, err = r.p.takeFrom(free, n, fmt.Sprintf("container %s slice in pod %s bubble", id, c.spec.PodID))
		default:
			mem := podMemory(c.spec.Resources.Budget)
			var used map[int]int64
			if mem > 0 && r.p.mem.known {
				used = memUsed(r.st)
			}
			slice, c.extraMems, c.memShare, err = r.p.place(used, free, n, mem, "container "+id+" exclusive cpus")
		}
		if err != nil {
			r.note("container %s gets no exclusive cpus and runs in its shared pool: %v", id, err)
			continue
		}
		r.keepSlice(c, slice)
	}
}

// placeShared puts every container without a slice in its shared pool and
// returns the pools of the new state (step 8). The pools depend only on
// the bubbles and slices, which are final now.
func (r *rebuild) placeShared() *view {
	v := newView(r.p.usable, r.st)
	for _, id := range r.ctrIDs {
		c := r.st.ctrs[id]
		if c.pool == PoolExclusive || c.released {
			continue
		}
		c.pool = PoolNodeShared
		// A regular container finding its pod shared pool empty goes to
		// the node shared pool, as in placeNew.
		pool, ok := v.pod[c.spec.PodID]
		if ok && !r.overflowed(c) && (!pool.IsEmpty() || c.spec.Lifecycle != LifecycleRegular) {
			c.pool = PoolPodShared
		}
		r.st.addCtr(c)
	}
	for _, pid := range r.podIDs {
		if pool, ok := v.pod[pid]; ok && pool.IsEmpty() && r.st.podSharedUsed(pid) {
			r.note("pod %s: %v (after rebuild)", pid, ErrNoSharedCPUs)
		}
	}
	if r.p.nodeCPUs(v).IsEmpty() {
		for _, id := range r.ctrIDs {
			if r.st.ctrs[id].pool == PoolNodeShared {
				r.note("the node shared pool is empty but container %s needs it", id)
				break
			}
		}
	}
	return v
}

// diff reports an update for every container whose current cpuset differs
// from its assignment under v (step 9).
func (r *rebuild) diff(v *view) {
	for _, id := range r.ctrIDs {
		c := r.st.ctrs[id]
		a := r.p.assign(r.st, v, c)
		cur := r.current[id]
		if lim := c.spec.Resources.CPULimit; c.pool != PoolExclusive && cur.CPUQuota == -1 && lim > 0 {
			a.RestoreQuota = budget.QuotaFromMilliCPU(lim, budget.DefaultPeriod)
			r.note("container %s runs without a cpu quota but is no longer exclusive; its quota for %s restored", id, budget.FormatMilliCPU(lim))
		}
		if !cur.CPUs.Equals(a.CPUs) || !cur.Mems.Equals(a.Mems) || a.RestoreQuota > 0 {
			r.res.Updates = append(r.res.Updates, a)
		}
	}
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

// podSharedNeeded reports whether the pod has a container without
// exclusive CPUs that needs the pod's shared pool whatever the others get:
// any but one that overflowed to the node shared pool.
func (r *rebuild) podSharedNeeded(podID string) bool {
	for id := range r.st.byPod[podID] {
		c := r.st.ctrs[id]
		if c.spec.Resources.ExclusiveCPUs() == 0 && !r.overflowed(c) && !c.released {
			return true
		}
	}
	return false
}

// overflowed says whether shared container c, in a pod with a bubble, was
// placed in the node shared pool because its pod shared pool was empty
// (placeNew: an ephemeral container): it is regular and its stamp says
// node-shared next to the pod's bubble. It stays there, as it would have
// had the plugin not restarted, when the pod's pool has CPUs again. A pod
// whose containers are all node-shared gets a fresh bubble (its stamps do
// not vote, see stampedBubble); they stay node-shared only if that is
// the bubble they were stamped with.
func (r *rebuild) overflowed(c ctrState) bool {
	s := r.stamps[c.spec.ID]
	bubble := r.st.pods[c.spec.PodID].bubble
	return c.spec.Lifecycle == LifecycleRegular && s != nil && s.Pool == PoolNodeShared &&
		!bubble.IsEmpty() && s.Bubble.Equals(bubble)
}
