package policy

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
)

// maxGroupNodes bounds the exhaustive search over NUMA node groups for a
// bubble's memory: up to this many nodes every group is tried; beyond,
// only single nodes and the whole machine are.
const maxGroupNodes = 12

// memory is the NUMA memory the bubbles may use: each node's capacity
// (its MemTotal minus reservedMemory) and the node groups to try, smallest
// first.
type memory struct {
	// capacity is each node's MemTotal minus its reserved memory, in
	// bytes; known is false when no node reports MemTotal, and then memory
	// is not checked.
	capacity map[int]int64
	known    bool
	// total is each node's MemTotal; reserved what reservedMemory keeps
	// back on it.
	total, reserved map[int]int64
	// groups are the candidate node groups, by size, then by the sum of
	// the distances between their nodes, then by ids.
	groups [][]int
	// nodeCPUs are each node's CPUs.
	nodeCPUs map[int]cpuset.CPUSet
}

// newMemory builds the memory model of p's topology with reserved bytes
// kept back on each node. A reservation on a node that does not exist, or
// larger than its MemTotal, or on a node without MemTotal, is an error
// (ErrInvalid) naming the field, the node and the numbers.
func (p *Policy) newMemory(reserved map[int]int64) (memory, error) {
	m := memory{
		capacity: map[int]int64{}, total: map[int]int64{}, reserved: map[int]int64{},
		nodeCPUs: map[int]cpuset.CPUSet{},
	}
	ids := p.topo.NUMANodeIDs()
	for _, id := range ids {
		n := p.topo.NUMANodes[id]
		m.total[id] = int64(n.MemoryBytes) //nolint:gosec // MemTotal fits an int64
		m.known = m.known || n.MemoryBytes > 0
		m.nodeCPUs[id] = p.topo.CPUsInNUMANodes(id)
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(reserved)) {
		r := reserved[id]
		_, exists := m.total[id]
		switch {
		case r < 0:
			errs = append(errs, fmt.Errorf("%w: reservedMemory: NUMA node %d: %d bytes is negative", ErrInvalid, id, r))
		case !exists:
			errs = append(errs, fmt.Errorf("%w: reservedMemory: NUMA node %d does not exist on this machine (NUMA nodes %s)",
				ErrInvalid, id, cpuset.New(ids...)))
		case m.total[id] == 0:
			errs = append(errs, fmt.Errorf("%w: reservedMemory: NUMA node %d reports no MemTotal, so %s can not be reserved on it",
				ErrInvalid, id, budget.FormatMemory(r)))
		case r > m.total[id]:
			errs = append(errs, fmt.Errorf("%w: reservedMemory: NUMA node %d: %s is more than the node has (MemTotal %s)",
				ErrInvalid, id, budget.FormatMemory(r), budget.FormatMemory(m.total[id])))
		default:
			m.reserved[id] = r
		}
	}
	if len(errs) > 0 {
		return memory{}, errors.Join(errs...)
	}
	for _, id := range ids {
		m.capacity[id] = m.total[id] - m.reserved[id]
	}
	if len(ids) <= maxGroupNodes {
		for mask := 1; mask < 1<<len(ids); mask++ {
			var g []int
			for i, id := range ids {
				if mask&(1<<i) != 0 {
					g = append(g, id)
				}
			}
			m.groups = append(m.groups, g)
		}
	} else {
		for _, id := range ids {
			m.groups = append(m.groups, []int{id})
		}
		m.groups = append(m.groups, ids)
	}
	spread := func(g []int) int {
		d := 0
		for _, a := range g {
			for _, b := range g {
				d += p.topo.Distance(a, b)
			}
		}
		return d
	}
	slices.SortStableFunc(m.groups, func(a, b []int) int {
		return cmp.Or(cmp.Compare(len(a), len(b)), cmp.Compare(spread(a), spread(b)), slices.Compare(a, b))
	})
	return m, nil
}

// reservedString is the reserved memory in the config's form,
// "0:memory=1Gi;1:memory=512Mi"; "" when none.
func (m *memory) reservedString() string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(m.reserved)) {
		parts = append(parts, fmt.Sprintf("%d:memory=%s", id, budget.FormatMemory(m.reserved[id])))
	}
	return strings.Join(parts, ";")
}

// podMemory is the memory a pod's bubble must hold: its memory limit, or
// its request when it states none.
func podMemory(b budget.Budget) int64 {
	if b.MemoryLimit > 0 {
		return b.MemoryLimit
	}
	return b.MemoryRequest
}

