package topologytest

// Memory sizes in KiB, as node meminfo reports them.
const (
	gib4  = 4 << 20
	gib8  = 8 << 20
	gib16 = 16 << 20
	gib64 = 64 << 20
)

// fullLayout is a current x86 kernel: both sibling lists, die_id,
// cpuN/online, cpu/isolated and node/online.
func fullLayout(m Machine) Machine {
	m.SiblingFiles = []string{CoreCPUsList, ThreadSiblingsList}
	m.DieID = true
	m.PerCPUOnline = true
	m.IsolatedFile = true
	m.NodeOnline = true
	return m
}

// DualSocketHT is two sockets, one NUMA node each, four cores per socket,
// SMT2, numbered the x86 way: cpu0-7 are the first threads of cores 0-7,
// cpu8-15 their siblings. Node 0 holds cpu0-3,8-11, node 1 cpu4-7,12-15;
// 16 GiB per node, distance 21 between them.
func DualSocketHT() Machine {
	return fullLayout(Machine{
		Cores: []Core{
			{CPUs: []int{0, 8}, Package: 0, CoreID: 0},
			{CPUs: []int{1, 9}, Package: 0, CoreID: 1},
			{CPUs: []int{2, 10}, Package: 0, CoreID: 2},
			{CPUs: []int{3, 11}, Package: 0, CoreID: 3},
			{CPUs: []int{4, 12}, Package: 1, CoreID: 0},
			{CPUs: []int{5, 13}, Package: 1, CoreID: 1},
			{CPUs: []int{6, 14}, Package: 1, CoreID: 2},
			{CPUs: []int{7, 15}, Package: 1, CoreID: 3},
		},
		Nodes: []Node{
			{ID: 0, CPUs: "0-3,8-11", Distance: "10 21", MemTotalKiB: gib16},
			{ID: 1, CPUs: "4-7,12-15", Distance: "21 10", MemTotalKiB: gib16},
		},
	})
}

// NPS4 is one socket split into four NUMA nodes (AMD NPS4) of four SMT2
// cores each: cpu n and n+16 are siblings, 8 GiB per node, distance 12
// between nodes.
func NPS4() Machine {
	return fullLayout(Machine{
		Cores: []Core{
			{CPUs: []int{0, 16}, CoreID: 0},
			{CPUs: []int{1, 17}, CoreID: 1},
			{CPUs: []int{2, 18}, CoreID: 2},
			{CPUs: []int{3, 19}, CoreID: 3},
			{CPUs: []int{4, 20}, CoreID: 4},
			{CPUs: []int{5, 21}, CoreID: 5},
			{CPUs: []int{6, 22}, CoreID: 6},
			{CPUs: []int{7, 23}, CoreID: 7},
			{CPUs: []int{8, 24}, CoreID: 8},
			{CPUs: []int{9, 25}, CoreID: 9},
			{CPUs: []int{10, 26}, CoreID: 10},
			{CPUs: []int{11, 27}, CoreID: 11},
			{CPUs: []int{12, 28}, CoreID: 12},
			{CPUs: []int{13, 29}, CoreID: 13},
			{CPUs: []int{14, 30}, CoreID: 14},
			{CPUs: []int{15, 31}, CoreID: 15},
		},
		Nodes: []Node{
			{ID: 0, CPUs: "0-3,16-19", Distance: "10 12 12 12", MemTotalKiB: gib8},
			{ID: 1, CPUs: "4-7,20-23", Distance: "12 10 12 12", MemTotalKiB: gib8},
			{ID: 2, CPUs: "8-11,24-27", Distance: "12 12 10 12", MemTotalKiB: gib8},
			{ID: 3, CPUs: "12-15,28-31", Distance: "12 12 12 10", MemTotalKiB: gib8},
		},
	})
}

// EPYC256 is two NPS4 sockets of 64 SMT2 cores: 256 CPUs, 8 nodes of 16
// cores. cpu n and n+128 are siblings; cores 0-63 are socket 0. Distance
// is 12 within a socket and 32 across; 64 GiB per node. The kernel is
// recent: core_cpus_list only, no cpuN/online files.
func EPYC256() Machine {
	m := fullLayout(Machine{
		Nodes: []Node{
			{ID: 0, CPUs: "0-15,128-143", Distance: "10 12 12 12 32 32 32 32", MemTotalKiB: gib64},
			{ID: 1, CPUs: "16-31,144-159", Distance: "12 10 12 12 32 32 32 32", MemTotalKiB: gib64},
			{ID: 2, CPUs: "32-47,160-175", Distance: "12 12 10 12 32 32 32 32", MemTotalKiB: gib64},
			{ID: 3, CPUs: "48-63,176-191", Distance: "12 12 12 10 32 32 32 32", MemTotalKiB: gib64},
			{ID: 4, CPUs: "64-79,192-207", Distance: "32 32 32 32 10 12 12 12", MemTotalKiB: gib64},
			{ID: 5, CPUs: "80-95,208-223", Distance: "32 32 32 32 12 10 12 12", MemTotalKiB: gib64},
			{ID: 6, CPUs: "96-111,224-239", Distance: "32 32 32 32 12 12 10 12", MemTotalKiB: gib64},
			{ID: 7, CPUs: "112-127,240-255", Distance: "32 32 32 32 12 12 12 10", MemTotalKiB: gib64},
		},
	})
	for core := range 128 {
		m.Cores = append(m.Cores, Core{CPUs: []int{core, core + 128}, Package: core / 64, CoreID: core % 64})
	}
	m.SiblingFiles = []string{CoreCPUsList}
	m.PerCPUOnline = false
	return m
}

