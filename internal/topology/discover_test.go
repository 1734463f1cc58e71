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
)

func TestDiscoverTestdata(t *testing.T) {
	// Hand-written expectations anchor the generated trees to what the
	// real machines look like; the full model is compared as well.
	type expect struct {
		cpus, offline, isolated string
		nodes                   map[int]string
		mem                     map[int]uint64
		siblings                map[int]string
		distance                [3]int // from, to, distance
		packages                []int
	}
	cases := map[string]expect{
		"dual-socket-ht": {
			cpus: "0-15", nodes: map[int]string{0: "0-3,8-11", 1: "4-7,12-15"},
			mem:      map[int]uint64{0: 16 * gib, 1: 16 * gib},
			siblings: map[int]string{0: "0,8", 12: "4,12"},
			distance: [3]int{0, 1, 21}, packages: []int{0, 1},
		},
		"nps4": {
			cpus: "0-31", nodes: map[int]string{0: "0-3,16-19", 1: "4-7,20-23", 2: "8-11,24-27", 3: "12-15,28-31"},
			mem:      map[int]uint64{3: 8 * gib},
			siblings: map[int]string{5: "5,21"},
			distance: [3]int{1, 3, 12}, packages: []int{0},
		},
		"epyc-256": {
			cpus: "0-255", nodes: map[int]string{0: "0-15,128-143", 7: "112-127,240-255"},
			mem:      map[int]uint64{7: 64 * gib},
			siblings: map[int]string{255: "127,255"},
			distance: [3]int{0, 4, 32}, packages: []int{0, 1},
		},
		"offline": {
			cpus: "0-2,4-5,7-13,15", offline: "3,6,14", isolated: "2,10",
			nodes:    map[int]string{0: "0-2,8-11", 1: "4-5,7,12-13,15"},
			siblings: map[int]string{11: "11", 2: "2,10", 7: "7,15"},
			distance: [3]int{0, 1, 11}, packages: []int{0},
		},
		"hybrid": {
			cpus: "0-23", nodes: map[int]string{0: "0-23"},
			mem:      map[int]uint64{0: 0},
			siblings: map[int]string{0: "0-1", 15: "14-15", 16: "16", 23: "23"},
			distance: [3]int{0, 0, 10}, packages: []int{0},
		},
		"no-numa": {
			cpus: "0-3", nodes: map[int]string{0: "0-3"},
			siblings: map[int]string{3: "1,3"},
			distance: [3]int{0, 0, 10}, packages: []int{0},
		},
	}
	for _, tree := range testTrees(t) {
		t.Run(tree.name, func(t *testing.T) {
			exp, ok := cases[tree.name]
			if !ok {
				t.Fatalf("no expectations for tree %s", tree.name)
			}
			got, err := Discover(filepath.Join("testdata", tree.name))
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if !reflect.DeepEqual(got, tree.want) {
				for id := range maps.Keys(tree.want.CPUs) {
					if got.CPUs[id] != tree.want.CPUs[id] {
						t.Errorf("cpu %d: got %+v, want %+v", id, got.CPUs[id], tree.want.CPUs[id])
					}
				}
				t.Fatalf("Discover model differs:\n got %+v\nwant %+v", got, tree.want)
			}
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

func TestDiscoverBadFiles(t *testing.T) {
	base := writeSysfs(mustSpec(t, Spec{Packages: 2, NodesPerPackage: 1, CoresPerNode: 2, ThreadsPerCore: 2, MemoryPerNode: gib}), fullOpts)
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
			topo, err := DiscoverFS(mapFS(files))
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
	base := writeSysfs(want, fullOpts)
	t.Run("only core_id, no sibling lists", func(t *testing.T) {
		files := maps.Clone(base)
		for name := range files {
			if strings.HasSuffix(name, "_list") {
				delete(files, name)
			}
		}
		got, err := DiscoverFS(mapFS(files))
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
		got, err := DiscoverFS(mapFS(files))
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
		got, err := DiscoverFS(mapFS(files))
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
		got, err := DiscoverFS(mapFS(files))
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
		got, err := DiscoverFS(mapFS(files))
		if err != nil {
			t.Fatal(err)
		}
		checkSet(t, "node 1", got.NUMANodes[1].CPUs, "2-3,6")
		checkSet(t, "CoreSiblings(3)", got.CoreSiblings(3), "3")
	})
}
