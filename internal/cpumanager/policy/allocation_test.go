package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

// nodeSpec is one NUMA node of a literal topology: its package and its
// cores, written as space-separated CPU lists ("0,8 1,9" is two SMT2 cores).
type nodeSpec struct {
	pkg   int
	cores string
}

// literal builds a Topology from node specs, node ids in order. Nodes of
// one package are 12 apart, of different packages 32.
func literal(t testing.TB, nodes ...nodeSpec) *topology.Topology {
	t.Helper()
	topo := &topology.Topology{CPUs: map[int]topology.CPUInfo{}, NUMANodes: map[int]topology.NUMANode{}}
	for id, n := range nodes {
		var all []int
		for core := range strings.FieldsSeq(n.cores) {
			threads, err := cpuset.Parse(core)
			if err != nil {
				t.Fatalf("core %q: %v", core, err)
			}
			for _, cpu := range threads.List() {
				topo.CPUs[cpu] = topology.CPUInfo{ID: cpu, Core: threads.List()[0], Package: n.pkg, NUMANode: id}
				all = append(all, cpu)
			}
		}
		dist := map[int]int{}
		for other, o := range nodes {
			switch {
			case other == id:
				dist[other] = 10
			case o.pkg == n.pkg:
				dist[other] = 12
			default:
				dist[other] = 32
			}
		}
		topo.NUMANodes[id] = topology.NUMANode{ID: id, CPUs: cpuset.New(all...), Distances: dist}
	}
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	return topo
}

