package topology

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/utils/cpuset"
)

// Paths below are relative to the sysfs root.
const (
	cpuDir  = "devices/system/cpu"
	nodeDir = "devices/system/node"
)

// maxFileSize bounds every sysfs read; the largest file discovery reads is a
// node's meminfo, a few KiB.
const maxFileSize = 1 << 20

// Discover reads the topology from the sysfs tree mounted at sysfsRoot
// ("/sys" on a host, a temporary directory in tests).
//
// Required: devices/system/cpu/online (or, failing that, the cpuN
// directories), and for each online CPU its topology/physical_package_id and
// topology/core_id; for each listed NUMA node its cpulist. Everything else
// is optional and defaults sensibly: die_id (0), cluster_id (-1),
// cpu_capacity (0), core_cpus_list/thread_siblings_list (grouped by
// package, die and core_id), node distance (10 to itself, 20 otherwise),
// node meminfo (0 bytes), offline and isolated lists (empty). Without a
// devices/system/node directory all CPUs form NUMA node 0.
//
// Errors wrap ErrMissing or ErrMalformed and name the file; parse failures
// are *ParseError values carrying the raw content.
func Discover(sysfsRoot string) (*Topology, error) {
	if sysfsRoot == "" {
		return nil, fmt.Errorf("%w: empty sysfs root", ErrMissing)
	}
	return discover(sysfs{fsys: os.DirFS(sysfsRoot), root: sysfsRoot})
}

// DiscoverFS is Discover over an fs.FS rooted where /sys would be, such as
// an fstest.MapFS. Error paths are relative to that root.
func DiscoverFS(fsys fs.FS) (*Topology, error) {
	return discover(sysfs{fsys: fsys})
}

// sysfs reads files below an injected root. root is used only to name files
// in errors.
type sysfs struct {
	fsys fs.FS
	root string
}

func (s sysfs) display(name string) string {
	if s.root == "" {
		return name
	}
	return filepath.Join(s.root, filepath.FromSlash(name))
}

// read returns the content of a required file.
func (s sysfs) read(name string) (string, error) {
	data, ok, err := s.readOptional(name)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%w: %s: %w", ErrMissing, s.display(name), fs.ErrNotExist)
	}
	return data, nil
}

// readOptional returns ok=false, and no error, when name does not exist.
func (s sysfs) readOptional(name string) (data string, ok bool, err error) {
	f, err := s.fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("%w: %s: %w", ErrMissing, s.display(name), err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return "", false, fmt.Errorf("%w: reading %s: %w", ErrMissing, s.display(name), err)
	}
	if len(b) > maxFileSize {
		return "", false, &ParseError{Path: s.display(name), Value: shorten(string(b)), Err: fmt.Errorf("%w: file larger than %d bytes", ErrMalformed, maxFileSize)}
	}
	return string(b), true, nil
}

// cpuList reads a CPU-list file; ok=false when optional and absent.
func (s sysfs) cpuList(name string, required bool) (set cpuset.CPUSet, ok bool, err error) {
	var data string
	if required {
		data, err = s.read(name)
		ok = err == nil
	} else {
		data, ok, err = s.readOptional(name)
	}
	if err != nil || !ok {
		return cpuset.New(), ok, err
	}
	set, err = ParseCPUList(data)
	if err != nil {
		return cpuset.New(), false, &ParseError{Path: s.display(name), Value: shorten(strings.TrimSpace(data)), Err: err}
	}
	return set, true, nil
}

// intFile reads a single-integer file; def is returned when optional and
// absent.
func (s sysfs) intFile(name string, required bool, def int) (int, error) {
	var (
		data string
		ok   bool
		err  error
	)
	if required {
		data, err = s.read(name)
		ok = err == nil
	} else {
		data, ok, err = s.readOptional(name)
	}
	if err != nil {
		return 0, err
	}
	if !ok {
		return def, nil
	}
	v, err := parseInt(data)
	if err != nil {
		return 0, &ParseError{Path: s.display(name), Value: shorten(strings.TrimSpace(data)), Err: err}
	}
	return v, nil
}

