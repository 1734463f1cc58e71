package policy

import (
	"cmp"
	"slices"
)

// maxCombinations bounds the exhaustive search over NUMA node sets. Up to
// 16 nodes every set size stays below it; beyond, step 2 turns greedy.
const maxCombinations = 1 << 14

// chooseNodes implements step 2 of allocator.take (allocation.go), the
// choice of NUMA nodes, and returns dense node indexes, ascending.
func (a *allocator) chooseNodes(free, wholeFree []int, n int) []int {
	var cands []int // nodes with something free, ascending id
	for i, f := range free {
		if f > 0 {
			cands = append(cands, i)
		}
	}
	byFree := slices.Clone(cands)
	slices.SortStableFunc(byFree, func(x, y int) int { return cmp.Compare(free[y], free[x]) })
	k, sum := 0, 0
	for sum < n {
		sum += free[byFree[k]]
		k++
	}
	switch {
	case k == 1:
		return []int{bestNode(cands, free, wholeFree, n)}
	case binomialAtMost(len(cands), k, maxCombinations):
		return a.bestNodeSet(cands, free, wholeFree, n, k)
	}
	return greedyNodes(byFree, free, n, k)
}

// bestNode is step 2 when one node can serve n: the best fit, then the one
// that can serve more of n from whole free cores, then the lowest id.
func bestNode(cands, free, wholeFree []int, n int) int {
	best := -1
	for _, c := range cands {
		if free[c] < n {
			continue
		}
		if best < 0 || free[c] < free[best] ||
			(free[c] == free[best] && splitCPUs(n, wholeFree[c]) < splitCPUs(n, wholeFree[best])) {
			best = c
		}
	}
	return best
}

// splitCPUs counts the CPUs of n that can not come from the whole free
// cores of a node set.
func splitCPUs(n, wholeFree int) int { return max(0, n-wholeFree) }

// nodeSetScore ranks a set of nodes for step 2: less is better, in this
// order.
type nodeSetScore struct {
	left  int // free CPUs left behind in the set
	dist  int // sum of pairwise distances
	split int // CPUs that can not come from whole free cores
}

func (s nodeSetScore) better(o nodeSetScore) bool {
	if s.left != o.left {
		return s.left < o.left
	}
	if s.dist != o.dist {
		return s.dist < o.dist
	}
	return s.split < o.split
}

// bestNodeSet is step 2 by exhaustive search over the sets of k
// candidates.
func (a *allocator) bestNodeSet(cands, free, wholeFree []int, n, k int) []int {
	best := make([]int, k)
	found := false
	var bestScore nodeSetScore
	idx := make([]int, k) // positions into cands, strictly increasing
	for i := range idx {
		idx[i] = i
	}
	for {
		s, w := 0, 0
		for _, p := range idx {
			s += free[cands[p]]
			w += wholeFree[cands[p]]
		}
		// Combinations come in lexicographic order, so the first of equals
		// already has the lowest ids: replace only on strictly better. The
		// distance is summed only for a set that fits at least as well.
		if left := s - n; left >= 0 && (!found || left <= bestScore.left) {
			score := nodeSetScore{left: left, dist: a.setDistance(cands, idx), split: splitCPUs(n, w)}
			if !found || score.better(bestScore) {
				found, bestScore = true, score
				for x, p := range idx {
					best[x] = cands[p]
				}
			}
		}
		if !nextCombination(idx, len(cands)) {
			return best
		}
	}
}

// setDistance sums the pairwise distances of the nodes cands[idx[...]].
func (a *allocator) setDistance(cands, idx []int) int {
	d := 0
	for x := range idx {
		for y := x + 1; y < len(idx); y++ {
			d += a.dist[cands[idx[x]]][cands[idx[y]]]
		}
	}
	return d
}

// nextCombination advances idx, strictly increasing positions into m
// items, to the next combination in lexicographic order; false after the
// last.
func nextCombination(idx []int, m int) bool {
	k := len(idx)
	x := k - 1
	for x >= 0 && idx[x] == m-k+x {
		x--
	}
	if x < 0 {
		return false
	}
	idx[x]++
	for y := x + 1; y < k; y++ {
		idx[y] = idx[y-1] + 1
	}
	return true
}

// greedyNodes is step 2 beyond maxCombinations: the k-1 nodes with the most
// free CPUs, then the smallest that completes the sum.
func greedyNodes(byFree, free []int, n, k int) []int {
	chosen := slices.Clone(byFree[:k-1])
	have := 0
	for _, c := range chosen {
		have += free[c]
	}
	last := -1
	for _, c := range byFree[k-1:] {
		if have+free[c] >= n && (last < 0 || free[c] < free[last]) {
			last = c
		}
	}
	chosen = append(chosen, last)
	slices.Sort(chosen)
	return chosen
}

// binomialAtMost reports whether C(n, k) <= limit without overflowing.
func binomialAtMost(n, k, limit int) bool {
	k = min(k, n-k)
	c := 1
	for i := 1; i <= k; i++ {
		c = c * (n - k + i) / i // exact: c is C(n-k+i, i) after the step
		if c > limit {
			return false
		}
	}
	return true
}
