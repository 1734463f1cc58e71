package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

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
//
// Steps 1 and 9 are in this file; what a stamp must agree with to be
// trusted is in stamp.go, steps 2 to 4 (the CPUs kept) in keptcpus.go,
// step 5 in keptmemory.go, steps 6 and 7 (the fresh bubbles and slices) in
// carve.go and step 8 (the shared pools) in pools.go.
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
