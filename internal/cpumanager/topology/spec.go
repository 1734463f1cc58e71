package topology

import (
	"fmt"

	"k8s.io/utils/cpuset"
)

// Spec describes a regular machine for FromSpec: every package has the
// same number of NUMA nodes, every node the same number of cores, every
// core the same number of threads.
type Spec struct {
	// Packages is the number of sockets (at least 1).
	Packages int
	// NodesPerPackage is the number of NUMA nodes per socket (at least 1).
	NodesPerPackage int
	// CoresPerNode is the number of physical cores per node (at least 1).
	CoresPerNode int
	// ThreadsPerCore is the SMT width (at least 1).
	ThreadsPerCore int
	// MemoryPerNode is each node's MemoryBytes.
	MemoryPerNode uint64
	// LocalDistance is the distance between nodes of one package; 0 means 12.
	LocalDistance int
	// RemoteDistance is the distance between packages; 0 means 32.
	RemoteDistance int
}

// FromSpec builds a Topology numbered the way x86 Linux numbers CPUs: the
// first thread of every core in order (package by package, node by node),
// then the second thread of every core, and so on. So on a 2x8x2 machine
// cpu 0 and cpu 16 are siblings. Core ids are the first thread's CPU id.
//
// It exists for tests and benchmarks that need a realistic topology without
// a filesystem.
func FromSpec(s Spec) (*Topology, error) {
	if s.Packages < 1 || s.NodesPerPackage < 1 || s.CoresPerNode < 1 || s.ThreadsPerCore < 1 {
		return nil, fmt.Errorf("%w: spec %+v: every count must be at least 1", ErrMalformed, s)
	}
	nodes := s.Packages * s.NodesPerPackage
	cores := nodes * s.CoresPerNode
	if cores*s.ThreadsPerCore > MaxCPUID+1 {
		return nil, fmt.Errorf("%w: spec %+v: more than %d CPUs", ErrMalformed, s, MaxCPUID+1)
	}
	local, remote := s.LocalDistance, s.RemoteDistance
	if local == 0 {
		local = 12
	}
	if remote == 0 {
		remote = 32
	}
	t := &Topology{
		CPUs:      make(map[int]CPUInfo, cores*s.ThreadsPerCore),
		NUMANodes: make(map[int]NUMANode, nodes),
		Offline:   cpuset.New(),
		Isolated:  cpuset.New(),
	}
	nodeCPUs := make([][]int, nodes)
	for core := range cores {
		node := core / s.CoresPerNode
		for thread := range s.ThreadsPerCore {
			id := thread*cores + core
			t.CPUs[id] = CPUInfo{
				ID: id, Core: core, Package: node / s.NodesPerPackage, NUMANode: node,
				Cluster: -1,
			}
			nodeCPUs[node] = append(nodeCPUs[node], id)
		}
	}
	for n := range nodes {
		dist := make(map[int]int, nodes)
		for m := range nodes {
			switch {
			case m == n:
				dist[m] = 10
			case m/s.NodesPerPackage == n/s.NodesPerPackage:
				dist[m] = local
			default:
				dist[m] = remote
			}
		}
		t.NUMANodes[n] = NUMANode{ID: n, CPUs: cpuset.New(nodeCPUs[n]...), MemoryBytes: s.MemoryPerNode, Distances: dist}
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("spec %+v: %w", s, err)
	}
	return t, nil
}
