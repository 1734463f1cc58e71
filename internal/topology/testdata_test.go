package topology

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"k8s.io/utils/cpuset"
)

// The sysfs trees under testdata/ are generated from the models below by
// writeSysfs, then committed. TestTestdataUpToDate fails when the committed
// trees drift from the generator; regenerate them with
//
//	CGDELEGATE_UPDATE_TESTDATA=1 go test ./internal/topology/ -run TestTestdataUpToDate
//
// Each tree holds only the files Discover reads.

// treeOptions select which optional files a generated tree contains, to
// reproduce kernel and firmware quirks.
type treeOptions struct {
	// siblingFiles lists which of core_cpus_list and thread_siblings_list
	// to write.
	siblingFiles []string
	// dieID writes topology/die_id (absent before Linux 5.2).
	dieID bool
	// clusterID writes topology/cluster_id for CPUs with Cluster >= 0.
	clusterID bool
	// noCPUOnline omits devices/system/cpu/online and offline, forcing
	// the per-directory scan.
	noCPUOnline bool
	// perCPUOnline writes cpuN/online for every CPU but cpu0, as x86 does.
	perCPUOnline bool
	// isolated writes devices/system/cpu/isolated.
	isolated bool
	// nodes selects the NUMA part: "full", "bare" (node dirs with cpulist
	// only, no node/online) or "none" (no node directory).
	nodes string
	// coreIDs overrides core_id per CPU; by default it is the core's rank
	// within its package.
	coreIDs map[int]int
}