func discover(s sysfs) (*Topology, error) {
	online, offline, err := s.onlineCPUs()
	if err != nil {
		return nil, err
	}
	isolated, _, err := s.cpuList(cpuDir+"/isolated", false)
	if err != nil {
		return nil, err
	}
	cpus, err := s.cpuInfos(online)
	if err != nil {
		return nil, err
	}
	nodes, err := s.numaNodes(online, cpus)
	if err != nil {
		return nil, err
	}
	t := &Topology{CPUs: cpus, NUMANodes: nodes, Offline: offline, Isolated: isolated}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("inconsistent topology under %s: %w", s.display(cpuDir), err)
	}
	return t, nil
}

// onlineCPUs reads cpu/online and cpu/offline. Without cpu/online it scans
// the cpuN directories: a CPU without an online file (cpu0 on most x86
// kernels) is online.
func (s sysfs) onlineCPUs() (online, offline cpuset.CPUSet, err error) {
	online, haveOnline, err := s.cpuList(cpuDir+"/online", false)
	if err != nil {
		return online, offline, err
	}
	offline, haveOffline, err := s.cpuList(cpuDir+"/offline", false)
	if err != nil {
		return online, offline, err
	}
	if !haveOnline {
		var on, off []int
		entries, err := fs.ReadDir(s.fsys, cpuDir)
		if err != nil {
			return online, offline, fmt.Errorf("%w: no %s and cannot list cpu directories: %w", ErrMissing, s.display(cpuDir+"/online"), err)
		}
		for _, e := range entries {
			id, ok := numberedDir(e.Name(), "cpu")
			if !ok {
				continue
			}
			v, err := s.intFile(fmt.Sprintf("%s/cpu%d/online", cpuDir, id), false, 1)
			if err != nil {
				return online, offline, err
			}
			if v == 0 {
				off = append(off, id)
			} else {
				on = append(on, id)
			}
		}
		online = cpuset.New(on...)
		if !haveOffline {
			offline = cpuset.New(off...)
		}
	}
	if online.IsEmpty() {
		return online, offline, &ParseError{Path: s.display(cpuDir + "/online"), Value: online.String(), Err: fmt.Errorf("%w: no online CPUs", ErrMalformed)}
	}
	return online, offline, nil
}

// numberedDir reports whether name is prefix followed by a decimal id.
func numberedDir(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	id, err := parseID(rest)
	return id, err == nil
}

// cpuInfos reads the topology directory of each online CPU. NUMANode is
// filled in later by numaNodes.
func (s sysfs) cpuInfos(online cpuset.CPUSet) (map[int]CPUInfo, error) {
	type coreKey struct{ pkg, die, core int }
	cpus := make(map[int]CPUInfo, online.Size())
	siblings := make(map[int]cpuset.CPUSet, online.Size())
	byCoreID := make(map[coreKey]int) // fallback: lowest CPU per (package, die, core_id)
	keys := make(map[int]coreKey, online.Size())
	for _, id := range online.List() {
		dir := fmt.Sprintf("%s/cpu%d/topology/", cpuDir, id)
		pkg, err := s.intFile(dir+"physical_package_id", true, 0)
		if err != nil {
			return nil, err
		}
		coreID, err := s.intFile(dir+"core_id", true, 0)
		if err != nil {
			return nil, err
		}
		die, err := s.intFile(dir+"die_id", false, 0)
		if err != nil {
			return nil, err
		}
		cluster, err := s.intFile(dir+"cluster_id", false, -1)
		if err != nil {
			return nil, err
		}
		capacity, err := s.intFile(fmt.Sprintf("%s/cpu%d/cpu_capacity", cpuDir, id), false, 0)
		if err != nil {
			return nil, err
		}
		// Some firmware reports -1 for "unknown"; such CPUs share package
		// or die 0.
		pkg, die = max(pkg, 0), max(die, 0)

		// core_cpus_list (Linux 5.7+) supersedes thread_siblings_list.
		sib, ok, err := s.cpuList(dir+"core_cpus_list", false)
		if err == nil && !ok {
			sib, ok, err = s.cpuList(dir+"thread_siblings_list", false)
		}
		if err != nil {
			return nil, err
		}
		if ok {
			siblings[id] = sib.Intersection(online).Union(cpuset.New(id))
		}
		k := coreKey{pkg, die, coreID}
		keys[id] = k
		if _, seen := byCoreID[k]; !seen { // ids ascend, so the first is the lowest
			byCoreID[k] = id
		}
		cpus[id] = CPUInfo{ID: id, Package: pkg, Die: die, Cluster: cluster, Capacity: capacity}
	}
	for id, info := range cpus {
		if sib, ok := siblings[id]; ok {
			info.Core = sib.List()[0]
		} else {
			info.Core = byCoreID[keys[id]]
		}
		cpus[id] = info
	}
	return cpus, nil
}

