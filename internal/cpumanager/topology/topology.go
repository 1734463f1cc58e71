package topology

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/utils/cpuset"
)

// CPUInfo places one online logical CPU in the topology.
type CPUInfo struct {
	// ID is the logical CPU number (cpuN).
	ID int
	// Core identifies the physical core and is unique across the whole
	// topology (not only within a package). Discovery uses the lowest CPU id
	// among the core's thread siblings.
	Core int
	// Package is the physical package (socket) id.
	Package int
	// Die is the die id within the package; 0 when the kernel does not
	// report dies.
	Die int
	// NUMANode is the NUMA node the CPU belongs to.
	NUMANode int
	// Cluster is the kernel's cluster_id (CPUs sharing an L2 on hybrid and
	// some Arm parts), or -1 when not reported. Informational only.
	Cluster int
	// Capacity is the kernel's relative cpu_capacity (1024 for the biggest
	// cores), or 0 when not reported. Informational only.
	Capacity int
}

// NUMANode describes one NUMA node.
type NUMANode struct {
	// ID is the node number (nodeN).
	ID int
	// CPUs are the online CPUs of the node; empty for memory-only nodes.
	CPUs cpuset.CPUSet
	// MemoryBytes is the node's MemTotal, or 0 when unknown.
	MemoryBytes uint64
	// Distances maps node id to the ACPI SLIT distance from this node
	// (10 to itself).
	Distances map[int]int
}

// Topology is the host layout. Build it with Discover, DiscoverFS or
// FromSpec, or as a literal in tests; then treat it as read-only. The query
// methods are safe for concurrent use as long as nobody mutates the maps.
type Topology struct {
	// CPUs holds every online CPU, keyed by CPU id.
	CPUs map[int]CPUInfo
	// NUMANodes holds every online NUMA node, keyed by node id, including
	// memory-only nodes.
	NUMANodes map[int]NUMANode
	// Offline are the CPUs the kernel reports as present but offline. They
	// are not in CPUs.
	Offline cpuset.CPUSet
	// Isolated are the CPUs listed in isolcpus=. They are online and in
	// CPUs; callers decide whether to hand them out.
	Isolated cpuset.CPUSet
}

// AllCPUs returns every online CPU, isolated ones included.
func (t *Topology) AllCPUs() cpuset.CPUSet {
	ids := make([]int, 0, len(t.CPUs))
	for id := range t.CPUs {
		ids = append(ids, id)
	}
	return cpuset.New(ids...)
}

// CPUsInNUMANodes returns the online CPUs of the given nodes. Unknown node
// ids contribute nothing.
func (t *Topology) CPUsInNUMANodes(ids ...int) cpuset.CPUSet {
	var out []int
	for _, info := range t.CPUs {
		if slices.Contains(ids, info.NUMANode) {
			out = append(out, info.ID)
		}
	}
	return cpuset.New(out...)
}

// CPUsInPackages returns the online CPUs of the given packages (sockets).
func (t *Topology) CPUsInPackages(ids ...int) cpuset.CPUSet {
	var out []int
	for _, info := range t.CPUs {
		if slices.Contains(ids, info.Package) {
			out = append(out, info.ID)
		}
	}
	return cpuset.New(out...)
}

