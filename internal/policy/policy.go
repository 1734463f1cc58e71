package policy

import (
	"fmt"
	"sync"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpualloc"
	"github.com/cgdelegate/cgdelegate/internal/podres"
	"github.com/cgdelegate/cgdelegate/internal/topology"
)

// Options configures a Policy.
type Options struct {
	// Scope is config.ScopePod (the default when empty) or
	// config.ScopeContainer.
	Scope config.TopologyScope
	// Reserved CPUs are never assigned.
	Reserved cpuset.CPUSet
	// Take picks CPUs by topology; nil means a cpualloc.Allocator built
	// for the topology (cpualloc.Take without the per-call indexing).
	Take TakeFunc
}

// Policy is the allocation state. All methods are safe for concurrent use
// and atomic: on error, nothing changes.
type Policy struct {
	topo     *topology.Topology
	scope    config.TopologyScope
	reserved cpuset.CPUSet
	usable   cpuset.CPUSet
	take     TakeFunc

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
	if o.Take == nil {
		a, err := cpualloc.New(t)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		o.Take = func(_ *topology.Topology, available cpuset.CPUSet, n int) (cpuset.CPUSet, error) {
			return a.Take(available, n)
		}
	}
	reserved := o.Reserved.Clone()
	usable := t.AllCPUs().Difference(t.Isolated).Difference(reserved)
	p := &Policy{topo: t, scope: o.Scope, reserved: reserved, usable: usable, take: o.Take, st: newState()}
	p.v = newView(p.usable, p.st)
	return p, nil
}

// Scope returns the topology scope in force.
func (p *Policy) Scope() config.TopologyScope { return p.scope }

// commit installs next and returns the updates for every container, other
// than skip, whose CPUs changed. Call with p.mu held.
func (p *Policy) commit(next *state, nextView *view, skip string) []Assignment {
	updates := changes(p.topo, next, p.v, nextView, skip)
	p.st, p.v = next, nextView
	return updates
}

// takeFrom picks n CPUs from free and checks what the allocator returned.
func (p *Policy) takeFrom(free cpuset.CPUSet, n int, what string) (cpuset.CPUSet, error) {
	if free.Size() < n {
		return cpuset.CPUSet{}, fmt.Errorf("%w: %s needs %d cpus, %d free (%s)", ErrInsufficient, what, n, free.Size(), free)
	}
	got, err := p.take(p.topo, free, n)
	if err != nil {
		return cpuset.CPUSet{}, fmt.Errorf("%w: %s needs %d cpus from %s: %w", ErrInsufficient, what, n, free, err)
	}
	if got.Size() != n || !got.IsSubsetOf(free) {
		return cpuset.CPUSet{}, fmt.Errorf("%w: allocator returned %s for %d cpus out of %s", ErrInvalid, got, n, free)
	}
	return got, nil
}

// takeFromNode picks n CPUs from the node shared pool, leaving at least one.
func (p *Policy) takeFromNode(free cpuset.CPUSet, n int, what string) (cpuset.CPUSet, error) {
	if free.Size()-n < 1 {
		return cpuset.CPUSet{}, fmt.Errorf("%w: %s needs %d cpus, the node pool has %d free (%s) and keeps at least one for shared containers",
			ErrInsufficient, what, n, free.Size(), free)
	}
	return p.takeFrom(free, n, what)
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
	ps := podState{spec: spec, bubble: cpuset.New()}
	if p.scope == config.ScopePod && spec.Budget.HasCPU() {
		n := spec.Budget.WholeCPUs()
		b, err := p.takeFromNode(p.v.node, n, fmt.Sprintf("pod %s bubble (cpu budget %s)", spec.ID, podres.FormatMilliCPU(spec.Budget.CPUBudget())))
		if err != nil {
			return nil, err
		}
		ps.bubble = b
	}
	next := p.st.clone()
	next.pods[spec.ID] = ps
	return p.commit(next, newView(p.usable, next), ""), nil
}

// RemovePod forgets a pod and any containers it still has. Its bubble and
// slices return to the node shared pool; the returned updates widen every
// container there. An unknown pod is not an error.
func (p *Policy) RemovePod(id string) ([]Assignment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.st.pods[id]; !ok {
		return nil, nil
	}
	next := p.st.clone()
	delete(next.pods, id)
	for _, cid := range next.podContainers(id) {
		delete(next.ctrs, cid)
	}
	return p.commit(next, newView(p.usable, next), ""), nil
}