// memUsed sums the memory the bubbles and the node-level slices of s
// reserve on each node.
func memUsed(s *state) map[int]int64 {
	used := map[int]int64{}
	for _, ps := range s.pods {
		for n, b := range ps.memShare {
			used[n] += b
		}
	}
	for id := range s.memHolders {
		for n, b := range s.ctrs[id].memShare {
			used[n] += b
		}
	}
	return used
}

func (m *memory) free(node int, used map[int]int64) int64 {
	return max(m.capacity[node]-used[node], 0)
}

func (m *memory) groupFree(g []int, used map[int]int64) int64 {
	var f int64
	for _, n := range g {
		f += m.free(n, used)
	}
	return f
}

// share splits mem over the nodes of g: the nodes of the bubble's CPUs
// first (the kernel allocates near the CPU first), then the others, each up
// to its free memory. What is left (a rebuild keeps what it finds) goes to
// the first node.
func (m *memory) share(g []int, cpuNodes cpuset.CPUSet, mem int64, used map[int]int64) map[int]int64 {
	order := slices.Clone(g)
	slices.SortStableFunc(order, func(a, b int) int {
		ia, ib := cpuNodes.Contains(a), cpuNodes.Contains(b)
		switch {
		case ia == ib:
			return 0
		case ia:
			return -1
		}
		return 1
	})
	out := map[int]int64{}
	for _, n := range order {
		take := min(m.free(n, used), mem)
		if take > 0 {
			out[n] = take
			mem -= take
		}
	}
	if mem > 0 && len(order) > 0 {
		out[order[0]] += mem
	}
	return out
}

// placeBubble picks n CPUs out of free (the node shared pool, of which one
// CPU stays unless reserved CPUs are shared, see takeFromNode) for a pod whose bubble must hold mem bytes, in s. It returns
// the CPUs, the memory nodes beyond those of the CPUs (extra) and the
// memory reserved on each node.
//
// Like the kubelet's memory manager, the bubble lives on the smallest
// group of NUMA nodes whose free memory holds the pod: the CPUs the
// allocator picks first, when their nodes have room; otherwise the
// smallest, closest group that holds both the memory and n free CPUs.
// When no group does, the error gives the numbers.
func (p *Policy) placeBubble(s *state, free cpuset.CPUSet, n int, mem int64, what string) (cpus, extra cpuset.CPUSet, share map[int]int64, err error) {
	var used map[int]int64
	if mem > 0 && p.mem.known {
		used = memUsed(s)
	}
	return p.place(used, free, n, mem, what)
}

// place is placeBubble with the memory already used on each node: a
// bubble, or (container scope) a node-level slice whose container's
// memory limit its NUMA nodes must hold. used may be nil when mem is 0 or
// memory is unknown.
func (p *Policy) place(used map[int]int64, free cpuset.CPUSet, n int, mem int64, what string) (cpus, extra cpuset.CPUSet, share map[int]int64, err error) {
	cpus, err = p.takeFromNode(free, n, what)
	if err != nil || mem <= 0 || !p.mem.known {
		return cpus, cpuset.New(), nil, err
	}
	cpuNodes := p.topo.MemsOf(cpus)
	if g := cpuNodes.List(); p.mem.groupFree(g, used) >= mem {
		return cpus, cpuset.New(), p.mem.share(g, cpuNodes, mem, used), nil
	}
	for _, g := range p.mem.groups {
		if p.mem.groupFree(g, used) < mem {
			continue
		}
		avail := cpuset.New()
		for _, node := range g {
			avail = avail.Union(free.Intersection(p.mem.nodeCPUs[node]))
		}
		if avail.Size() < n {
			continue
		}
		c, err := p.take(avail, n)
		if err != nil || c.Size() != n || !c.IsSubsetOf(avail) {
			continue
		}
		cpuNodes = p.topo.MemsOf(c)
		return c, cpuset.New(g...).Difference(cpuNodes), p.mem.share(g, cpuNodes, mem, used), nil
	}
	return cpuset.CPUSet{}, cpuset.CPUSet{}, nil, p.memError(what, mem, used)
}