func spec(t testing.TB, s topology.Spec) *topology.Topology {
	t.Helper()
	topo, err := topology.FromSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestTake(t *testing.T) {
	// cpu0-7 first threads, cpu8-15 siblings. node0: 0-3,8-11; node1: 4-7,12-15.
	dualSocketHT := spec(t, topology.Spec{Packages: 2, NodesPerPackage: 1, CoresPerNode: 4, ThreadsPerCore: 2})
	// One package, four nodes of 4 SMT2 cores: node i has cpus 4i..4i+3 and 16+4i..16+4i+3.
	nps4 := spec(t, topology.Spec{Packages: 1, NodesPerPackage: 4, CoresPerNode: 4, ThreadsPerCore: 2})
	// Two packages of two nodes of two SMT2 cores. node0: 0-1,8-9; node1: 2-3,10-11;
	// node2: 4-5,12-13; node3: 6-7,14-15.
	twoByTwo := spec(t, topology.Spec{Packages: 2, NodesPerPackage: 2, CoresPerNode: 2, ThreadsPerCore: 2})
	// Four P-cores with SMT, four E-cores without.
	hybrid := literal(t, nodeSpec{cores: "0,1 2,3 4,5 6,7 8 9 10 11"})
	// Two nodes, the second lost cpu13 (offline), so core 5 has one thread.
	ragged := literal(t, nodeSpec{cores: "0,8 1,9 2,10 3,11"}, nodeSpec{pkg: 1, cores: "4,12 5 6,14 7,15"})

	tests := []struct {
		name      string
		topo      *topology.Topology
		available string
		n         int
		want      string
	}{
		{name: "zero is empty", topo: dualSocketHT, available: "0-15", n: 0, want: ""},
		{name: "negative is empty", topo: dualSocketHT, available: "", n: -3, want: ""},
		{name: "one whole core", topo: dualSocketHT, available: "0-15", n: 2, want: "0,8"},
		{name: "fits one node", topo: dualSocketHT, available: "0-15", n: 6, want: "0-2,8-10"},
		{name: "a whole node", topo: dualSocketHT, available: "0-15", n: 8, want: "0-3,8-11"},
		{name: "whole node first, then whole cores", topo: dualSocketHT, available: "0-15", n: 10, want: "0-4,8-12"},
		{name: "everything", topo: dualSocketHT, available: "0-15", n: 16, want: "0-15"},
		{name: "odd count: whole cores, then one thread", topo: dualSocketHT, available: "0-15", n: 3, want: "0-1,8"},
		{name: "whole cores before threads", topo: dualSocketHT, available: "0-7,9-15", n: 2, want: "1,9"},
		{name: "single thread finishes a partly used core", topo: dualSocketHT, available: "0-7,9-15", n: 1, want: "0"},
		{name: "odd count uses the lone thread", topo: dualSocketHT, available: "0-7,9-15", n: 3, want: "0-1,9"},
		{name: "best fit: the fuller node", topo: dualSocketHT, available: "0-2,8-10,4-5,12-13", n: 4, want: "4-5,12-13"},
		{name: "best fit: exact fit beats lower id", topo: dualSocketHT, available: "0-3,8-10,4-5,12", n: 3, want: "4-5,12"},
		{name: "fewest nodes beats best fit", topo: dualSocketHT, available: "0-2,8-10,4-7,12-15", n: 7, want: "4-7,12-14"},
		{
			name: "spanning: free node whole, leftover in the partly used node", topo: dualSocketHT,
			available: "0-3,8-10,4-7,12-15", n: 10, want: "0,4-8,12-15",
		},
		{
			// node0 holds four lone threads, node1 a whole core and two lone
			// threads: equal fit, so the node that can serve from whole cores wins.
			name: "fragmented: tie goes to whole cores", topo: dualSocketHT,
			available: "0,2,9,11,5,13,14,15", n: 2, want: "5,13",
		},
		{name: "fragmented: odd count", topo: dualSocketHT, available: "0,2,9,11,5,13,14,15", n: 3, want: "5,13-14"},
		{name: "fragmented: lone threads across nodes", topo: dualSocketHT, available: "0,2,9,11,5,13,14,15", n: 6, want: "0,2,5,9,11,13"},
		{name: "unknown cpus are ignored", topo: dualSocketHT, available: "0-1,8-9,64,1000", n: 4, want: "0-1,8-9"},
		{name: "nps4: one node", topo: nps4, available: "0-31", n: 8, want: "0-3,16-19"},
		{name: "nps4: two nodes, lowest ids on a tie", topo: nps4, available: "0-31", n: 12, want: "0-5,16-21"},
		{name: "nps4: three nodes", topo: nps4, available: "0-31", n: 20, want: "0-9,16-25"},
		{
			// Free: node0 5, node1 4, node2 8 (whole), node3 3. n=9 needs two
			// nodes; {0,1} fits exactly, {2,*} all leave CPUs behind.
			name: "nps4: best fit over node pairs", topo: nps4,
			available: "0-2,16-17,4-5,20-21,8-11,24-27,12,28-29", n: 9, want: "0-2,4-5,16-17,20-21",
		},
		{
			// {0,2} and {2,3} both fit 5 exactly; {2,3} share a package.
			name: "two sockets: closer nodes on a tie", topo: twoByTwo,
			available: "0,8,4-5,12,6,14", n: 5, want: "4-6,12,14",
		},
		{name: "hybrid: a P-core for two", topo: hybrid, available: "0-11", n: 2, want: "0-1"},
		{name: "hybrid: an E-core is a whole core", topo: hybrid, available: "0-11", n: 1, want: "8"},
		{name: "hybrid: P-core plus E-core", topo: hybrid, available: "0-11", n: 3, want: "0-1,8"},
		{name: "ragged: single-thread core is whole", topo: ragged, available: "4-7,12,14-15", n: 1, want: "5"},
		{name: "ragged: node of seven", topo: ragged, available: "0-15", n: 7, want: "4-7,12,14-15"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := newAllocator(tc.topo)
			if err != nil {
				t.Fatal(err)
			}
			avail := set(tc.available)
			got, err := a.take(avail, tc.n)
			if err != nil {
				t.Fatalf("takeCPUs(%s, %d): %v", tc.available, tc.n, err)
			}
			if got.String() != tc.want {
				t.Errorf("takeCPUs(%s, %d) = %q, want %q", tc.available, tc.n, got.String(), tc.want)
			}
			again, err := takeCPUs(tc.topo, avail, tc.n)
			if err != nil || !again.Equals(got) {
				t.Errorf("free Take = %q, %v; allocator.Take gave %q", again.String(), err, got.String())
			}
		})
	}
}

