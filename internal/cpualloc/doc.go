// Package cpualloc decides which CPUs a request gets: given a topology, the
// CPUs still free and a count, [Allocator.Take] returns a NUMA-aligned,
// core-aligned set.
//
// Use it for every exclusive carve-out: a pod's bubble out of the node pool,
// a container's slice out of its pod's shared pool. It holds no state
// between calls and knows nothing of pods, reserved CPUs or isolated CPUs:
// the caller subtracts those from the available set first, and records what
// it was given.
//
// Build one [Allocator] per discovered topology and reuse it; the free
// function [Take] builds a throw-away Allocator on every call and is meant
// for tests and one-off use.
package cpualloc