// memError says why mem fits in no group.
func (p *Policy) memError(what string, mem int64, used map[int]int64) error {
	ids := slices.Sorted(maps.Keys(p.mem.capacity))
	nodes := make([]string, len(ids))
	for i, id := range ids {
		nodes[i] = fmt.Sprintf("node %d: %s of %s free", id, budget.FormatMemory(p.mem.free(id, used)), budget.FormatMemory(p.mem.capacity[id]))
		if r := p.mem.reserved[id]; r > 0 {
			nodes[i] += fmt.Sprintf(" (MemTotal %s, reservedMemory %s)", budget.FormatMemory(p.mem.total[id]), budget.FormatMemory(r))
		}
	}
	holders := "the bubbles"
	if p.scope == config.ScopeContainer {
		holders = "the exclusive containers"
	}
	return fmt.Errorf("%w: %s: memory limit %s does not fit, %s free in all NUMA nodes together (%s; free is MemTotal minus reservedMemory minus the memory of %s)",
		ErrInsufficientMemory, what, budget.FormatMemory(mem), budget.FormatMemory(p.mem.groupFree(ids, used)), strings.Join(nodes, ", "), holders)
}

// pinnedMems is the cpuset.mems of a pinned container of pod ps running on
// cpus: the NUMA nodes of cpus, and the nodes the bubble's memory was
// widened to.
func (p *Policy) pinnedMems(ps podState, cpus cpuset.CPUSet) cpuset.CPUSet {
	m := p.topo.MemsOf(cpus)
	if ps.extraMems.IsEmpty() {
		return m
	}
	return m.Union(ps.extraMems)
}

// demand is a bubble's memory: mem bytes on the nodes of group, the nodes
// of its CPUs (first) preferred.
type demand struct {
	group []int
	first cpuset.CPUSet
	mem   int64
}

// spread reserves every demand's memory on the nodes of its group within
// their capacity when that is possible at all (a max flow from demands to
// nodes: a full node passes memory on to another node of a demand that
// already uses it); what fits nowhere is put on the demand's first node.
// Rebuild uses it, as it finds the bubbles in no particular order.
func (m *memory) spread(ds []demand) []map[int]int64 {
	flow := make([]map[int]int64, len(ds))
	used := map[int]int64{}
	for i := range ds {
		flow[i] = map[int]int64{}
	}
	for i, d := range ds {
		order := m.order(d)
		need := d.mem
		for need > 0 {
			amt := m.augment(ds, flow, used, i, order, need)
			if amt == 0 {
				break
			}
			need -= amt
		}
		if need > 0 && len(order) > 0 {
			flow[i][order[0]] += need
			used[order[0]] += need
		}
	}
	for i := range flow {
		for n, v := range flow[i] {
			if v == 0 {
				delete(flow[i], n)
			}
		}
	}
	return flow
}

// order is d's group, the nodes of its CPUs first.
func (m *memory) order(d demand) []int {
	out := slices.Clone(d.group)
	slices.SortStableFunc(out, func(a, b int) int {
		ia, ib := d.first.Contains(a), d.first.Contains(b)
		switch {
		case ia == ib:
			return 0
		case ia:
			return -1
		}
		return 1
	})
	return out
}

// augment places up to need bytes of demand i along one shortest path of
// nodes, breadth first from start (i's nodes): each step shifts memory of
// a demand that uses one node to another node of its group, until a node
// with room. It returns how much was placed.
func (m *memory) augment(ds []demand, flow []map[int]int64, used map[int]int64, i int, start []int, need int64) int64 {
	type step struct{ from, via int } // previous node, demand shifted
	prev := map[int]step{}
	queue := make([]int, 0, len(start))
	for _, n := range start {
		if _, seen := prev[n]; !seen {
			prev[n] = step{from: -1, via: i}
			queue = append(queue, n)
		}
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		spare := m.capacity[n] - used[n]
		if spare <= 0 {
			for j, d := range ds {
				if flow[j][n] <= 0 {
					continue
				}
				for _, next := range d.group {
					if _, seen := prev[next]; !seen {
						prev[next] = step{from: n, via: j}
						queue = append(queue, next)
					}
				}
			}
			continue
		}
		amt := min(need, spare)
		at := n
		for ; prev[at].from >= 0; at = prev[at].from {
			amt = min(amt, flow[prev[at].via][prev[at].from])
		}
		for at = n; prev[at].from >= 0; at = prev[at].from {
			st := prev[at]
			flow[st.via][st.from] -= amt
			flow[st.via][at] += amt
		}
		flow[i][at] += amt
		used[n] += amt
		return amt
	}
	return 0
}