// numaNodes reads the node directory and assigns each CPU its node.
func (s sysfs) numaNodes(online cpuset.CPUSet, cpus map[int]CPUInfo) (map[int]NUMANode, error) {
	ids, err := s.nodeIDs()
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		// No NUMA support compiled in (or no node directory at all): one
		// node holds everything.
		for id, info := range cpus {
			info.NUMANode = 0
			cpus[id] = info
		}
		return map[int]NUMANode{0: {ID: 0, CPUs: online, Distances: map[int]int{0: 10}}}, nil
	}
	nodes := make(map[int]NUMANode, len(ids))
	owner := make(map[int]int, online.Size())
	for _, nid := range ids {
		dir := fmt.Sprintf("%s/node%d/", nodeDir, nid)
		list, _, err := s.cpuList(dir+"cpulist", true)
		if err != nil {
			return nil, err
		}
		list = list.Intersection(online)
		for _, cpu := range list.List() {
			if prev, dup := owner[cpu]; dup {
				return nil, fmt.Errorf("%w: cpu %d is listed by both %s and %s", ErrMalformed, cpu,
					s.display(fmt.Sprintf("%s/node%d/cpulist", nodeDir, prev)), s.display(dir+"cpulist"))
			}
			owner[cpu] = nid
		}
		dist, err := s.distances(dir+"distance", nid, ids)
		if err != nil {
			return nil, err
		}
		var mem uint64
		if data, ok, err := s.readOptional(dir + "meminfo"); err != nil {
			return nil, err
		} else if ok {
			if mem, err = ParseMemTotal(strings.NewReader(data)); err != nil {
				return nil, &ParseError{Path: s.display(dir + "meminfo"), Value: shorten(strings.TrimSpace(data)), Err: err}
			}
		}
		nodes[nid] = NUMANode{ID: nid, CPUs: list, MemoryBytes: mem, Distances: dist}
	}
	for _, cpu := range online.List() {
		nid, ok := owner[cpu]
		if !ok {
			return nil, fmt.Errorf("%w: online cpu %d is in no node cpulist under %s", ErrMalformed, cpu, s.display(nodeDir))
		}
		info := cpus[cpu]
		info.NUMANode = nid
		cpus[cpu] = info
	}
	return nodes, nil
}

// nodeIDs returns the online nodes from node/online or, failing that, the
// nodeN directories. None at all means "no NUMA information".
func (s sysfs) nodeIDs() ([]int, error) {
	set, ok, err := s.cpuList(nodeDir+"/online", false)
	if err != nil {
		return nil, err
	}
	if ok {
		if set.IsEmpty() {
			return nil, &ParseError{Path: s.display(nodeDir + "/online"), Err: fmt.Errorf("%w: no online nodes", ErrMalformed)}
		}
		return set.List(), nil
	}
	entries, err := fs.ReadDir(s.fsys, nodeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: listing %s: %w", ErrMissing, s.display(nodeDir), err)
	}
	var ids []int
	for _, e := range entries {
		if id, ok := numberedDir(e.Name(), "node"); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// distances maps a node's distance row onto node ids: the kernel prints one
// entry per online node, in ascending order. Without the file it assumes
// 10 to itself and 20 to the others.
func (s sysfs) distances(name string, self int, ids []int) (map[int]int, error) {
	out := make(map[int]int, len(ids))
	data, ok, err := s.readOptional(name)
	if err != nil {
		return nil, err
	}
	if !ok {
		for _, id := range ids {
			out[id] = 20
		}
		out[self] = 10
		return out, nil
	}
	row, err := ParseDistances(data)
	if err == nil && len(row) != len(ids) {
		err = fmt.Errorf("%w: %d distances for %d online nodes", ErrMalformed, len(row), len(ids))
	}
	if err != nil {
		return nil, &ParseError{Path: s.display(name), Value: shorten(strings.TrimSpace(data)), Err: err}
	}
	for i, id := range ids {
		out[id] = row[i]
	}
	return out, nil
}