// NUMANodeIDs returns the ids of all NUMA nodes, sorted.
func (t *Topology) NUMANodeIDs() []int {
	ids := make([]int, 0, len(t.NUMANodes))
	for id := range t.NUMANodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// PackageIDs returns the ids of all packages with online CPUs, sorted.
func (t *Topology) PackageIDs() []int {
	var ids []int
	for _, info := range t.CPUs {
		if !slices.Contains(ids, info.Package) {
			ids = append(ids, info.Package)
		}
	}
	slices.Sort(ids)
	return ids
}

// MemoryNodes returns the NUMA nodes with memory (MemoryBytes > 0): the
// nodes a task may allocate from, the widest cpuset.mems. When no node
// reports its memory, every node counts.
func (t *Topology) MemoryNodes() cpuset.CPUSet {
	var ids, all []int
	for id, n := range t.NUMANodes {
		all = append(all, id)
		if n.MemoryBytes > 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return cpuset.New(all...)
	}
	return cpuset.New(ids...)
}

// NUMANodesOf returns the sorted ids of the nodes that hold at least one of
// cpus. CPUs that are not online are ignored.
func (t *Topology) NUMANodesOf(cpus cpuset.CPUSet) []int {
	var ids []int
	for _, cpu := range cpus.UnsortedList() {
		info, ok := t.CPUs[cpu]
		if ok && !slices.Contains(ids, info.NUMANode) {
			ids = append(ids, info.NUMANode)
		}
	}
	slices.Sort(ids)
	return ids
}

// MemsOf returns the NUMA nodes of cpus as a set, in the form cgroup
// cpuset.mems wants.
func (t *Topology) MemsOf(cpus cpuset.CPUSet) cpuset.CPUSet {
	return cpuset.New(t.NUMANodesOf(cpus)...)
}

// NUMANodeOf returns the node of an online CPU.
func (t *Topology) NUMANodeOf(cpu int) (int, bool) {
	info, ok := t.CPUs[cpu]
	return info.NUMANode, ok
}

// CoreSiblings returns the hardware threads of cpu's core, cpu included.
// It is empty when cpu is not online.
func (t *Topology) CoreSiblings(cpu int) cpuset.CPUSet {
	self, ok := t.CPUs[cpu]
	if !ok {
		return cpuset.New()
	}
	var out []int
	for _, info := range t.CPUs {
		if info.Core == self.Core && info.Package == self.Package {
			out = append(out, info.ID)
		}
	}
	return cpuset.New(out...)
}

// Distance returns the SLIT distance between two nodes. Unknown pairs get
// 10 for a node to itself and 20 otherwise, the kernel's defaults.
func (t *Topology) Distance(from, to int) int {
	if d, ok := t.NUMANodes[from].Distances[to]; ok {
		return d
	}
	if from == to {
		return 10
	}
	return 20
}

// Validate checks that the model is self-consistent: every CPU sits in a
// known node whose CPU set lists it, node CPU sets list only CPUs that
// place themselves there, and no CPU is both online and offline. It reports
// every problem found, joined, each wrapping ErrMalformed.
func (t *Topology) Validate() error {
	var errs []error
	if len(t.CPUs) == 0 {
		errs = append(errs, fmt.Errorf("%w: no online CPUs", ErrMalformed))
	}
	for _, id := range sortedKeys(t.CPUs) {
		info := t.CPUs[id]
		if info.ID != id {
			errs = append(errs, fmt.Errorf("%w: CPUs[%d] has ID %d", ErrMalformed, id, info.ID))
		}
		node, ok := t.NUMANodes[info.NUMANode]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%w: cpu %d is in unknown NUMA node %d", ErrMalformed, id, info.NUMANode))
		case !node.CPUs.Contains(id):
			errs = append(errs, fmt.Errorf("%w: cpu %d claims NUMA node %d whose cpus are %q", ErrMalformed, id, info.NUMANode, node.CPUs.String()))
		}
		if t.Offline.Contains(id) {
			errs = append(errs, fmt.Errorf("%w: cpu %d is both online and offline", ErrMalformed, id))
		}
	}
	for _, nid := range t.NUMANodeIDs() {
		node := t.NUMANodes[nid]
		if node.ID != nid {
			errs = append(errs, fmt.Errorf("%w: NUMANodes[%d] has ID %d", ErrMalformed, nid, node.ID))
		}
		for _, cpu := range node.CPUs.List() {
			if info, ok := t.CPUs[cpu]; !ok || info.NUMANode != nid {
				errs = append(errs, fmt.Errorf("%w: NUMA node %d lists cpu %d, which is not an online cpu of that node", ErrMalformed, nid, cpu))
			}
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
