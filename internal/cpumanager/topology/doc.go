// Package topology describes the CPU and memory layout of a host: online
// CPUs, their cores, packages and dies, the NUMA nodes they belong to, and
// the CPUs the kernel reports as offline or isolated.
//
// The package has two halves that do not depend on each other's I/O:
//
//   - The data model ([Topology], [CPUInfo], [NUMANode]) is plain data with
//     query methods. It does no I/O and is safe for concurrent readers once
//     built. Tests build it as struct literals or with [FromSpec].
//   - Discovery ([Discover], [DiscoverFS]) reads a sysfs tree whose root is
//     passed in, so tests run against synthetic trees (package topologytest)
//     and real captures (testdata/*.tar.gz, made by testdata/capture.sh),
//     never against the host. Parse helpers ([ParseCPUList],
//     [ParseDistances], [ParseMemTotal]) take a string or an io.Reader,
//     never a path.
//
// Use this package to answer "which CPUs are where". Do not use it to decide
// which CPUs a workload gets: that is internal/cpumanager/policy, whose
// allocator takes a Topology and an available set. Nothing here tracks
// allocations or watches for hotplug; rediscover when the host changes.
package topology
