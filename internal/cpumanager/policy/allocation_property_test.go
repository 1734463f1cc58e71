package policy

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

// randomTopology builds a regular machine from r, then takes a random few
// CPUs offline so cores and nodes come out ragged.
func randomTopology(t testing.TB, r *rand.Rand) *topology.Topology {
	t.Helper()
	topo, err := topology.FromSpec(topology.Spec{
		Packages:        1 + r.IntN(2),
		NodesPerPackage: 1 + r.IntN(4),
		CoresPerNode:    1 + r.IntN(6),
		ThreadsPerCore:  1 + r.IntN(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	offline := r.IntN(4)
	for _, cpu := range topo.AllCPUs().List() {
		if len(topo.CPUs) > 1 && offline > 0 && r.IntN(8) == 0 {
			offline--
			n := topo.CPUs[cpu].NUMANode
			delete(topo.CPUs, cpu)
			node := topo.NUMANodes[n]
			node.CPUs = node.CPUs.Difference(cpuset.New(cpu))
			topo.NUMANodes[n] = node
		}
	}
	return topo
}

// randomSubset keeps each CPU of s with probability p, and adds a stray
// CPU id the topology does not know.
func randomSubset(r *rand.Rand, s cpuset.CPUSet, p float64) cpuset.CPUSet {
	keep := []int{1000 + r.IntN(10)}
	for _, cpu := range s.List() {
		if r.Float64() < p {
			keep = append(keep, cpu)
		}
	}
	return cpuset.New(keep...)
}

// checkTake runs one request and checks the properties every answer must
// have, whatever the topology.
func checkTake(t *testing.T, topo *topology.Topology, avail cpuset.CPUSet, n int) {
	t.Helper()
	a, err := newAllocator(topo)
	if err != nil {
		t.Fatal(err)
	}
	usable := avail.Intersection(topo.AllCPUs())
	got, err := a.take(avail, n)
	if n > usable.Size() {
		if !errors.Is(err, ErrInsufficient) {
			t.Fatalf("n=%d of %s: got %q, %v; want ErrInsufficient", n, usable, got.String(), err)
		}
		return
	}
	if err != nil {
		t.Fatalf("n=%d of %s: %v", n, usable, err)
	}
	if !got.IsSubsetOf(usable) {
		t.Fatalf("n=%d: result %s not within available %s", n, got, usable)
	}
	if got.Size() != max(n, 0) {
		t.Fatalf("n=%d: got %d CPUs (%s)", n, got.Size(), got)
	}
	if n <= 0 {
		return
	}

	// The fewest nodes: the smallest k whose k freest nodes hold n.
	var frees []int
	fits := map[int]int{} // single nodes that can hold n -> their free count
	for _, id := range topo.NUMANodeIDs() {
		f := topo.NUMANodes[id].CPUs.Intersection(usable).Size()
		frees = append(frees, f)
		if f >= n {
			fits[id] = f
		}
	}
	slices.Sort(frees)
	slices.Reverse(frees)
	minNodes, sum := 0, 0
	for sum < n {
		sum += frees[minNodes]
		minNodes++
	}
	nodes := topo.NUMANodesOf(got)
	if len(nodes) != minNodes {
		t.Fatalf("n=%d: used nodes %v, but %d would do (available %s)", n, nodes, minNodes, usable)
	}
	// Best fit when a single node suffices: no fitting node has fewer free CPUs.
	if len(fits) > 0 {
		for id, f := range fits {
			if f < fits[nodes[0]] {
				t.Fatalf("n=%d: chose node %d with %d free, node %d fits with %d", n, nodes[0], fits[nodes[0]], id, f)
			}
		}
	}
	// Best fit in general: no set of minNodes nodes leaves fewer CPUs behind.
	left := topo.CPUsInNUMANodes(nodes...).Intersection(usable).Size() - n
	if best := bestLeftover(topo, usable, n, minNodes); left != best {
		t.Fatalf("n=%d: nodes %v leave %d free CPUs behind, the best set of %d leaves %d (available %s)", n, nodes, left, minNodes, best, usable)
	}
	// Whole cores before threads: the request breaks at most one core that
	// was entirely available, and only once no thread of a partly used
	// core was left in the chosen nodes.
	broken := 0
	lonely := false
	for _, cpu := range topo.CPUsInNUMANodes(nodes...).Intersection(usable).List() {
		sib := topo.CoreSiblings(cpu)
		if cpu == sib.List()[0] && sib.IsSubsetOf(usable) && !sib.Intersection(got).IsEmpty() && !sib.IsSubsetOf(got) {
			broken++
		}
		if !sib.IsSubsetOf(usable) && !got.Contains(cpu) {
			lonely = true
		}
	}
	if broken > 1 || (broken == 1 && lonely) {
		t.Fatalf("n=%d: %s broke %d whole cores (threads of partly used cores left: %v), available %s", n, got, broken, lonely, usable)
	}
	// Deterministic.
	again, err := a.take(avail, n)
	if err != nil || !again.Equals(got) {
		t.Fatalf("second Take = %q, %v; first %q", again.String(), err, got.String())
	}
}

// bestLeftover tries every set of k nodes and returns the fewest free CPUs
// one can leave behind while holding n.
func bestLeftover(topo *topology.Topology, usable cpuset.CPUSet, n, k int) int {
	ids := topo.NUMANodeIDs()
	best := -1
	var walk func(start, depth, sum int)
	walk = func(start, depth, sum int) {
		if depth == k {
			if sum >= n && (best < 0 || sum-n < best) {
				best = sum - n
			}
			return
		}
		for i := start; i < len(ids); i++ {
			walk(i+1, depth+1, sum+topo.NUMANodes[ids[i]].CPUs.Intersection(usable).Size())
		}
	}
	walk(0, 0, 0)
	return best
}

func TestTakeProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	for range iterations {
		topo := randomTopology(t, r)
		avail := randomSubset(r, topo.AllCPUs(), r.Float64())
		n := r.IntN(avail.Size()+2) - 1
		checkTake(t, topo, avail, n)
	}
}

func FuzzTake(f *testing.F) {
	f.Add(uint64(1), uint64(2), 4)
	f.Add(uint64(7), uint64(0), 0)
	f.Add(uint64(99), uint64(5), 17)
	f.Fuzz(func(t *testing.T, seed1, seed2 uint64, n int) {
		r := rand.New(rand.NewPCG(seed1, seed2))
		topo := randomTopology(t, r)
		avail := randomSubset(r, topo.AllCPUs(), r.Float64())
		checkTake(t, topo, avail, n%300)
	})
}

// TestTakeManyNodes exercises the greedy node choice, used when there are
// too many node sets to try them all.
func TestTakeManyNodes(t *testing.T) {
	topo, err := topology.FromSpec(topology.Spec{Packages: 2, NodesPerPackage: 16, CoresPerNode: 2, ThreadsPerCore: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAllocator(topo)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		usable := randomSubset(r, topo.AllCPUs(), 0.3+0.7*r.Float64()).Intersection(topo.AllCPUs())
		n := 1 + r.IntN(usable.Size())
		got, err := a.take(usable, n)
		if err != nil || got.Size() != n || !got.IsSubsetOf(usable) {
			t.Fatalf("n=%d of %s: %s, %v", n, usable, got, err)
		}
		var frees []int
		for _, id := range topo.NUMANodeIDs() {
			frees = append(frees, topo.NUMANodes[id].CPUs.Intersection(usable).Size())
		}
		slices.Sort(frees)
		slices.Reverse(frees)
		k, sum := 0, 0
		for sum < n {
			sum += frees[k]
			k++
		}
		if used := len(topo.NUMANodesOf(got)); used != k {
			t.Fatalf("n=%d: %d nodes used, %d would do", n, used, k)
		}
	}
}