// AddContainer places a container, as one atomic step: it returns the
// container's assignment and the updates for the other containers whose
// pool shrank, or an error and changes nothing.
func (p *Policy) AddContainer(spec ContainerSpec) (Assignment, []Assignment, error) {
	if spec.ID == "" || spec.PodID == "" {
		return Assignment{}, nil, fmt.Errorf("%w: container %q without id or pod id", ErrInvalid, spec.Name)
	}
	switch spec.Lifecycle {
	case LifecycleRegular, LifecycleInit, LifecycleSidecar:
	default:
		return Assignment{}, nil, fmt.Errorf("%w: container %q lifecycle %q", ErrInvalid, spec.Name, spec.Lifecycle)
	}
	if err := spec.Resources.Validate(); err != nil {
		return Assignment{}, nil, fmt.Errorf("%w: container %q: %w", ErrInvalid, spec.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.st.ctrs[spec.ID]; ok {
		return Assignment{}, nil, fmt.Errorf("%w: container %s (%q)", ErrExists, spec.ID, spec.Name)
	}
	pod, ok := p.st.pods[spec.PodID]
	if !ok {
		return Assignment{}, nil, fmt.Errorf("%w: %s, for container %q", ErrUnknownPod, spec.PodID, spec.Name)
	}

	next := p.st.clone()
	if spec.Lifecycle == LifecycleRegular {
		// App containers start once every init container has completed;
		// their CPUs are free again.
		for _, id := range next.podContainers(spec.PodID) {
			if next.ctrs[id].spec.Lifecycle == LifecycleInit {
				delete(next.ctrs, id)
			}
		}
	}
	if !pod.spec.Budget.IsZero() {
		named := []podres.NamedContainer{{Name: spec.Name, Container: spec.Resources}}
		for _, id := range next.podContainers(spec.PodID) {
			c := next.ctrs[id].spec
			named = append(named, podres.NamedContainer{Name: c.Name, Container: c.Resources})
		}
		if err := podres.CheckPod(pod.spec.Budget, named); err != nil {
			return Assignment{}, nil, fmt.Errorf("container %q in pod %s: %w", spec.Name, spec.PodID, err)
		}
	}

	v := newView(p.usable, next)
	cs := ctrState{spec: spec, pool: PoolNodeShared}
	n := spec.Resources.ExclusiveCPUs()
	switch {
	case !pod.bubble.IsEmpty():
		free := v.pod[spec.PodID]
		if n == 0 {
			if free.IsEmpty() {
				return Assignment{}, nil, ErrNoSharedCPUs
			}
			cs.pool = PoolPodShared
			break
		}
		what := fmt.Sprintf("container %q exclusive slice in pod %s bubble %s", spec.Name, spec.PodID, pod.bubble)
		slice, err := p.takeFrom(free, n, what)
		if err != nil {
			return Assignment{}, nil, err
		}
		if free.Equals(slice) && next.hasPodShared(spec.PodID) {
			return Assignment{}, nil, ErrNoSharedCPUs
		}
		cs.pool, cs.slice = PoolExclusive, slice
	case p.scope == config.ScopeContainer && n > 0:
		slice, err := p.takeFromNode(v.node, n, fmt.Sprintf("container %q exclusive cpus", spec.Name))
		if err != nil {
			return Assignment{}, nil, err
		}
		cs.pool, cs.slice = PoolExclusive, slice
	default:
		if v.node.IsEmpty() {
			return Assignment{}, nil, fmt.Errorf("%w: container %q: the node shared pool is empty", ErrInsufficient, spec.Name)
		}
	}
	next.ctrs[spec.ID] = cs
	nv := v
	if cs.pool == PoolExclusive {
		nv = newView(p.usable, next)
	}
	updates := p.commit(next, nv, spec.ID)
	return assign(p.topo, next, nv, cs), updates, nil
}

// RemoveContainer forgets a stopped or removed container. Its slice
// returns to its pool; the returned updates widen the containers there. An
// unknown container is not an error, so Stop and Remove may both call it.
func (p *Policy) RemoveContainer(id string) ([]Assignment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.st.ctrs[id]; !ok {
		return nil, nil
	}
	next := p.st.clone()
	delete(next.ctrs, id)
	return p.commit(next, newView(p.usable, next), id), nil
}

// Assignment returns the current assignment of a container.
func (p *Policy) Assignment(id string) (Assignment, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.st.ctrs[id]
	if !ok {
		return Assignment{}, false
	}
	return assign(p.topo, p.st, p.v, c), true
}

// Assignments returns every container's current assignment, sorted by id.
func (p *Policy) Assignments() []Assignment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return allAssignments(p.topo, p.st, p.v)
}
