package topology

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

// dualSocketHT is a struct-literal topology: 2 sockets, 2 cores each, SMT2.
// Core ids are per-package on purpose (both sockets have core 0 and 1) to
// check that queries key cores by package too.
var dualSocketHT = &Topology{
	CPUs: map[int]CPUInfo{
		0: {ID: 0, Core: 0, Package: 0, NUMANode: 0},
		1: {ID: 1, Core: 1, Package: 0, NUMANode: 0},
		2: {ID: 2, Core: 0, Package: 1, NUMANode: 1},
		3: {ID: 3, Core: 1, Package: 1, NUMANode: 1},
		4: {ID: 4, Core: 0, Package: 0, NUMANode: 0},
		5: {ID: 5, Core: 1, Package: 0, NUMANode: 0},
		6: {ID: 6, Core: 0, Package: 1, NUMANode: 1},
		7: {ID: 7, Core: 1, Package: 1, NUMANode: 1},
	},
	NUMANodes: map[int]NUMANode{
		0: {ID: 0, CPUs: cpuset.New(0, 1, 4, 5), Distances: map[int]int{0: 10, 1: 21}},
		1: {ID: 1, CPUs: cpuset.New(2, 3, 6, 7), Distances: map[int]int{0: 21, 1: 10}},
	},
	Offline:  cpuset.New(),
	Isolated: cpuset.New(7),
}

func TestQueries(t *testing.T) {
	topo := dualSocketHT
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  cpuset.CPUSet
		want string
	}{
		{"AllCPUs", topo.AllCPUs(), "0-7"},
		{"CPUsInNUMANodes()", topo.CPUsInNUMANodes(), ""},
		{"CPUsInNUMANodes(1)", topo.CPUsInNUMANodes(1), "2-3,6-7"},
		{"CPUsInNUMANodes(0,1,9)", topo.CPUsInNUMANodes(0, 1, 9), "0-7"},
		{"CPUsInPackages(0)", topo.CPUsInPackages(0), "0-1,4-5"},
		{"MemsOf(0,1)", topo.MemsOf(cpuset.New(0, 1)), "0"},
		{"MemsOf(1,2)", topo.MemsOf(cpuset.New(1, 2)), "0-1"},
		{"MemsOf(offline 42)", topo.MemsOf(cpuset.New(42)), ""},
		{"MemsOf(empty)", topo.MemsOf(cpuset.New()), ""},
		{"CoreSiblings(0)", topo.CoreSiblings(0), "0,4"},
		{"CoreSiblings(6)", topo.CoreSiblings(6), "2,6"},
		{"CoreSiblings(99)", topo.CoreSiblings(99), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got.String() != tc.want {
				t.Errorf("got %q, want %q", tc.got.String(), tc.want)
			}
		})
	}
	if ids := topo.NUMANodeIDs(); !reflect.DeepEqual(ids, []int{0, 1}) {
		t.Errorf("NUMANodeIDs = %v", ids)
	}
	if ids := topo.NUMANodesOf(cpuset.New(7, 1, 6)); !reflect.DeepEqual(ids, []int{0, 1}) {
		t.Errorf("NUMANodesOf = %v", ids)
	}
	if ids := topo.NUMANodesOf(cpuset.New()); len(ids) != 0 {
		t.Errorf("NUMANodesOf(empty) = %v", ids)
	}
	if n, ok := topo.NUMANodeOf(3); n != 1 || !ok {
		t.Errorf("NUMANodeOf(3) = %d, %v", n, ok)
	}
	if _, ok := topo.NUMANodeOf(8); ok {
		t.Error("NUMANodeOf(8) found an offline cpu")
	}
	for _, d := range [][3]int{{0, 1, 21}, {1, 1, 10}, {0, 5, 20}, {5, 5, 10}} {
		if got := topo.Distance(d[0], d[1]); got != d[2] {
			t.Errorf("Distance(%d,%d) = %d, want %d", d[0], d[1], got, d[2])
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		topo *Topology
		want []string
	}{
		{name: "empty", topo: &Topology{}, want: []string{"no online CPUs"}},
		{
			name: "every problem reported",
			topo: &Topology{
				CPUs: map[int]CPUInfo{
					0: {ID: 0, NUMANode: 0},
					1: {ID: 2, NUMANode: 0},
					3: {ID: 3, NUMANode: 4},
				},
				NUMANodes: map[int]NUMANode{0: {ID: 1, CPUs: cpuset.New(0, 5)}},
				Offline:   cpuset.New(0),
			},
			want: []string{
				"CPUs[1] has ID 2",
				"cpu 1 claims NUMA node 0",
				"cpu 3 is in unknown NUMA node 4",
				"cpu 0 is both online and offline",
				"NUMANodes[0] has ID 1",
				"NUMA node 0 lists cpu 5",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.topo.Validate()
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Validate = %v, want ErrMalformed", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestFromSpec(t *testing.T) {
	topo, err := FromSpec(Spec{Packages: 2, NodesPerPackage: 2, CoresPerNode: 2, ThreadsPerCore: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, "node 1", topo.NUMANodes[1].CPUs, "2-3,10-11")
	checkSet(t, "node 3", topo.NUMANodes[3].CPUs, "6-7,14-15")
	checkSet(t, "siblings 9", topo.CoreSiblings(9), "1,9")
	for _, d := range [][3]int{{0, 1, 12}, {1, 2, 32}, {3, 3, 10}} {
		if got := topo.Distance(d[0], d[1]); got != d[2] {
			t.Errorf("Distance(%d,%d) = %d, want %d", d[0], d[1], got, d[2])
		}
	}
	for _, bad := range []Spec{{}, {Packages: 1, NodesPerPackage: 1, CoresPerNode: 1}, {Packages: 300, NodesPerPackage: 1, CoresPerNode: 300, ThreadsPerCore: 1}} {
		if _, err := FromSpec(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("FromSpec(%+v) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestMemoryNodes(t *testing.T) {
	node := func(id int, cpus string, mem uint64) NUMANode {
		set, err := cpuset.Parse(cpus)
		if err != nil {
			t.Fatal(err)
		}
		return NUMANode{ID: id, CPUs: set, MemoryBytes: mem}
	}
	tests := []struct {
		name  string
		nodes []NUMANode
		want  string
	}{
		{"every node has memory", []NUMANode{node(0, "0-3", 1<<30), node(1, "4-7", 1<<30)}, "0-1"},
		{"memory-only node", []NUMANode{node(0, "0-3", 1<<30), node(1, "", 1<<30)}, "0-1"},
		{"memoryless cpu node", []NUMANode{node(0, "0-3", 1<<30), node(1, "4-7", 0)}, "0"},
		{"memory unknown everywhere", []NUMANode{node(0, "0-3", 0), node(1, "4-7", 0)}, "0-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topo := &Topology{NUMANodes: map[int]NUMANode{}}
			for _, n := range tc.nodes {
				topo.NUMANodes[n.ID] = n
			}
			if got := topo.MemoryNodes().String(); got != tc.want {
				t.Errorf("MemoryNodes = %q, want %q", got, tc.want)
			}
		})
	}
}
