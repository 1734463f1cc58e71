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
//
// Each step is a function of what it reads that returns what it
// produces, the lists of pods and containers still to place above all.
// Three accumulators are passed along explicitly: st, the state being
// built, whose entries each step completes; cl, the CPUs claimed so far,
// which the steps that keep or carve CPUs check and extend (2, 3, 4, 6
// and 7); and log, the conflicts. The admitted snapshot is read-only
// after step 1.
func (p *Policy) Rebuild(pods []PodSpec, ctrs []ContainerState) RebuildResult {
	// Hold the lock throughout, so that no event interleaves with the
	// rebuild and is lost when the new state replaces the old.
	p.mu.Lock()
	defer p.mu.Unlock()
	var log conflicts
	st := admitPods(pods, &log)
	snap := admitContainers(st, ctrs, &log)
	cl := newClaims()
	freshPods := p.keepStampedBubbles(st, snap, cl, &log)
	unstamped, freshCtrs := p.keepStampedSlices(st, snap, cl, &log)
	freshCtrs = append(freshCtrs, p.adoptUnstampedSlices(st, snap, cl, unstamped)...)
	p.keptMemory(st, snap)
	freshCtrs = p.allocateBubbles(st, cl, freshPods, freshCtrs, &log)
	p.carveSlices(st, snap, cl, freshCtrs, &log)
	v := p.placeShared(st, snap, &log)
	updates := p.diff(st, v, snap, &log)
	p.st, p.v = st, v
	return RebuildResult{Updates: updates, Conflicts: log}
}

// conflicts collects RebuildResult.Conflicts.
type conflicts []string

func (l *conflicts) add(format string, args ...any) {
	*l = append(*l, fmt.Sprintf(format, args...))
}

// snapshot is the Synchronize snapshot as step 1 admitted it; the later
// steps only read it.
type snapshot struct {
	// stamps holds the stamps that parse and agree with the container's
	// cpuset, by container id.
	stamps map[string]*Stamp
	// current holds the admitted containers, by id.
	current map[string]ContainerState
	// podIDs and ctrIDs are the admitted ids, sorted.
	podIDs, ctrIDs []string
}

// claims holds the CPUs kept so far: the bubbles and node-level slices
// (node), and the slices inside each bubble (pods, by pod id).
type claims struct {
	node cpuset.CPUSet
	pods map[string]cpuset.CPUSet
}

func newClaims() *claims {
	return &claims{node: cpuset.New(), pods: map[string]cpuset.CPUSet{}}
}

// admitPods returns a state holding the valid pods of the snapshot
// (step 1).
func admitPods(pods []PodSpec, log *conflicts) *state {
	st := newState()
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b PodSpec) int { return cmp.Compare(a.ID, b.ID) })
	for _, ps := range pods {
		switch _, dup := st.pods[ps.ID]; {
		case ps.ID == "":
			log.add("pod %q without id ignored", ps.Name)
			continue
		case dup:
			log.add("pod %s listed twice; the second is ignored", ps.ID)
			continue
		}
		if err := ps.Budget.Validate(); err != nil {
			log.add("pod %s budget ignored: %v", ps.ID, err)
			ps.Budget = budget.Budget{}
		}
		st.addPod(podState{spec: ps, bubble: cpuset.New(), extraMems: cpuset.New()})
	}
	return st
}

// admitContainers adds to st the containers of the snapshot that hold
// CPUs, all in the node shared pool for now, and returns them with their
// stamps (step 1). A container of an unlisted pod gets a pod without
// budget.
func admitContainers(st *state, ctrs []ContainerState, log *conflicts) snapshot {
	ctrs = slices.Clone(ctrs)
	slices.SortFunc(ctrs, func(a, b ContainerState) int { return cmp.Compare(a.Spec.ID, b.Spec.ID) })
	hasRegular := map[string]bool{}
	for _, cs := range ctrs {
		if cs.Spec.Lifecycle == LifecycleRegular {
			hasRegular[cs.Spec.PodID] = true
		}
	}
	snap := snapshot{stamps: map[string]*Stamp{}, current: map[string]ContainerState{}}
	for _, cs := range ctrs {
		switch _, dup := snap.current[cs.Spec.ID]; {
		case cs.Spec.ID == "" || cs.Spec.PodID == "":
			log.add("container %q without id or pod id ignored", cs.Spec.Name)
			continue
		case dup:
			log.add("container %s listed twice; the second is ignored", cs.Spec.ID)
			continue
		}
		// An init container listed beside an app container of its pod has
		// not stopped (Synchronize lists live containers only): its CPUs
		// belong to the app containers, and it runs in the node shared
		// pool until it goes (Policy.release).
		released := cs.Spec.Lifecycle == LifecycleInit && hasRegular[cs.Spec.PodID]
		admitted, stamp := admitContainer(st, cs, released, log)
		snap.current[admitted.Spec.ID] = admitted
		if stamp != nil {
			snap.stamps[admitted.Spec.ID] = stamp
		}
	}
	snap.podIDs = slices.Sorted(maps.Keys(st.pods))
	snap.ctrIDs = slices.Sorted(maps.Keys(st.ctrs))
	return snap
}