func TestTakeInsufficient(t *testing.T) {
	topo := spec(t, topology.Spec{Packages: 2, NodesPerPackage: 1, CoresPerNode: 4, ThreadsPerCore: 2})
	tests := []struct {
		name      string
		available string
		n         int
		want      string
	}{
		{name: "three of four", available: "0-2", n: 4, want: "insufficient cpus: need 4 CPUs, 3 available (0-2)"},
		{name: "nothing available", available: "", n: 1, want: "insufficient cpus: need 1 CPUs, 0 available ()"},
		{name: "offline cpus do not count", available: "0-2,100", n: 4, want: "insufficient cpus: need 4 CPUs, 3 available (0-2)"},
		{name: "more than the machine", available: "0-15", n: 17, want: "insufficient cpus: need 17 CPUs, 16 available (0-15)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := takeCPUs(topo, set(tc.available), tc.n)
			if !errors.Is(err, ErrInsufficient) {
				t.Fatalf("Take = %q, %v; want ErrInsufficient", got.String(), err)
			}
			if err.Error() != tc.want {
				t.Errorf("error %q, want %q", err, tc.want)
			}
			if !got.IsEmpty() {
				t.Errorf("got %q alongside an error", got.String())
			}
		})
	}
}

func TestNewRejectsBadTopology(t *testing.T) {
	for name, topo := range map[string]*topology.Topology{
		"nil":          nil,
		"key mismatch": {CPUs: map[int]topology.CPUInfo{1: {ID: 2}}},
		"negative id":  {CPUs: map[int]topology.CPUInfo{-1: {ID: -1}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := newAllocator(topo); !errors.Is(err, topology.ErrMalformed) {
				t.Errorf("New = %v, want ErrMalformed", err)
			}
			if _, err := takeCPUs(topo, cpuset.New(1), 1); !errors.Is(err, topology.ErrMalformed) {
				t.Errorf("Take = %v, want ErrMalformed", err)
			}
		})
	}
	a, err := newAllocator(&topology.Topology{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.take(cpuset.New(0), 1); !errors.Is(err, ErrInsufficient) {
		t.Errorf("empty topology: %v, want ErrInsufficient", err)
	}
}

func TestTakeDeterministic(t *testing.T) {
	topo := spec(t, topology.Spec{Packages: 2, NodesPerPackage: 4, CoresPerNode: 16, ThreadsPerCore: 2})
	a, err := newAllocator(topo)
	if err != nil {
		t.Fatal(err)
	}
	avail := fragmented(topo.AllCPUs(), 3)
	first, err := a.take(avail, 37)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		// A fresh allocator each time: map iteration order must not leak in.
		b, err := newAllocator(topo)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.take(avail.Clone(), 37)
		if err != nil || !got.Equals(first) {
			t.Fatalf("run %d: %q, %v; first run gave %q", i, got.String(), err, first.String())
		}
	}
}

// fragmented drops every k-th CPU of s.
func fragmented(s cpuset.CPUSet, k int) cpuset.CPUSet {
	var keep []int
	for i, cpu := range s.List() {
		if i%k != 0 {
			keep = append(keep, cpu)
		}
	}
	return cpuset.New(keep...)
}

func Example_allocator() {
	topo, _ := topology.FromSpec(topology.Spec{Packages: 2, NodesPerPackage: 1, CoresPerNode: 4, ThreadsPerCore: 2})
	a, _ := newAllocator(topo)
	got, _ := a.take(cpuset.New(0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 4)
	fmt.Println(got, topo.MemsOf(got))
	_, err := a.take(cpuset.New(0, 1, 2), 4)
	fmt.Println(err)
	// Output:
	// 5-6,13-14 1
	// insufficient cpus: need 4 CPUs, 3 available (0-2)
}
