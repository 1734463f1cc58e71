package policy

import (
	"cmp"
	"fmt"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
)

// AddContainer places a container, as one atomic step: it returns the
// container's assignment and the updates for the other containers whose
// pool shrank, or an error and changes nothing.
//
// It plans first (planAdd: what would change, with no change made), then
// applies the plan (applyAdd), which can not fail.
func (p *Policy) AddContainer(spec ContainerSpec) (Assignment, []Assignment, error) {
	if err := validContainer(spec); err != nil {
		return Assignment{}, nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	plan, err := p.planAdd(spec)
	if err != nil {
		return Assignment{}, nil, err
	}
	a, updates := p.applyAdd(plan)
	return a, updates, nil
}

// validContainer checks what a container spec says on its own.
func validContainer(spec ContainerSpec) error {
	if spec.ID == "" || spec.PodID == "" {
		return fmt.Errorf("%w: container %q without id or pod id", ErrInvalid, spec.Name)
	}
	switch spec.Lifecycle {
	case LifecycleRegular, LifecycleInit, LifecycleSidecar:
	default:
		return fmt.Errorf("%w: container %q lifecycle %q", ErrInvalid, spec.Name, spec.Lifecycle)
	}
	if err := spec.Resources.Validate(); err != nil {
		return fmt.Errorf("%w: container %q: %w", ErrInvalid, spec.Name, err)
	}
	return nil
}

// addPlan is what adding a container changes: planAdd computes it without
// touching the state, applyAdd applies it.
type addPlan struct {
	// ctr is the new container's state: its pool and slice.
	ctr ctrState
	// pod is the container's pod, as it is now.
	pod podState
	// demote says the pod gives its bubble back: the container's
	// oom_score_adj says the pod is not Guaranteed.
	demote bool
	// inBubble says the container goes into its pod's bubble.
	inBubble bool
	// released are the pod's plain init containers that the new regular
	// container releases.
	released []string
	// freePod and freeNode are the pod's and the node's shared pools after
	// the add; podChanged and nodeChanged say which of them changed.
	freePod, freeNode       cpuset.CPUSet
	podChanged, nodeChanged bool
}

// planAdd computes what adding spec would change, or the error that
// refuses it. It reads the state and changes nothing. Call with p.mu held.
func (p *Policy) planAdd(spec ContainerSpec) (addPlan, error) {
	if _, ok := p.st.ctrs[spec.ID]; ok {
		return addPlan{}, fmt.Errorf("%w: container %s (%q)", ErrExists, spec.ID, spec.Name)
	}
	pod, ok := p.st.pods[spec.PodID]
	if !ok {
		return addPlan{}, fmt.Errorf("%w: %s, for container %q", ErrUnknownPod, spec.PodID, spec.Name)
	}
	plan := addPlan{
		ctr: ctrState{spec: spec, pool: PoolNodeShared}, pod: pod,
		inBubble: !pod.bubble.IsEmpty(), freePod: p.v.pod[spec.PodID], freeNode: p.v.node,
	}
	// The kubelet gives a pod that is not Guaranteed no bubble. Its
	// oom_score_adj says so where the pod-level resources could not (NRI
	// carries no memory request): the pod's first container returns the
	// bubble; a later one is refused.
	plan.demote = plan.inBubble && spec.notGuaranteed()
	if plan.demote && len(p.st.byPod[spec.PodID]) > 0 {
		return addPlan{}, fmt.Errorf("%w: container %q in pod %s: oom_score_adj says the pod is %s, but its pod-level resources %s read as Guaranteed "+
			"and its bubble %s already holds containers (NRI does not carry the pod's memory request: state it with the resources.cgdelegate.io/pod annotation)",
			ErrQoS, spec.Name, spec.PodID, spec.PodQoS, pod.spec.Budget, pod.bubble)
	}
	if plan.demote {
		plan.inBubble, plan.freeNode = false, plan.freeNode.Union(pod.bubble)
	}
	sib := p.siblings(spec, plan.inBubble)
	plan.released = sib.released
	n := p.exclusiveCPUs(pod, spec)
	if err := p.checkBudget(&plan, sib, n); err != nil {
		return addPlan{}, err
	}
	// App containers start once every init container has completed, so
	// their CPUs are free again.
	if !sib.relPod.IsEmpty() {
		plan.freePod = plan.freePod.Union(sib.relPod)
	}
	if !sib.relNode.IsEmpty() {
		plan.freeNode = plan.freeNode.Union(sib.relNode)
	}
	if err := p.placeNew(&plan, n, sib.sharedUsed); err != nil {
		return addPlan{}, err
	}
	plan.podChanged = plan.inBubble && (!sib.relPod.IsEmpty() || plan.ctr.pool == PoolExclusive)
	plan.nodeChanged = plan.demote || !plan.inBubble && (!sib.relNode.IsEmpty() || plan.ctr.pool == PoolExclusive)
	return plan, nil
}

// siblings is what the containers already in a pod mean for a new one.
type siblings struct {
	// released are the plain init containers a regular container
	// releases, and relPod and relNode the exclusive CPUs they give back
	// to the pod's and to the node's shared pool.
	released        []string
	relPod, relNode cpuset.CPUSet
	// sharedUsed and exclusiveUsed say whether a container that stays is
	// in the pod shared pool, or exclusive.
	sharedUsed, exclusiveUsed bool
	// named is the new container and those that stay, for the budget
	// check.
	named []budget.NamedContainer
}

// siblings looks at the containers of spec's pod.
func (p *Policy) siblings(spec ContainerSpec, inBubble bool) siblings {
	sib := siblings{
		relPod: cpuset.New(), relNode: cpuset.New(),
		named: []budget.NamedContainer{{Name: spec.Name, Container: spec.Resources}},
	}
	for id := range p.st.byPod[spec.PodID] {
		c := p.st.ctrs[id]
		if c.released {
			continue
		}
		if spec.Lifecycle == LifecycleRegular && c.spec.Lifecycle == LifecycleInit {
			sib.released = append(sib.released, id)
			if c.pool == PoolExclusive && inBubble {
				sib.relPod = sib.relPod.Union(c.slice)
			} else if c.pool == PoolExclusive {
				sib.relNode = sib.relNode.Union(c.slice)
			}
			continue
		}
		sib.sharedUsed = sib.sharedUsed || c.pool == PoolPodShared
		sib.exclusiveUsed = sib.exclusiveUsed || c.pool == PoolExclusive
		sib.named = append(sib.named, budget.NamedContainer{Name: c.spec.Name, Container: c.spec.Resources})
	}
	return sib
}

// checkBudget checks that the pod's containers fit in its budget. The
// budget bounds only a pod cgdelegate places (a bubble, or exclusive
// slices in container scope): elsewhere the kubelet and the API server
// keep a pod's containers within its budget, and an in-place resize, which
// cgdelegate allows only there, can leave the recorded budget below the
// sum of the new requests. n is the new container's exclusive CPUs.
func (p *Policy) checkBudget(plan *addPlan, sib siblings, n int) error {
	if !plan.inBubble && !sib.exclusiveUsed && (p.scope != config.ScopeContainer || n == 0) {
		return nil
	}
	b := plan.pod.spec.Budget
	if err := budget.CheckPod(b, sib.named); err != nil {
		// Again in name order, for a stable message.
		named := slices.Clone(sib.named)
		slices.SortFunc(named, func(a, b budget.NamedContainer) int { return cmp.Compare(a.Name, b.Name) })
		err = budget.CheckPod(b, named)
		spec := plan.ctr.spec
		return fmt.Errorf("container %q in pod %s: %w", spec.Name, spec.PodID, err)
	}
	return nil
}

// placeNew chooses the new container's pool, and its slice when it gets
// n > 0 exclusive CPUs, out of plan's free pools. sharedUsed says a
// container that stays in the pod is in the pod shared pool.
func (p *Policy) placeNew(plan *addPlan, n int, sharedUsed bool) error {
	spec := plan.ctr.spec
	switch {
	case plan.inBubble && n == 0 && !plan.freePod.IsEmpty():
		plan.ctr.pool = PoolPodShared
	case plan.inBubble && n == 0 && spec.Lifecycle != LifecycleRegular:
		// The kubelet refuses a pod whose init containers or sidecars
		// without CPUs find its shared pool empty.
		return ErrNoSharedCPUs
	case plan.inBubble && n == 0:
		// The bubble is all exclusive: the kubelet would have refused a
		// regular container like this one, so it is an ephemeral one
		// (kubectl debug), which the kubelet runs in the node shared pool.
		return p.checkNodeShared(spec, plan.freeNode)
	case plan.inBubble:
		what := fmt.Sprintf("container %q exclusive slice in pod %s bubble %s", spec.Name, spec.PodID, plan.pod.bubble)
		slice, err := p.takeFrom(plan.freePod, n, what)
		if err != nil {
			return err
		}
		if plan.freePod.Equals(slice) && sharedUsed {
			return ErrNoSharedCPUs
		}
		plan.ctr.pool, plan.ctr.slice = PoolExclusive, slice
		plan.freePod = plan.freePod.Difference(slice)
	case p.scope == config.ScopeContainer && n > 0:
		return p.placeNodeSlice(plan, n)
	default:
		return p.checkNodeShared(spec, plan.freeNode)
	}
	return nil
}

// checkNodeShared refuses a container for the node shared pool when that
// pool (freeNode: its usable CPUs, and the shared reserved ones) is empty.
func (p *Policy) checkNodeShared(spec ContainerSpec, freeNode cpuset.CPUSet) error {
	if freeNode.IsEmpty() && p.sharedReserved.IsEmpty() {
		return fmt.Errorf("%w: container %q: the node shared pool is empty", ErrInsufficient, spec.Name)
	}
	return nil
}

// placeNodeSlice carves the new container's n exclusive CPUs out of the
// node pool (container scope). As a bubble, the slice's NUMA nodes must
// hold the container's memory; the init containers released give theirs
// back.
func (p *Policy) placeNodeSlice(plan *addPlan, n int) error {
	spec := plan.ctr.spec
	mem := podMemory(spec.Resources.Budget)
	var used map[int]int64
	if mem > 0 && p.mem.known {
		used = memUsed(p.st)
		for _, id := range plan.released {
			for node, b := range p.st.ctrs[id].memShare {
				used[node] -= b
			}
		}
	}
	what := fmt.Sprintf("container %q in pod %s exclusive cpus", spec.Name, spec.PodID)
	slice, extra, share, err := p.place(used, plan.freeNode, n, mem, what)
	if err != nil {
		return err
	}
	plan.ctr.pool, plan.ctr.slice, plan.ctr.extraMems, plan.ctr.memShare = PoolExclusive, slice, extra, share
	plan.freeNode = plan.freeNode.Difference(slice)
	return nil
}

// applyAdd makes the changes plan describes and returns the new
// container's assignment and the updates for the containers whose pool
// changed. It can not fail. Call with p.mu held, right after planAdd.
func (p *Policy) applyAdd(plan addPlan) (Assignment, []Assignment) {
	spec := plan.ctr.spec
	moved := p.release(plan.released)
	if plan.demote {
		pod := plan.pod
		pod.bubble, pod.extraMems, pod.memShare = cpuset.New(), cpuset.New(), nil
		pod.degraded = demoted(spec)
		p.st.pods[spec.PodID] = pod
		delete(p.v.pod, spec.PodID)
	}
	p.st.addCtr(plan.ctr)
	if plan.podChanged {
		p.v.pod[spec.PodID] = plan.freePod
	}
	if plan.nodeChanged {
		p.v.node = plan.freeNode
	}
	updates := p.updates(spec.PodID, plan.podChanged, plan.nodeChanged, spec.ID)
	return p.assign(p.st, p.v, plan.ctr), p.withMoved(updates, moved)
}

// release moves the released init containers ids to the node shared pool
// and returns those whose pool changed, each with the quota to restore
// when it was exclusive (0 otherwise). Call with p.mu held, from applyAdd.
//
// The kubelet reuses an init container's CPUs because it has exited. NRI
// does not say which containers are init containers (the lifecycle
// annotation does, and the pod author writes it) nor whether one has
// exited before its StopContainer arrives. Forgetting the container would
// leave one that still runs on CPUs that go to the next exclusive slice;
// keeping its CPUs until it stops would refuse the app containers that
// the kubelet admits on them. So its CPUs are reused at once and the
// container, if it still runs, is moved off them in the same step: the new
// cpusets are written to its cgroup before the event returns, as every
// update of the event is (an exited one has usually lost its cgroup, and
// the write is skipped). The node shared pool is the one pool that never holds an
// exclusive CPU and never runs empty.
func (p *Policy) release(ids []string) map[string]int64 {
	moved := map[string]int64{}
	for _, id := range ids {
		c := p.st.ctrs[id]
		was := c.pool
		c.pool, c.slice, c.extraMems, c.memShare, c.released = PoolNodeShared, cpuset.New(), cpuset.New(), nil, true
		p.st.addCtr(c)
		switch lim := c.spec.Resources.CPULimit; {
		case was == PoolExclusive && lim > 0:
			moved[id] = budget.QuotaFromMilliCPU(lim, budget.DefaultPeriod)
		case was != PoolNodeShared:
			moved[id] = 0
		}
	}
	return moved
}

// withMoved adds to updates (sorted by id) the released init containers
// that moved, with their quota restored, and keeps them sorted.
func (p *Policy) withMoved(updates []Assignment, moved map[string]int64) []Assignment {
	if len(moved) == 0 {
		return updates
	}
	for i, a := range updates {
		if q, ok := moved[a.ContainerID]; ok {
			updates[i].RestoreQuota = q
			delete(moved, a.ContainerID)
		}
	}
	for id, q := range moved {
		a := p.assign(p.st, p.v, p.st.ctrs[id])
		a.RestoreQuota = q
		updates = append(updates, a)
	}
	slices.SortFunc(updates, func(a, b Assignment) int { return cmp.Compare(a.ContainerID, b.ContainerID) })
	return updates
}
