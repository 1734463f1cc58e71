package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology/topologytest"
)

// TestDiscoverMachines discovers the synthetic trees of topologytest. Each tree
// is written there as literal sysfs content; the models it must yield are
// built here independently (from a Spec, or by hand), and the hand-written
// expectations below pin the facts that matter most.
func TestDiscoverMachines(t *testing.T) {
	type expect struct {
		cpus, offline, isolated string
		nodes                   map[int]string
		mem                     map[int]uint64
		siblings                map[int]string
		distance                [3]int // from, to, distance
		packages                []int
	}
	cases := []struct {
		name    string
		machine topologytest.Machine
		want    *Topology
		expect
	}{
		{
			name:    "dual-socket-ht",
			machine: topologytest.DualSocketHT(),
			want:    mustSpec(t, Spec{Packages: 2, NodesPerPackage: 1, CoresPerNode: 4, ThreadsPerCore: 2, MemoryPerNode: 16 * gib, RemoteDistance: 21}),
			expect: expect{
				cpus: "0-15", nodes: map[int]string{0: "0-3,8-11", 1: "4-7,12-15"},
				mem:      map[int]uint64{0: 16 * gib, 1: 16 * gib},
				siblings: map[int]string{0: "0,8", 12: "4,12"},
				distance: [3]int{0, 1, 21}, packages: []int{0, 1},
			},
		},
		{
			name:    "nps4",
			machine: topologytest.NPS4(),
			want:    mustSpec(t, Spec{Packages: 1, NodesPerPackage: 4, CoresPerNode: 4, ThreadsPerCore: 2, MemoryPerNode: 8 * gib}),
			expect: expect{
				cpus: "0-31", nodes: map[int]string{0: "0-3,16-19", 1: "4-7,20-23", 2: "8-11,24-27", 3: "12-15,28-31"},
				mem:      map[int]uint64{3: 8 * gib},
				siblings: map[int]string{5: "5,21"},
				distance: [3]int{1, 3, 12}, packages: []int{0},
			},
		},
		{
			name:    "epyc-256",
			machine: topologytest.EPYC256(),
			want:    mustSpec(t, Spec{Packages: 2, NodesPerPackage: 4, CoresPerNode: 16, ThreadsPerCore: 2, MemoryPerNode: 64 * gib}),
			expect: expect{
				cpus: "0-255", nodes: map[int]string{0: "0-15,128-143", 7: "112-127,240-255"},
				mem:      map[int]uint64{7: 64 * gib},
				siblings: map[int]string{255: "127,255"},
				distance: [3]int{0, 4, 32}, packages: []int{0, 1},
			},
		},
		{
			name:    "offline",
			machine: topologytest.Offline(),
			want:    offlineTopology(t),
			expect: expect{
				cpus: "0-2,4-5,7-13,15", offline: "3,6,14", isolated: "2,10",
				nodes:    map[int]string{0: "0-2,8-11", 1: "4-5,7,12-13,15"},
				siblings: map[int]string{11: "11", 2: "2,10", 7: "7,15"},
				distance: [3]int{0, 1, 11}, packages: []int{0},
			},
		},
		{
			name:    "hybrid",
			machine: topologytest.Hybrid(),
			want:    hybridTopology(),
			expect: expect{
				cpus: "0-23", nodes: map[int]string{0: "0-23"},
				mem:      map[int]uint64{0: 0},
				siblings: map[int]string{0: "0-1", 15: "14-15", 16: "16", 23: "23"},
				distance: [3]int{0, 0, 10}, packages: []int{0},
			},
		},
		{
			name:    "no-numa",
			machine: topologytest.NoNUMA(),
			want:    mustSpec(t, Spec{Packages: 1, NodesPerPackage: 1, CoresPerNode: 2, ThreadsPerCore: 2}),
			expect: expect{
				cpus: "0-3", nodes: map[int]string{0: "0-3"},
				siblings: map[int]string{3: "1,3"},
				distance: [3]int{0, 0, 10}, packages: []int{0},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DiscoverFS(tc.machine.Tree().FS())
			if err != nil {
				t.Fatalf("DiscoverFS: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				for id := range maps.Keys(tc.want.CPUs) {
					if got.CPUs[id] != tc.want.CPUs[id] {
						t.Errorf("cpu %d: got %+v, want %+v", id, got.CPUs[id], tc.want.CPUs[id])
					}
				}
				t.Fatalf("Discover model differs:\n got %+v\nwant %+v", got, tc.want)
			}
			exp := tc.expect
			checkSet(t, "AllCPUs", got.AllCPUs(), exp.cpus)
			checkSet(t, "Offline", got.Offline, exp.offline)
			checkSet(t, "Isolated", got.Isolated, exp.isolated)
			if ids := got.NUMANodeIDs(); len(ids) < len(exp.nodes) {
				t.Errorf("NUMANodeIDs = %v, want at least %d nodes", ids, len(exp.nodes))
			}
			for id, cpus := range exp.nodes {
				checkSet(t, fmt.Sprintf("node %d", id), got.NUMANodes[id].CPUs, cpus)
				checkSet(t, fmt.Sprintf("CPUsInNUMANodes(%d)", id), got.CPUsInNUMANodes(id), cpus)
			}
			for id, mem := range exp.mem {
				if got.NUMANodes[id].MemoryBytes != mem {
					t.Errorf("node %d memory = %d, want %d", id, got.NUMANodes[id].MemoryBytes, mem)
				}
			}
			for cpu, sib := range exp.siblings {
				checkSet(t, fmt.Sprintf("CoreSiblings(%d)", cpu), got.CoreSiblings(cpu), sib)
			}
			if d := got.Distance(exp.distance[0], exp.distance[1]); d != exp.distance[2] {
				t.Errorf("Distance(%d,%d) = %d, want %d", exp.distance[0], exp.distance[1], d, exp.distance[2])
			}
			if p := got.PackageIDs(); !reflect.DeepEqual(p, exp.packages) {
				t.Errorf("PackageIDs = %v, want %v", p, exp.packages)
			}
			checkInvariants(t, got)
		})
	}
}

