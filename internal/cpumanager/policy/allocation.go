package policy

import (
	"cmp"
	"fmt"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

// allocator answers take requests for one topology. It is immutable after
// newAllocator and safe for concurrent use.
type allocator struct {
	cpuIDs  []int   // dense cpu index -> cpu id, ascending
	index   []int32 // cpu id -> dense cpu index, -1 if not online
	nodeIDs []int   // dense node index -> node id, ascending
	// nodeMask holds each node's CPUs.
	nodeMask []bitset
	nodeSize []int
	// nodeCores lists each node's cores, ordered by their lowest CPU id.
	nodeCores [][]int
	// coreCPUs lists each core's threads as dense cpu indexes, ascending.
	coreCPUs [][]int
	// dist is the node-to-node distance, by dense node index.
	dist       [][]int
	maxThreads int
}

// newAllocator indexes t for fast allocation. Only t.CPUs and the node distances
// are used: nodes and cores come from each CPUInfo's NUMANode and
// (Package, Core).
func newAllocator(t *topology.Topology) (*allocator, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil topology", topology.ErrMalformed)
	}
	ids := make([]int, 0, len(t.CPUs))
	maxID := -1
	for id, info := range t.CPUs {
		if id < 0 || id > topology.MaxCPUID || info.ID != id {
			return nil, fmt.Errorf("%w: cpu key %d holds id %d", topology.ErrMalformed, id, info.ID)
		}
		ids = append(ids, id)
		maxID = max(maxID, id)
	}
	slices.Sort(ids)

	a := &allocator{cpuIDs: ids, index: make([]int32, maxID+1)}
	for i := range a.index {
		a.index[i] = -1
	}
	nodeIdx := map[int]int{}
	for _, id := range ids {
		n := t.CPUs[id].NUMANode
		if _, ok := nodeIdx[n]; !ok {
			nodeIdx[n] = 0
			a.nodeIDs = append(a.nodeIDs, n)
		}
	}
	slices.Sort(a.nodeIDs)
	for i, n := range a.nodeIDs {
		nodeIdx[n] = i
	}
	a.nodeMask = make([]bitset, len(a.nodeIDs))
	for i := range a.nodeMask {
		a.nodeMask[i] = newBitset(len(ids))
	}
	a.nodeSize = make([]int, len(a.nodeIDs))
	a.nodeCores = make([][]int, len(a.nodeIDs))

	type coreKey struct{ pkg, node, core int }
	coreIdx := map[coreKey]int{}
	for i, id := range ids {
		info := t.CPUs[id]
		a.index[id] = int32(i)
		n := nodeIdx[info.NUMANode]
		a.nodeMask[n].set(i)
		a.nodeSize[n]++
		k := coreKey{info.Package, info.NUMANode, info.Core}
		c, ok := coreIdx[k]
		if !ok { // ids ascend, so cores are numbered by their lowest cpu
			c = len(a.coreCPUs)
			coreIdx[k] = c
			a.coreCPUs = append(a.coreCPUs, nil)
			a.nodeCores[n] = append(a.nodeCores[n], c)
		}
		a.coreCPUs[c] = append(a.coreCPUs[c], i)
		a.maxThreads = max(a.maxThreads, len(a.coreCPUs[c]))
	}
	a.dist = make([][]int, len(a.nodeIDs))
	for i, from := range a.nodeIDs {
		a.dist[i] = make([]int, len(a.nodeIDs))
		for j, to := range a.nodeIDs {
			a.dist[i][j] = t.Distance(from, to)
		}
	}
	return a, nil
}

// takeCPUs picks n CPUs out of available: use the fewest NUMA nodes, and best fit
// among candidates; whole NUMA nodes first, then whole cores before single
// threads. It builds an allocator on each call; reuse an allocator (newAllocator) on
// hot paths.
func takeCPUs(t *topology.Topology, available cpuset.CPUSet, n int) (cpuset.CPUSet, error) {
	if n <= 0 {
		return cpuset.New(), nil
	}
	a, err := newAllocator(t)
	if err != nil {
		return cpuset.New(), err
	}
	return a.take(available, n)
}

