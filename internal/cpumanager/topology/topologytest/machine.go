package topologytest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing/fstest"

	"k8s.io/utils/cpuset"
)

// Paths relative to the sysfs root, as the kernel lays them out.
const (
	cpuDir  = "devices/system/cpu"
	nodeDir = "devices/system/node"
)

// The two sibling-list files a core's CPUs may carry in topology/.
const (
	// CoreCPUsList is topology/core_cpus_list (Linux 5.7 and later).
	CoreCPUsList = "core_cpus_list"
	// ThreadSiblingsList is topology/thread_siblings_list, the older name.
	ThreadSiblingsList = "thread_siblings_list"
)

// Core is one physical core as sysfs shows it on each of its CPUs.
type Core struct {
	// CPUs are the core's online hardware threads. Each gets a cpuN
	// directory, and the sibling lists of each name all of them.
	CPUs []int
	// Package is topology/physical_package_id.
	Package int
	// Die is topology/die_id, written when Machine.DieID is set.
	Die int
	// CoreID is topology/core_id: on x86 the core's number within its
	// package, not unique across packages.
	CoreID int
	// Cluster is topology/cluster_id, written when Machine.ClusterID is
	// set.
	Cluster int
	// Capacity is cpuN/cpu_capacity; 0 writes no file.
	Capacity int
}

// Node is one devices/system/node/nodeN directory.
type Node struct {
	// ID is N.
	ID int
	// CPUs is the cpulist content, such as "0-3,8-11".
	CPUs string
	// Distance is the distance row, such as "10 21"; "" writes no file.
	Distance string
	// MemTotalKiB is the MemTotal line of meminfo; 0 writes no meminfo.
	MemTotalKiB uint64
}

// Machine describes a sysfs CPU topology tree: what the files say, and
// which of the optional files exist, to reproduce kernel and firmware
// differences.
type Machine struct {
	// Cores are the physical cores with at least one online CPU.
	Cores []Core
	// Offline CPUs get cpuN/online = 0 and are listed in cpu/offline.
	Offline []int
	// Isolated is the content of cpu/isolated, written when IsolatedFile
	// is set.
	Isolated []int
	// Nodes are the NUMA nodes; none writes no devices/system/node at all
	// (a kernel without NUMA support).
	Nodes []Node

	// SiblingFiles lists which of CoreCPUsList and ThreadSiblingsList to
	// write; none leaves discovery to group CPUs by core_id.
	SiblingFiles []string
	// DieID writes topology/die_id (absent before Linux 5.2).
	DieID bool
	// ClusterID writes topology/cluster_id.
	ClusterID bool
	// NoCPUOnline omits cpu/online and cpu/offline, so discovery has to
	// scan the cpuN directories.
	NoCPUOnline bool
	// PerCPUOnline writes cpuN/online = 1 for every online CPU but cpu0,
	// as x86 kernels do (cpu0 cannot go offline there).
	PerCPUOnline bool
	// IsolatedFile writes cpu/isolated.
	IsolatedFile bool
	// NodeOnline writes node/online listing every node.
	NodeOnline bool
}

// Tree is a sysfs tree: file content keyed by slash-separated path
// relative to the sysfs root ("devices/system/cpu/online").
type Tree map[string]string

// Tree renders the machine's files.
func (m Machine) Tree() Tree {
	t := Tree{}
	put := func(name, value string) { t[name] = value + "\n" }
	var online []int
	for _, c := range m.Cores {
		online = append(online, c.CPUs...)
	}
	if !m.NoCPUOnline {
		put(cpuDir+"/online", cpuset.New(online...).String())
		put(cpuDir+"/offline", cpuset.New(m.Offline...).String())
	}
	if m.IsolatedFile {
		put(cpuDir+"/isolated", cpuset.New(m.Isolated...).String())
	}
	for _, cpu := range m.Offline {
		put(fmt.Sprintf("%s/cpu%d/online", cpuDir, cpu), "0")
	}
	for _, c := range m.Cores {
		siblings := cpuset.New(c.CPUs...).String()
		for _, cpu := range c.CPUs {
			dir := fmt.Sprintf("%s/cpu%d/", cpuDir, cpu)
			if m.PerCPUOnline && cpu != 0 {
				put(dir+"online", "1")
			}
			put(dir+"topology/physical_package_id", strconv.Itoa(c.Package))
			put(dir+"topology/core_id", strconv.Itoa(c.CoreID))
			if m.DieID {
				put(dir+"topology/die_id", strconv.Itoa(c.Die))
			}
			if m.ClusterID {
				put(dir+"topology/cluster_id", strconv.Itoa(c.Cluster))
			}
			if c.Capacity > 0 {
				put(dir+"cpu_capacity", strconv.Itoa(c.Capacity))
			}
			for _, f := range m.SiblingFiles {
				put(dir+"topology/"+f, siblings)
			}
		}
	}
	ids := make([]int, 0, len(m.Nodes))
	for _, n := range m.Nodes {
		ids = append(ids, n.ID)
		dir := fmt.Sprintf("%s/node%d/", nodeDir, n.ID)
		put(dir+"cpulist", n.CPUs)
		if n.Distance != "" {
			put(dir+"distance", n.Distance)
		}
		if n.MemTotalKiB != 0 {
			put(dir+"meminfo", fmt.Sprintf("Node %d MemTotal:       %8d kB\nNode %d MemFree:        %8d kB",
				n.ID, n.MemTotalKiB, n.ID, n.MemTotalKiB/2))
		}
	}
	if m.NodeOnline {
		put(nodeDir+"/online", cpuset.New(ids...).String())
	}
	return t
}

// FS returns the tree as an in-memory file system rooted where /sys would
// be, for topology.DiscoverFS.
func (t Tree) FS() fstest.MapFS {
	fsys := make(fstest.MapFS, len(t))
	for name, data := range t {
		fsys[name] = &fstest.MapFile{Data: []byte(data), Mode: 0o444}
	}
	return fsys
}

// Write creates the tree's files below dir, which need not exist, for code
// that takes a sysfs root path.
func (t Tree) Write(dir string) error {
	for name, data := range t {
		if !fs.ValidPath(name) {
			return fmt.Errorf("write sysfs tree: invalid path %q", name)
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("write sysfs tree: %w", err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			return fmt.Errorf("write sysfs tree: %w", err)
		}
	}
	return nil
}