// admitContainer adds one container with an id to st, repaired, and
// returns it with its stamp, nil when it has none that parses and agrees
// with its cpuset.
func admitContainer(st *state, cs ContainerState, released bool, log *conflicts) (ContainerState, *Stamp) {
	spec := cs.Spec
	if _, ok := st.pods[spec.PodID]; !ok {
		log.add("container %s (%q) refers to unknown pod %s; placed in the node shared pool", spec.ID, spec.Name, spec.PodID)
		st.addPod(podState{spec: PodSpec{ID: spec.PodID}, bubble: cpuset.New(), extraMems: cpuset.New()})
	}
	switch spec.Lifecycle {
	case LifecycleRegular, LifecycleInit, LifecycleSidecar:
	default:
		log.add("container %s lifecycle %q treated as regular", spec.ID, spec.Lifecycle)
		spec.Lifecycle = LifecycleRegular
	}
	stamp, stampErr := cs.parsedStamp()
	if err := stamp.agrees(cs.CPUs); err != nil {
		// A released init container left its slice: its stamp is
		// stale, and says nothing worth a note.
		if !released {
			log.add("container %s: %v; stamp ignored", spec.ID, err)
		}
		stamp = nil
	}
	spec = restoreLimit(spec, stamp, cs.CPUQuota)
	if err := spec.Resources.Validate(); err != nil {
		log.add("container %s resources ignored: %v", spec.ID, err)
		spec.Resources = budget.NewContainer(budget.Budget{})
	}
	cs.Spec = spec
	st.addCtr(ctrState{spec: spec, pool: PoolNodeShared, released: released})
	if stampErr != nil {
		log.add("container %s: %v; ignored", spec.ID, stampErr)
	}
	return cs, stamp
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

// allocateBubbles gives the pods in freshPods a new bubble and claims it,
// or degrades them to the node shared pool. It returns freshCtrs and the
// exclusive-eligible containers of the pods that got a bubble: the
// containers that need a fresh slice, sorted (step 6).
func (p *Policy) allocateBubbles(st *state, cl *claims, freshPods, freshCtrs []string, log *conflicts) []string {
	for _, id := range freshPods {
		ps := st.pods[id]
		b, extra, share, err := p.placeBubble(st, p.usable.Difference(cl.node), ps.spec.Budget.BubbleCPUs(), podMemory(ps.spec.Budget), "pod "+id+" bubble")
		if err != nil {
			ps.degraded = err.Error()
			st.pods[id] = ps
			log.add("pod %s gets no bubble, its containers run in the node shared pool: %v", id, err)
			continue
		}
		ps.bubble, ps.extraMems, ps.memShare = b, extra, share
		st.pods[id] = ps
		cl.node = cl.node.Union(b)
		for _, cid := range st.podContainers(id) {
			if c := st.ctrs[cid]; p.exclusiveCPUs(ps, c.spec) > 0 && !c.released && !slices.Contains(freshCtrs, cid) {
				freshCtrs = append(freshCtrs, cid)
			}
		}
	}
	slices.Sort(freshCtrs)
	return freshCtrs
}

// carveSlices gives the containers in fresh a new slice and claims it; one
// that does not fit stays shared (step 7).
func (p *Policy) carveSlices(st *state, snap snapshot, cl *claims, fresh []string, log *conflicts) {
	for _, id := range fresh {
		c := st.ctrs[id]
		n := p.exclusiveCPUs(st.pods[c.spec.PodID], c.spec)
		inBubble := !st.pods[c.spec.PodID].bubble.IsEmpty()
		if !inBubble && p.scope != config.ScopeContainer {
			continue // degraded pod
		}
		domain, taken := p.sliceRoom(st, cl, c)
		free := domain.Difference(taken)
		var (
			slice cpuset.CPUSet
			err   error
		)
		switch {
		case inBubble && free.Size() == n && podSharedNeeded(st, snap.stamps, c.spec.PodID):
			err = ErrNoSharedCPUs
		case inBubble:
			slice, err = p.takeFrom(free, n, fmt.Sprintf("container %s slice in pod %s bubble", id, c.spec.PodID))
		default:
			mem := podMemory(c.spec.Resources.Budget)
			var used map[int]int64
			if mem > 0 && p.mem.known {
				used = memUsed(st)
			}
			slice, c.extraMems, c.memShare, err = p.place(used, free, n, mem, "container "+id+" exclusive cpus")
		}
		if err != nil {
			log.add("container %s gets no exclusive cpus and runs in its shared pool: %v", id, err)
			continue
		}
		keepSlice(st, cl, c, slice)
	}
}

// placeShared puts every container of st without a slice in its shared
// pool and returns the pools of the new state (step 8). The pools depend
// only on the bubbles and slices, which are final now.
func (p *Policy) placeShared(st *state, snap snapshot, log *conflicts) *view {
	v := newView(p.usable, st)
	for _, id := range snap.ctrIDs {
		c := st.ctrs[id]
		if c.pool == PoolExclusive || c.released {
			continue
		}
		c.pool = PoolNodeShared
		// A regular container finding its pod shared pool empty goes to
		// the node shared pool, as in placeNew.
		pool, ok := v.pod[c.spec.PodID]
		if ok && !overflowed(st, snap.stamps, c) && (!pool.IsEmpty() || c.spec.Lifecycle != LifecycleRegular) {
			c.pool = PoolPodShared
		}
		st.addCtr(c)
	}
	for _, pid := range snap.podIDs {
		if pool, ok := v.pod[pid]; ok && pool.IsEmpty() && st.podSharedUsed(pid) {
			log.add("pod %s: %v (after rebuild)", pid, ErrNoSharedCPUs)
		}
	}
	if p.nodeCPUs(v).IsEmpty() {
		for _, id := range snap.ctrIDs {
			if st.ctrs[id].pool == PoolNodeShared {
				log.add("the node shared pool is empty but container %s needs it", id)
				break
			}
		}
	}
	return v
}

// diff returns an update for every container whose current cpuset differs
// from its assignment in st under v (step 9).
func (p *Policy) diff(st *state, v *view, snap snapshot, log *conflicts) []Assignment {
	var updates []Assignment
	for _, id := range snap.ctrIDs {
		c := st.ctrs[id]
		a := p.assign(st, v, c)
		cur := snap.current[id]
		if lim := c.spec.Resources.CPULimit; c.pool != PoolExclusive && cur.CPUQuota == -1 && lim > 0 {
			a.RestoreQuota = budget.QuotaFromMilliCPU(lim, budget.DefaultPeriod)
			log.add("container %s runs without a cpu quota but is no longer exclusive; its quota for %s restored", id, budget.FormatMilliCPU(lim))
		}
		if !cur.CPUs.Equals(a.CPUs) || !cur.Mems.Equals(a.Mems) || a.RestoreQuota > 0 {
			updates = append(updates, a)
		}
	}
	return updates
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
func podSharedNeeded(st *state, stamps map[string]*Stamp, podID string) bool {
	for id := range st.byPod[podID] {
		c := st.ctrs[id]
		if c.spec.Resources.ExclusiveCPUs() == 0 && !overflowed(st, stamps, c) && !c.released {
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
func overflowed(st *state, stamps map[string]*Stamp, c ctrState) bool {
	s := stamps[c.spec.ID]
	bubble := st.pods[c.spec.PodID].bubble
	return c.spec.Lifecycle == LifecycleRegular && s != nil && s.Pool == PoolNodeShared &&
		!bubble.IsEmpty() && s.Bubble.Equals(bubble)
}
