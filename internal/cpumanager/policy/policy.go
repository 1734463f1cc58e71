package policy

import (
	"fmt"
	"slices"
	"sync"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

// Options configures a Policy.
type Options struct {
	// Scope is config.ScopePod (the default when empty) or
	// config.ScopeContainer.
	Scope config.TopologyScope
	// Reserved CPUs never go to a bubble or an exclusive slice. They are
	// in the node shared pool unless StrictReservation is set.
	Reserved cpuset.CPUSet
	// StrictReservation keeps the reserved CPUs out of the node shared pool
	// too, as the kubelet's strict-cpu-reservation option does. The default
	// (false) is the kubelet's: reserved CPUs are shared.
	StrictReservation bool
	// ReservedMemory is the memory, in bytes per NUMA node, that no
	// bubble and no exclusive container gets (config reservedMemory, the
	// kubelet's reservedMemory). Every node named must exist and hold
	// that much.
	ReservedMemory map[int]int64
}

// takeFunc picks n CPUs out of available by topology.
type takeFunc func(available cpuset.CPUSet, n int) (cpuset.CPUSet, error)

// Policy is the allocation state. All methods are safe for concurrent use
// and atomic: on error, nothing changes.
type Policy struct {
	topo     *topology.Topology
	scope    config.TopologyScope
	reserved cpuset.CPUSet
	strict   bool
	usable   cpuset.CPUSet
	// sharedReserved are the reserved CPUs in the node shared pool: the
	// online, non-isolated ones, none with StrictReservation.
	sharedReserved cpuset.CPUSet
	// memNodes is every NUMA node with memory: the node-shared mems.
	memNodes cpuset.CPUSet
	// take is a allocator's Take; tests replace it.
	take takeFunc
	// mem is the NUMA memory the bubbles hold.
	mem memory

	mu sync.Mutex
	st *state
	v  *view // pools of st
}

// New returns an empty policy for topology t. t must not be modified
// afterwards.
func New(t *topology.Topology, o Options) (*Policy, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil topology", ErrInvalid)
	}
	switch o.Scope {
	case "":
		o.Scope = config.ScopePod
	case config.ScopePod, config.ScopeContainer:
	default:
		return nil, fmt.Errorf("%w: topology scope %q is not pod or container", ErrInvalid, o.Scope)
	}
	a, err := newAllocator(t)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	reserved := o.Reserved.Clone()
	usable := t.AllCPUs().Difference(t.Isolated).Difference(reserved)
	sharedReserved := cpuset.New()
	if !o.StrictReservation {
		sharedReserved = reserved.Intersection(t.AllCPUs().Difference(t.Isolated))
	}
	p := &Policy{
		topo: t, scope: o.Scope, reserved: reserved, strict: o.StrictReservation, usable: usable,
		sharedReserved: sharedReserved, memNodes: t.MemoryNodes(), take: a.take, st: newState(),
	}
	p.v = newView(p.usable, p.st)
	if p.mem, err = p.newMemory(o.ReservedMemory); err != nil {
		return nil, err
	}
	return p, nil
}

// Scope returns the topology scope in force.
func (p *Policy) Scope() config.TopologyScope { return p.scope }