func mustSpec(t testing.TB, s Spec) *Topology {
	t.Helper()
	topo, err := FromSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

const gib = uint64(1) << 30

// offlineTopology is a 2-node, 8-core SMT2 machine with cpu3, cpu6 and
// cpu14 offline: core 6 is gone entirely, core 3 keeps only cpu11 (which
// becomes its core id, the lowest online sibling). cpu2 and cpu10 are
// isolated.
func offlineTopology(t testing.TB) *Topology {
	topo := mustSpec(t, Spec{Packages: 1, NodesPerPackage: 2, CoresPerNode: 4, ThreadsPerCore: 2, MemoryPerNode: 4 * gib, LocalDistance: 11})
	off := cpuset.New(3, 6, 14)
	for _, cpu := range off.List() {
		n := topo.CPUs[cpu].NUMANode
		delete(topo.CPUs, cpu)
		node := topo.NUMANodes[n]
		node.CPUs = node.CPUs.Difference(cpuset.New(cpu))
		topo.NUMANodes[n] = node
	}
	info := topo.CPUs[11]
	info.Core = 11
	topo.CPUs[11] = info
	topo.Offline = off
	topo.Isolated = cpuset.New(2, 10)
	return topo
}

// hybridTopology is an Alder Lake-like part: 8 P-cores with SMT (cpu0-15,
// siblings are adjacent ids) and 8 E-cores without SMT (cpu16-23) in two
// clusters of four. One socket, one node.
func hybridTopology() *Topology {
	topo := &Topology{
		CPUs:     map[int]CPUInfo{},
		Offline:  cpuset.New(),
		Isolated: cpuset.New(),
	}
	for cpu := range 24 {
		info := CPUInfo{ID: cpu, Capacity: 1024}
		if cpu < 16 {
			info.Core = cpu &^ 1
			info.Cluster = cpu / 2 * 8
		} else {
			info.Core = cpu
			info.Cluster = 64 + (cpu-16)/4*8
			info.Capacity = 589
		}
		topo.CPUs[cpu] = info
	}
	topo.NUMANodes = map[int]NUMANode{0: {ID: 0, CPUs: topo.AllCPUs(), Distances: map[int]int{0: 10}}}
	return topo
}

// checkInvariants holds for any discovered topology: Core is the lowest
// sibling, siblings share node and package, and the node sets partition the
// online CPUs.
func checkInvariants(t *testing.T, topo *Topology) {
	t.Helper()
	if err := topo.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	for id, info := range topo.CPUs {
		sib := topo.CoreSiblings(id)
		if !sib.Contains(id) || sib.List()[0] != info.Core {
			t.Errorf("cpu %d: core %d, siblings %s", id, info.Core, sib)
		}
		for _, s := range sib.List() {
			if o := topo.CPUs[s]; o.NUMANode != info.NUMANode || o.Package != info.Package {
				t.Errorf("cpu %d and sibling %d straddle node or package", id, s)
			}
		}
	}
	var union cpuset.CPUSet
	total := 0
	for _, id := range topo.NUMANodeIDs() {
		union = union.Union(topo.NUMANodes[id].CPUs)
		total += topo.NUMANodes[id].CPUs.Size()
	}
	if !union.Equals(topo.AllCPUs()) || total != len(topo.CPUs) {
		t.Errorf("node cpusets %s do not partition online cpus %s", union, topo.AllCPUs())
	}
}

func checkSet(t *testing.T, what string, got cpuset.CPUSet, want string) {
	t.Helper()
	if got.String() != want {
		t.Errorf("%s = %q, want %q", what, got.String(), want)
	}
}

func TestDiscoverMissingRoot(t *testing.T) {
	for _, root := range []string{"", filepath.Join(t.TempDir(), "nope")} {
		_, err := Discover(root)
		if !errors.Is(err, ErrMissing) {
			t.Errorf("Discover(%q) = %v, want ErrMissing", root, err)
		}
	}
}

// smallTwoSocket is the well-formed base tree of the error and quirk
// tests: two sockets with one node and two SMT2 cores each (cpu n and n+4
// are siblings), 1 GiB per node, every optional file but cluster_id.
func smallTwoSocket() topologytest.Tree {
	return topologytest.Machine{
		Cores: []topologytest.Core{
			{CPUs: []int{0, 4}, Package: 0, CoreID: 0},
			{CPUs: []int{1, 5}, Package: 0, CoreID: 1},
			{CPUs: []int{2, 6}, Package: 1, CoreID: 0},
			{CPUs: []int{3, 7}, Package: 1, CoreID: 1},
		},
		Nodes: []topologytest.Node{
			{ID: 0, CPUs: "0-1,4-5", Distance: "10 32", MemTotalKiB: 1 << 20},
			{ID: 1, CPUs: "2-3,6-7", Distance: "32 10", MemTotalKiB: 1 << 20},
		},
		SiblingFiles: []string{topologytest.CoreCPUsList, topologytest.ThreadSiblingsList},
		DieID:        true,
		PerCPUOnline: true,
		IsolatedFile: true,
		NodeOnline:   true,
	}.Tree()
}

func TestDiscoverBadFiles(t *testing.T) {
	base := smallTwoSocket()
	cpu := func(n int, f string) string { return fmt.Sprintf("%s/cpu%d/%s", cpuDir, n, f) }
	node := func(n int, f string) string { return fmt.Sprintf("%s/node%d/%s", nodeDir, n, f) }
	const drop = "\x00drop"

	cases := []struct {
		name    string
		edit    map[string]string // path -> new content, or drop
		wantErr error
		path    string // substring of the error
		value   string // ParseError.Value, when a parse failed
	}{
		{name: "online garbage", edit: map[string]string{cpuDir + "/online": "zero-three\n"}, wantErr: ErrMalformed, path: "cpu/online", value: "zero-three"},
		{name: "online empty", edit: map[string]string{cpuDir + "/online": "\n"}, wantErr: ErrMalformed, path: "cpu/online"},
		{name: "online reversed range", edit: map[string]string{cpuDir + "/online": "3-0"}, wantErr: ErrMalformed, value: "3-0"},
		{name: "online huge range", edit: map[string]string{cpuDir + "/online": "0-4294967295"}, wantErr: ErrMalformed},
		{name: "online negative", edit: map[string]string{cpuDir + "/online": "-1"}, wantErr: ErrMalformed},
		{name: "offline garbage", edit: map[string]string{cpuDir + "/offline": "4,"}, wantErr: ErrMalformed, path: "cpu/offline"},
		{name: "offline overlaps online", edit: map[string]string{cpuDir + "/offline": "1"}, wantErr: ErrMalformed, path: "both online and offline"},
		{name: "isolated garbage", edit: map[string]string{cpuDir + "/isolated": "a"}, wantErr: ErrMalformed, path: "isolated"},
		{name: "core_id missing", edit: map[string]string{cpu(3, "topology/core_id"): drop}, wantErr: ErrMissing, path: "cpu3/topology/core_id"},
		{name: "core_id garbage", edit: map[string]string{cpu(3, "topology/core_id"): "three"}, wantErr: ErrMalformed, path: "cpu3/topology/core_id", value: "three"},
		{name: "package missing", edit: map[string]string{cpu(0, "topology/physical_package_id"): drop}, wantErr: ErrMissing, path: "physical_package_id"},
		{name: "package garbage", edit: map[string]string{cpu(1, "topology/physical_package_id"): "1 2"}, wantErr: ErrMalformed, value: "1 2"},
		{name: "die garbage", edit: map[string]string{cpu(2, "topology/die_id"): "1.5"}, wantErr: ErrMalformed, path: "die_id"},
		{name: "siblings garbage", edit: map[string]string{cpu(2, "topology/core_cpus_list"): "2;6"}, wantErr: ErrMalformed, path: "core_cpus_list"},
		{name: "capacity garbage", edit: map[string]string{cpu(2, "cpu_capacity"): "big"}, wantErr: ErrMalformed, path: "cpu_capacity"},
		{name: "cluster garbage", edit: map[string]string{cpu(2, "topology/cluster_id"): ""}, wantErr: ErrMalformed, path: "cluster_id"},
		{name: "node cpulist missing", edit: map[string]string{node(1, "cpulist"): drop}, wantErr: ErrMissing, path: "node1/cpulist"},
		{name: "node cpulist garbage", edit: map[string]string{node(1, "cpulist"): "x"}, wantErr: ErrMalformed, path: "node1/cpulist"},
		{name: "cpu in two nodes", edit: map[string]string{node(1, "cpulist"): "0-7"}, wantErr: ErrMalformed, path: "listed by both"},
		{name: "cpu in no node", edit: map[string]string{node(1, "cpulist"): "2"}, wantErr: ErrMalformed, path: "in no node cpulist"},
		{name: "node online empty", edit: map[string]string{nodeDir + "/online": ""}, wantErr: ErrMalformed, path: "node/online"},
		{name: "distance short", edit: map[string]string{node(0, "distance"): "10"}, wantErr: ErrMalformed, path: "node0/distance", value: "10"},
		{name: "distance garbage", edit: map[string]string{node(0, "distance"): "10 far"}, wantErr: ErrMalformed, path: "node0/distance"},
		{name: "distance zero", edit: map[string]string{node(0, "distance"): "0 20"}, wantErr: ErrMalformed},
		{name: "meminfo without MemTotal", edit: map[string]string{node(1, "meminfo"): "Node 1 MemFree: 5 kB\n"}, wantErr: ErrMalformed, path: "node1/meminfo"},
		{name: "meminfo garbage", edit: map[string]string{node(1, "meminfo"): "Node 1 MemTotal: lots kB\n"}, wantErr: ErrMalformed, path: "node1/meminfo"},
		{name: "no cpu directory", edit: dropPrefix(base, cpuDir), wantErr: ErrMissing, path: "cpu"},
		{name: "scan finds only offline", edit: map[string]string{cpuDir + "/online": drop, cpu(0, "online"): "0", cpu(1, "online"): "0", cpu(2, "online"): "0", cpu(3, "online"): "0", cpu(4, "online"): "0", cpu(5, "online"): "0", cpu(6, "online"): "0", cpu(7, "online"): "0"}, wantErr: ErrMalformed, path: "no online CPUs"},
		{name: "per-cpu online garbage", edit: map[string]string{cpuDir + "/online": drop, cpu(1, "online"): "yes"}, wantErr: ErrMalformed, path: "cpu1/online"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := maps.Clone(base)
			for name, data := range tc.edit {
				if data == drop {
					delete(files, name)
				} else {
					files[name] = data
				}
			}
			topo, err := DiscoverFS(files.FS())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("DiscoverFS = %+v, %v; want %v", topo, err, tc.wantErr)
			}
			if topo != nil {
				t.Errorf("got a topology alongside error %v", err)
			}
			if !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error %q does not mention %q", err, tc.path)
			}
			if errors.Is(tc.wantErr, ErrMissing) && len(tc.edit) == 1 && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("error %v does not wrap fs.ErrNotExist", err)
			}
			if tc.value != "" {
				var pe *ParseError
				if !errors.As(err, &pe) {
					t.Fatalf("error %v is not a *ParseError", err)
				}
				if pe.Value != tc.value {
					t.Errorf("ParseError.Value = %q, want %q", pe.Value, tc.value)
				}
			}
		})
	}
}