// Offline is one socket with two NUMA nodes of four SMT2 cores (cpu n and
// n+8 are siblings) after cpu3, cpu6 and cpu14 went offline: core 6 is gone
// entirely and core 3 keeps only cpu11. cpu2 and cpu10 are isolated. 4 GiB
// per node, distance 11.
func Offline() Machine {
	return fullLayout(Machine{
		Cores: []Core{
			{CPUs: []int{0, 8}, CoreID: 0},
			{CPUs: []int{1, 9}, CoreID: 1},
			{CPUs: []int{2, 10}, CoreID: 2},
			{CPUs: []int{11}, CoreID: 3},
			{CPUs: []int{4, 12}, CoreID: 4},
			{CPUs: []int{5, 13}, CoreID: 5},
			{CPUs: []int{7, 15}, CoreID: 7},
		},
		Offline:  []int{3, 6, 14},
		Isolated: []int{2, 10},
		Nodes: []Node{
			{ID: 0, CPUs: "0-2,8-11", Distance: "10 11", MemTotalKiB: gib4},
			{ID: 1, CPUs: "4-5,7,12-13,15", Distance: "11 10", MemTotalKiB: gib4},
		},
	})
}

// Hybrid is an Alder Lake-like part: eight P-cores with SMT whose siblings
// are adjacent ids (cpu0-15, core_id 0, 4, ... 28, capacity 1024, one
// cluster each) and eight E-cores without SMT (cpu16-23, core_id 32-39,
// capacity 589) in two clusters of four. One socket, one node. The
// kernel has thread_siblings_list and cluster_id but no die_id, no
// cpu/online (cpuN/online files only), and node directories with only a
// cpulist.
func Hybrid() Machine {
	return Machine{
		Cores: []Core{
			{CPUs: []int{0, 1}, CoreID: 0, Cluster: 0, Capacity: 1024},
			{CPUs: []int{2, 3}, CoreID: 4, Cluster: 8, Capacity: 1024},
			{CPUs: []int{4, 5}, CoreID: 8, Cluster: 16, Capacity: 1024},
			{CPUs: []int{6, 7}, CoreID: 12, Cluster: 24, Capacity: 1024},
			{CPUs: []int{8, 9}, CoreID: 16, Cluster: 32, Capacity: 1024},
			{CPUs: []int{10, 11}, CoreID: 20, Cluster: 40, Capacity: 1024},
			{CPUs: []int{12, 13}, CoreID: 24, Cluster: 48, Capacity: 1024},
			{CPUs: []int{14, 15}, CoreID: 28, Cluster: 56, Capacity: 1024},
			{CPUs: []int{16}, CoreID: 32, Cluster: 64, Capacity: 589},
			{CPUs: []int{17}, CoreID: 33, Cluster: 64, Capacity: 589},
			{CPUs: []int{18}, CoreID: 34, Cluster: 64, Capacity: 589},
			{CPUs: []int{19}, CoreID: 35, Cluster: 64, Capacity: 589},
			{CPUs: []int{20}, CoreID: 36, Cluster: 72, Capacity: 589},
			{CPUs: []int{21}, CoreID: 37, Cluster: 72, Capacity: 589},
			{CPUs: []int{22}, CoreID: 38, Cluster: 72, Capacity: 589},
			{CPUs: []int{23}, CoreID: 39, Cluster: 72, Capacity: 589},
		},
		SiblingFiles: []string{ThreadSiblingsList},
		ClusterID:    true,
		NoCPUOnline:  true,
		PerCPUOnline: true,
		Nodes:        []Node{{ID: 0, CPUs: "0-23"}},
	}
}

// NoNUMA is a kernel without NUMA support (no devices/system/node) on one
// socket with two SMT2 cores: cpu0,2 and cpu1,3. It has only
// thread_siblings_list, no die_id, no cpu/isolated.
func NoNUMA() Machine {
	return Machine{
		Cores: []Core{
			{CPUs: []int{0, 2}, CoreID: 0},
			{CPUs: []int{1, 3}, CoreID: 1},
		},
		SiblingFiles: []string{ThreadSiblingsList},
	}
}