// take picks n CPUs out of available. CPUs in available that are not
// online in the topology are ignored. n <= 0 yields an empty set. The
// result is a function of its inputs only: the same topology, available
// set and n always give the same CPUs.
//
// The algorithm, an accumulator that only ever adds CPUs:
//
//  1. Restrict available to online CPUs. If fewer than n remain, fail with
//     ErrInsufficient, naming n and what was available.
//  2. Choose the NUMA nodes. k is the smallest number of nodes whose free
//     CPUs add up to n. Among the sets of k nodes that do, prefer the best
//     fit (fewest free CPUs left behind in the set), then the most compact
//     set (smallest sum of pairwise distances), then the set that can serve
//     more of n from entirely free cores, then the lowest node ids.
//     With more than 16384 candidate sets (beyond ~16 nodes) it is greedy:
//     the k-1 nodes with the most free CPUs, plus the best-fitting last one.
//  3. Take every node of the set that is entirely free and fits in what is
//     still needed, whole.
//  4. Order the remaining nodes of the set by free CPUs, fewest first, so
//     partly used nodes are drained and the leftover stays together in the
//     node with the most free CPUs.
//  5. In that order, take whole free cores (all threads available) that
//     fit in what is still needed, lowest core first.
//  6. Take single threads, from the cores with the fewest free threads
//     first, so partly used cores are finished before a whole core is
//     broken; ties go by node order, then lowest CPU id.
//
// Every CPU taken lies in the chosen set, whose free CPUs number at least n,
// so steps 3 to 6 always reach n.
func (a *allocator) take(available cpuset.CPUSet, n int) (cpuset.CPUSet, error) {
	if n <= 0 {
		return cpuset.New(), nil
	}
	// Step 1.
	avail := newBitset(len(a.cpuIDs))
	a.markOnline(avail, available)
	total := avail.count()
	if total < n {
		return cpuset.New(), fmt.Errorf("%w: need %d CPUs, %d available (%s)", ErrInsufficient, n, total, a.toCPUSet(avail, total))
	}
	if total == n && total == available.Size() {
		// Everything goes; CPUSets are immutable, so skip rebuilding one.
		return available, nil
	}
	// The helpers fill what take allocates, so that small sets stay on
	// the stack.
	free := make([]int, 2*len(a.nodeIDs))
	free, wholeFree := free[:len(a.nodeIDs)], free[len(a.nodeIDs):]
	a.countFree(avail, free, wholeFree)

	// Step 2.
	chosen := a.chooseNodes(free, wholeFree, n)

	acc := &accumulator{a: a, avail: avail, picked: newBitset(len(a.cpuIDs)), need: n}
	// Step 3.
	rest := acc.takeWholeNodes(chosen, free)
	// Step 4.
	slices.SortStableFunc(rest, func(x, y int) int { return cmp.Compare(free[x], free[y]) })
	// Step 5.
	acc.takeWholeCores(rest)
	// Step 6.
	acc.takeThreads(rest)

	if acc.need != 0 { // unreachable, see the last paragraph above
		return cpuset.New(), fmt.Errorf("cpu allocation: internal error: %d of %d CPUs left unassigned from %s", acc.need, n, a.toCPUSet(avail, total))
	}
	return a.toCPUSet(acc.picked, n), nil
}

// markOnline is step 1: it sets in avail the dense indexes of the CPUs of
// available that are online.
func (a *allocator) markOnline(avail bitset, available cpuset.CPUSet) {
	for _, id := range available.UnsortedList() {
		if id >= 0 && id < len(a.index) && a.index[id] >= 0 {
			avail.set(int(a.index[id]))
		}
	}
}

// countFree counts each node's available CPUs into free, and those in
// cores whose threads are all available into wholeFree.
func (a *allocator) countFree(avail bitset, free, wholeFree []int) {
	for node, m := range a.nodeMask {
		free[node] = m.countAnd(avail)
		if free[node] == a.nodeSize[node] {
			wholeFree[node] = free[node]
			continue
		}
		for _, core := range a.nodeCores[node] {
			if a.coreFree(core, avail) {
				wholeFree[node] += len(a.coreCPUs[core])
			}
		}
	}
}

// accumulator collects the CPUs of one take, steps 3 to 6: it only ever
// adds CPUs, until need reaches 0.
type accumulator struct {
	a      *allocator
	avail  bitset // the online available CPUs
	picked bitset // the CPUs taken so far
	need   int    // how many are still to take
}

func (acc *accumulator) pick(i int) {
	acc.picked.set(i)
	acc.need--
}

// takeWholeNodes is step 3: it takes every node of chosen that is entirely
// free and fits in what is still needed, and returns the other nodes, in
// chosen's backing array.
func (acc *accumulator) takeWholeNodes(chosen, free []int) (rest []int) {
	a := acc.a
	rest = chosen[:0]
	for _, node := range chosen {
		if free[node] == a.nodeSize[node] && free[node] <= acc.need {
			acc.avail.each(func(i int) {
				if a.nodeMask[node].has(i) {
					acc.pick(i)
				}
			})
			continue
		}
		rest = append(rest, node)
	}
	return rest
}

// takeWholeCores is step 5: in the order of nodes, it takes whole free
// cores that fit in what is still needed, lowest core first.
func (acc *accumulator) takeWholeCores(nodes []int) {
	a := acc.a
	for _, node := range nodes {
		for _, core := range a.nodeCores[node] {
			threads := a.coreCPUs[core]
			if acc.need < len(threads) || !a.coreFree(core, acc.avail) {
				continue
			}
			for _, i := range threads {
				acc.pick(i)
			}
		}
	}
}

// takeThreads is step 6: single threads, from the cores with the fewest
// threads left first; ties go by the order of nodes, then lowest CPU id.
func (acc *accumulator) takeThreads(nodes []int) {
	a := acc.a
	for want := 1; want <= a.maxThreads && acc.need > 0; want++ {
		for _, node := range nodes {
			for _, core := range a.nodeCores[node] {
				if acc.need == 0 {
					break
				}
				if acc.left(core) == want {
					acc.takeLeft(core)
				}
			}
		}
	}
}

// left counts the threads of core still available and not taken.
func (acc *accumulator) left(core int) int {
	n := 0
	for _, i := range acc.a.coreCPUs[core] {
		if acc.avail.has(i) && !acc.picked.has(i) {
			n++
		}
	}
	return n
}

// takeLeft takes the threads of core still available, as long as some
// are needed.
func (acc *accumulator) takeLeft(core int) {
	for _, i := range acc.a.coreCPUs[core] {
		if acc.need > 0 && acc.avail.has(i) && !acc.picked.has(i) {
			acc.pick(i)
		}
	}
}

// coreFree reports whether every thread of core is in avail.
func (a *allocator) coreFree(core int, avail bitset) bool {
	for _, i := range a.coreCPUs[core] {
		if !avail.has(i) {
			return false
		}
	}
	return true
}

func (a *allocator) toCPUSet(b bitset, size int) cpuset.CPUSet {
	ids := make([]int, 0, size)
	b.each(func(i int) { ids = append(ids, a.cpuIDs[i]) })
	return cpuset.New(ids...)
}