// testTree is one committed sysfs tree and the topology it must yield.
type testTree struct {
	name string
	want *Topology
	opts treeOptions
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

var fullOpts = treeOptions{
	siblingFiles: []string{"core_cpus_list", "thread_siblings_list"},
	dieID:        true,
	perCPUOnline: true,
	isolated:     true,
	nodes:        "full",
}

func testTrees(t testing.TB) []testTree {
	modern := fullOpts
	modern.siblingFiles = []string{"core_cpus_list"}
	modern.perCPUOnline = false

	offlineOpts := fullOpts
	offlineOpts.coreIDs = map[int]int{11: 3} // core 3 lost cpu3, keeps its core_id

	noNUMA := treeOptions{siblingFiles: []string{"thread_siblings_list"}, nodes: "none"}

	return []testTree{
		{
			// Two sockets, four cores each, SMT2: cpu0-7 are first
			// threads, cpu8-15 their siblings.
			name: "dual-socket-ht",
			want: mustSpec(t, Spec{Packages: 2, NodesPerPackage: 1, CoresPerNode: 4, ThreadsPerCore: 2, MemoryPerNode: 16 * gib, RemoteDistance: 21}),
			opts: fullOpts,
		},
		{
			// One socket split into four NUMA nodes (AMD NPS4).
			name: "nps4",
			want: mustSpec(t, Spec{Packages: 1, NodesPerPackage: 4, CoresPerNode: 4, ThreadsPerCore: 2, MemoryPerNode: 8 * gib}),
			opts: fullOpts,
		},
		{
			// 2 sockets x NPS4 x 16 cores x SMT2 = 256 CPUs, 8 nodes.
			name: "epyc-256",
			want: mustSpec(t, Spec{Packages: 2, NodesPerPackage: 4, CoresPerNode: 16, ThreadsPerCore: 2, MemoryPerNode: 64 * gib}),
			opts: modern,
		},
		{
			name: "offline",
			want: offlineTopology(t),
			opts: offlineOpts,
		},
		{
			name: "hybrid",
			want: hybridTopology(),
			opts: treeOptions{
				siblingFiles: []string{"thread_siblings_list"},
				clusterID:    true,
				noCPUOnline:  true,
				perCPUOnline: true,
				nodes:        "bare",
				coreIDs:      hybridCoreIDs(),
			},
		},
		{
			// A kernel without NUMA support: no devices/system/node.
			name: "no-numa",
			want: mustSpec(t, Spec{Packages: 1, NodesPerPackage: 1, CoresPerNode: 2, ThreadsPerCore: 2}),
			opts: noNUMA,
		},
	}
}

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

// hybridCoreIDs mirrors what Alder Lake reports: P-cores step by 4, E-cores
// get 32 and up.
func hybridCoreIDs() map[int]int {
	ids := map[int]int{}
	for cpu := range 24 {
		if cpu < 16 {
			ids[cpu] = cpu / 2 * 4
		} else {
			ids[cpu] = 32 + cpu - 16
		}
	}
	return ids
}

// writeSysfs renders topo as sysfs files, keyed by slash-separated path
// relative to the sysfs root.
func writeSysfs(topo *Topology, o treeOptions) map[string]string {
	files := map[string]string{}
	put := func(name, value string) { files[name] = value + "\n" }
	online := topo.AllCPUs()
	if !o.noCPUOnline {
		put(cpuDir+"/online", online.String())
		put(cpuDir+"/offline", topo.Offline.String())
	}
	if o.isolated {
		put(cpuDir+"/isolated", topo.Isolated.String())
	}
	// core_id defaults to the core's rank within its package.
	coreRank := map[[2]int]int{}
	for _, cpu := range online.List() {
		info := topo.CPUs[cpu]
		k := [2]int{info.Package, info.Core}
		if _, ok := coreRank[k]; !ok {
			n := 0
			for kk := range coreRank {
				if kk[0] == info.Package {
					n++
				}
			}
			coreRank[k] = n
		}
	}
	for _, cpu := range topo.Offline.List() {
		put(fmt.Sprintf("%s/cpu%d/online", cpuDir, cpu), "0")
	}
	for _, cpu := range online.List() {
		info := topo.CPUs[cpu]
		dir := fmt.Sprintf("%s/cpu%d/", cpuDir, cpu)
		if o.perCPUOnline && cpu != 0 {
			put(dir+"online", "1")
		}
		coreID, ok := o.coreIDs[cpu]
		if !ok {
			coreID = coreRank[[2]int{info.Package, info.Core}]
		}
		put(dir+"topology/physical_package_id", fmt.Sprint(info.Package))
		put(dir+"topology/core_id", fmt.Sprint(coreID))
		if o.dieID {
			put(dir+"topology/die_id", fmt.Sprint(info.Die))
		}
		if o.clusterID && info.Cluster >= 0 {
			put(dir+"topology/cluster_id", fmt.Sprint(info.Cluster))
		}
		if info.Capacity > 0 {
			put(dir+"cpu_capacity", fmt.Sprint(info.Capacity))
		}
		for _, f := range o.siblingFiles {
			put(dir+"topology/"+f, topo.CoreSiblings(cpu).String())
		}
	}
	if o.nodes == "none" {
		return files
	}
	ids := topo.NUMANodeIDs()
	if o.nodes == "full" {
		put(nodeDir+"/online", cpuset.New(ids...).String())
	}
	for _, id := range ids {
		node := topo.NUMANodes[id]
		dir := fmt.Sprintf("%s/node%d/", nodeDir, id)
		put(dir+"cpulist", node.CPUs.String())
		if o.nodes != "full" {
			continue
		}
		row := make([]string, 0, len(ids))
		for _, other := range ids {
			row = append(row, fmt.Sprint(node.Distances[other]))
		}
		put(dir+"distance", strings.Join(row, " "))
		kb := node.MemoryBytes >> 10
		put(dir+"meminfo", fmt.Sprintf("Node %d MemTotal:       %8d kB\nNode %d MemFree:        %8d kB", id, kb, id, kb/2))
	}
	return files
}

// readTree loads a directory tree into the same shape writeSysfs returns.
func readTree(t testing.TB, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s: %v", root, err)
	}
	return files
}

func mapFS(files map[string]string) fstest.MapFS {
	m := fstest.MapFS{}
	for name, data := range files {
		m[name] = &fstest.MapFile{Data: []byte(data), Mode: 0o444}
	}
	return m
}

func TestTestdataUpToDate(t *testing.T) {
	update := os.Getenv("CGDELEGATE_UPDATE_TESTDATA") == "1"
	for _, tree := range testTrees(t) {
		t.Run(tree.name, func(t *testing.T) {
			root := filepath.Join("testdata", tree.name)
			want := writeSysfs(tree.want, tree.opts)
			if update {
				if err := os.RemoveAll(root); err != nil {
					t.Fatal(err)
				}
				for _, name := range slices.Sorted(maps.Keys(want)) {
					p := filepath.Join(root, filepath.FromSlash(name))
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, []byte(want[name]), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			got := readTree(t, root)
			for _, name := range slices.Sorted(maps.Keys(want)) {
				if got[name] != want[name] {
					t.Errorf("%s: committed %q, generator says %q (set CGDELEGATE_UPDATE_TESTDATA=1 to regenerate)", name, got[name], want[name])
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("%s: committed but not generated", name)
				}
			}
		})
	}
}