// updates returns the assignments of the shared containers whose pool
// changed, other than skip, sorted by id: the pod's shared containers when
// podChanged, the node-shared containers when nodeChanged. Call with p.mu
// held, after the state and view are updated.
func (p *Policy) updates(podID string, podChanged, nodeChanged bool, skip string) []Assignment {
	var ids []string
	if podChanged {
		for id := range p.st.byPod[podID] {
			if id != skip && p.st.ctrs[id].pool == PoolPodShared {
				ids = append(ids, id)
			}
		}
	}
	if nodeChanged {
		for id := range p.st.nodeShared {
			if id != skip {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	var podCPUs, podMems, nodeCPUs cpuset.CPUSet
	if podChanged {
		podCPUs = p.v.pod[podID]
		podMems = p.pinnedMems(p.st.pods[podID], podCPUs)
	}
	if nodeChanged {
		nodeCPUs = p.nodeCPUs(p.v)
	}
	out := make([]Assignment, len(ids))
	for i, id := range ids {
		c := p.st.ctrs[id]
		a := Assignment{
			ContainerID: id, PodID: c.spec.PodID, Cgroup: c.spec.Cgroup, Pool: c.pool, CPUs: nodeCPUs, Mems: p.memNodes,
			Bubble: p.st.pods[c.spec.PodID].bubble,
		}
		if c.pool == PoolPodShared {
			a.CPUs, a.Mems = podCPUs, podMems
		}
		out[i] = a
	}
	return out
}

// takeFrom picks n CPUs from free and checks what the allocator returned.
func (p *Policy) takeFrom(free cpuset.CPUSet, n int, what string) (cpuset.CPUSet, error) {
	if free.Size() < n {
		return cpuset.CPUSet{}, fmt.Errorf("%w: %s needs %d cpus, %d free (%s)", ErrInsufficient, what, n, free.Size(), free)
	}
	got, err := p.take(free, n)
	if err != nil {
		return cpuset.CPUSet{}, fmt.Errorf("%w: %s needs %d cpus from %s: %w", ErrInsufficient, what, n, free, err)
	}
	if got.Size() != n || !got.IsSubsetOf(free) {
		return cpuset.CPUSet{}, fmt.Errorf("%w: allocator returned %s for %d cpus out of %s", ErrInvalid, got, n, free)
	}
	return got, nil
}

// takeFromNode picks n CPUs from the node shared pool (free: its usable
// CPUs). When reserved CPUs stay in that pool they are enough for the
// shared containers, and every usable CPU may go, as the kubelet's static
// policy allocates every CPU but the reserved ones (v1.37
// policy_static.go, GetAvailableCPUs); without them (no reservation, or
// StrictReservation) at least one usable CPU stays.
func (p *Policy) takeFromNode(free cpuset.CPUSet, n int, what string) (cpuset.CPUSet, error) {
	if p.sharedReserved.IsEmpty() && free.Size()-n < 1 {
		return cpuset.CPUSet{}, fmt.Errorf("%w: %s needs %d cpus, the node pool has %d free (%s) and keeps at least one for shared containers",
			ErrInsufficient, what, n, free.Size(), free)
	}
	return p.takeFrom(free, n, what)
}

// exclusiveCPUs is the number of exclusive CPUs c gets in pod ps: as the
// kubelet's guaranteedCPUs (v1.37 pkg/kubelet/cm/cpumanager/policy_static.go),
// only in a Guaranteed pod (its pod-level budget, or its oom_score_adj,
// says so) for a Guaranteed container with whole CPUs.
func (p *Policy) exclusiveCPUs(ps podState, c ContainerSpec) int {
	n := c.Resources.ExclusiveCPUs()
	if n == 0 || c.notGuaranteed() || ps.spec.notGuaranteed() ||
		(!ps.spec.Budget.IsZero() && budget.ClassifyQoS(ps.spec.Budget) != budget.QoSGuaranteed) {
		return 0
	}
	return n
}

// demoted says why a pod whose pod-level budget reads as Guaranteed has no
// bubble: container c's oom_score_adj says otherwise.
func demoted(c ContainerSpec) string {
	return fmt.Sprintf("no bubble: oom_score_adj of container %q says the pod is %s", c.Name, c.PodQoS)
}

// wantsBubble says whether a pod gets a bubble: in pod scope, when its
// budget is Guaranteed with whole CPUs (budget.Budget.BubbleCPUs) and its
// cgroup parent does not say it is Burstable or BestEffort.
func (p *Policy) wantsBubble(s PodSpec) bool {
	return p.scope == config.ScopePod && s.Budget.BubbleCPUs() > 0 && !s.notGuaranteed()
}

// Places reports whether the policy places pod id: it has a bubble or an
// exclusive container. Only such a pod has budgets for the policy to
// check.
func (p *Policy) Places(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.places(id)
}

func (p *Policy) places(id string) bool {
	if !p.st.pods[id].bubble.IsEmpty() {
		return true
	}
	return slices.ContainsFunc(p.st.podContainers(id), func(cid string) bool { return p.st.ctrs[cid].pool == PoolExclusive })
}

// AddPod records a pod. In pod scope a pod with a CPU budget gets its
// bubble now, and the node shared pool shrinks: the returned updates are for
// every container there.
func (p *Policy) AddPod(spec PodSpec) ([]Assignment, error) {
	if spec.ID == "" {
		return nil, fmt.Errorf("%w: pod without id", ErrInvalid)
	}
	if err := spec.Budget.Validate(); err != nil {
		return nil, fmt.Errorf("%w: pod %s: %w", ErrInvalid, spec.ID, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.st.pods[spec.ID]; ok {
		return nil, fmt.Errorf("%w: pod %s", ErrExists, spec.ID)
	}
	ps := podState{spec: spec, bubble: cpuset.New(), extraMems: cpuset.New()}
	if p.wantsBubble(spec) {
		n := spec.Budget.BubbleCPUs()
		what := fmt.Sprintf("pod %s bubble (cpu budget %s)", spec.ID, budget.FormatMilliCPU(spec.Budget.CPUBudget()))
		b, extra, share, err := p.placeBubble(p.st, p.v.node, n, podMemory(spec.Budget), what)
		if err != nil {
			return nil, err
		}
		ps.bubble, ps.extraMems, ps.memShare = b, extra, share
	}
	p.st.addPod(ps)
	if ps.bubble.IsEmpty() {
		return nil, nil
	}
	p.v.node = p.v.node.Difference(ps.bubble)
	p.v.pod[spec.ID] = ps.bubble
	return p.updates("", false, true, ""), nil
}

// RemovePod forgets a pod and any containers it still has. Its bubble and
// slices return to the node shared pool; the returned updates widen every
// container there. An unknown pod is a no-op.
func (p *Policy) RemovePod(id string) []Assignment {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps, ok := p.st.pods[id]
	if !ok {
		return nil
	}
	released := ps.bubble
	for _, cid := range p.st.podContainers(id) {
		if c := p.st.ctrs[cid]; c.pool == PoolExclusive && ps.bubble.IsEmpty() {
			released = released.Union(c.slice)
		}
		p.st.delCtr(cid)
	}
	delete(p.st.pods, id)
	delete(p.st.byPod, id)
	delete(p.v.pod, id)
	if released.IsEmpty() {
		return nil
	}
	p.v.node = p.v.node.Union(released)
	return p.updates("", false, true, "")
}

// RemoveContainer forgets a stopped or removed container. Its slice
// returns to its pool; the returned updates widen the containers there. An
// unknown container is a no-op, so Stop and Remove may both call it.
func (p *Policy) RemoveContainer(id string) []Assignment {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.st.ctrs[id]
	if !ok {
		return nil
	}
	p.st.delCtr(id)
	if c.pool != PoolExclusive {
		return nil
	}
	if pid := c.spec.PodID; !p.st.pods[pid].bubble.IsEmpty() {
		p.v.pod[pid] = p.v.pod[pid].Union(c.slice)
		return p.updates(pid, true, false, "")
	}
	p.v.node = p.v.node.Union(c.slice)
	return p.updates("", false, true, "")
}

// Assignment returns the current assignment of a container.
func (p *Policy) Assignment(id string) (Assignment, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.st.ctrs[id]
	if !ok {
		return Assignment{}, false
	}
	return p.assign(p.st, p.v, c), true
}

// Assignments returns every container's current assignment, sorted by id.
func (p *Policy) Assignments() []Assignment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.allAssignments(p.st, p.v)
}

// Resize takes the new resources of a running container (an in-place
// resize, NRI UpdateContainer) and returns its assignment, which the
// resize must keep (an exclusive container keeps quota -1). cgdelegate
// refuses, with ErrResize, what would change its own placement and what
// the kubelet refuses in a Guaranteed pod under its static CPU manager
// (v1.37 pkg/kubelet/allocation/handlers.go: a change of a container's
// CPU request; every placed pod is Guaranteed):
//
//  1. an exclusive container changes its CPU or memory;
//  2. a shared container in a pod with a bubble (pod-shared, or
//     node-shared when the bubble was all exclusive) changes its CPU
//     request, the one NRI reads from its cpu shares; a change of its CPU
//     or memory limit alone is recorded and keeps its CPUs (NRI carries no
//     memory request, whose change the kubelet's Static memory manager
//     refuses);
//  3. in container scope, a shared container would become exclusive (that
//     needs a new slice).
//
// Anything else is recorded: the container stays in its pool. An unknown
// container is not an error (ok false). On error nothing changes.
func (p *Policy) Resize(id string, res budget.Container) (a Assignment, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, known := p.st.ctrs[id]
	if !known {
		return Assignment{}, false, nil
	}
	pod := p.st.pods[c.spec.PodID]
	old := c.spec.Resources.Budget
	if old.CPURequest == res.CPURequest && old.CPULimit == res.CPULimit && old.MemoryLimit == res.MemoryLimit {
		return p.assign(p.st, p.v, c), true, nil
	}
	change := fmt.Sprintf("%s to %s", old, res.Budget)
	next := c.spec
	next.Resources = res
	switch {
	case c.pool == PoolExclusive || !pod.bubble.IsEmpty() && old.CPURequest != res.CPURequest:
		return Assignment{}, true, fmt.Errorf("%w: container %q in pod %s runs %s (cpus %s): resources %s: "+
			"in-place resize of a pinned container is not supported; %s; recreate the pod",
			ErrResize, c.spec.Name, c.spec.PodID, c.pool, p.assign(p.st, p.v, c).CPUs, change, KubeletResizeReason)
	case p.scope == config.ScopeContainer && p.exclusiveCPUs(pod, next) > 0:
		return Assignment{}, true, fmt.Errorf("%w: container %q in pod %s: resources %s would make it exclusive, which needs a new slice; %s; recreate the pod",
			ErrResize, c.spec.Name, c.spec.PodID, change, KubeletResizeReason)
	}
	c.spec = next
	p.st.addCtr(c)
	return p.assign(p.st, p.v, c), true, nil
}

// ResizePod takes a pod's new pod-level budget (NRI UpdatePodSandbox).
// The runtime sends the pod's CPU request read back from its cgroup's
// cpu.weight, so a budget that is budget.Budget.Equivalent to the one
// recorded is no change. Otherwise, as Resize, it refuses with ErrResize
// only what would change cgdelegate's placement:
//
//  1. a pod with a bubble or an exclusive container;
//  2. a pod the new budget would give a bubble (one whose containers'
//     oom_score_adj says it is not Guaranteed never gets one).
//
// Anything else is recorded: a pod cgdelegate does not place has nothing
// for it to refuse. An unknown pod is not an error. On error nothing
// changes.
func (p *Policy) ResizePod(id string, b budget.Budget) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.st.pods[id]
	if !ok || pod.spec.Budget.Equivalent(b) {
		return nil
	}
	if err := b.Validate(); err != nil {
		if !p.places(id) {
			return nil // nothing to check, and nothing worth recording
		}
		return fmt.Errorf("%w: pod %s: %w", ErrInvalid, id, err)
	}
	// A request within a weight step of the limit is the limit: a
	// Guaranteed pod's read back (see budget.SameCPURequest).
	if b.CPULimit > 0 && b.CPURequest != b.CPULimit && budget.SameCPURequest(b.CPURequest, b.CPULimit) {
		b.CPURequest = b.CPULimit
	}
	change := fmt.Sprintf("pod budget %s to %s", pod.spec.Budget, b)
	_, notGuaranteed := p.st.notGuaranteed(id)
	switch {
	case p.places(id):
		return fmt.Errorf("%w: pod %s (bubble %s): %s: in-place resize of a pinned pod is not supported; %s; recreate the pod",
			ErrResize, id, pod.bubble, change, KubeletResizeReason)
	case p.wantsBubble(PodSpec{Budget: b, QoS: pod.spec.QoS}) && !notGuaranteed:
		return fmt.Errorf("%w: pod %s: %s would give it a bubble; %s; recreate the pod", ErrResize, id, change, KubeletResizeReason)
	}
	pod.spec.Budget = b
	p.st.pods[id] = pod
	return nil
}