func dropPrefix(files map[string]string, prefix string) map[string]string {
	out := map[string]string{}
	for name := range files {
		if strings.HasPrefix(name, prefix) {
			out[name] = "\x00drop"
		}
	}
	return out
}

// TestDiscoverQuirks covers optional files in isolation, on top of a
// well-formed two-node tree.
func TestDiscoverQuirks(t *testing.T) {
	want := mustSpec(t, Spec{Packages: 2, NodesPerPackage: 1, CoresPerNode: 2, ThreadsPerCore: 2, MemoryPerNode: gib})
	base := smallTwoSocket()
	t.Run("only core_id, no sibling lists", func(t *testing.T) {
		files := maps.Clone(base)
		for name := range files {
			if strings.HasSuffix(name, "_list") {
				delete(files, name)
			}
		}
		got, err := DiscoverFS(files.FS())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("package id -1", func(t *testing.T) {
		files := maps.Clone(base)
		for name := range files {
			if strings.HasSuffix(name, "physical_package_id") || strings.HasSuffix(name, "die_id") {
				files[name] = "-1\n"
			}
		}
		got, err := DiscoverFS(files.FS())
		if err != nil {
			t.Fatal(err)
		}
		if p := got.PackageIDs(); !reflect.DeepEqual(p, []int{0}) {
			t.Errorf("PackageIDs = %v, want [0]", p)
		}
	})
	t.Run("node dirs without node/online", func(t *testing.T) {
		files := maps.Clone(base)
		delete(files, nodeDir+"/online")
		got, err := DiscoverFS(files.FS())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("memory-only node", func(t *testing.T) {
		files := maps.Clone(base)
		files[nodeDir+"/online"] = "0-2\n"
		files[nodeDir+"/node0/distance"] = "10 21 30\n"
		files[nodeDir+"/node1/distance"] = "21 10 30\n"
		files[nodeDir+"/node2/cpulist"] = "\n"
		files[nodeDir+"/node2/distance"] = "30 30 10\n"
		got, err := DiscoverFS(files.FS())
		if err != nil {
			t.Fatal(err)
		}
		if ids := got.NUMANodeIDs(); !reflect.DeepEqual(ids, []int{0, 1, 2}) {
			t.Errorf("NUMANodeIDs = %v", ids)
		}
		if !got.NUMANodes[2].CPUs.IsEmpty() || got.Distance(0, 2) != 30 || got.Distance(2, 1) != 30 {
			t.Errorf("node 2 = %+v", got.NUMANodes[2])
		}
	})
	t.Run("node cpulist names offline cpus", func(t *testing.T) {
		files := maps.Clone(base)
		files[cpuDir+"/online"] = "0-6\n"
		files[cpuDir+"/offline"] = "7\n"
		for name := range files {
			if strings.HasPrefix(name, cpuDir+"/cpu7/") {
				delete(files, name)
			}
		}
		got, err := DiscoverFS(files.FS())
		if err != nil {
			t.Fatal(err)
		}
		checkSet(t, "node 1", got.NUMANodes[1].CPUs, "2-3,6")
		checkSet(t, "CoreSiblings(3)", got.CoreSiblings(3), "3")
	})
}
