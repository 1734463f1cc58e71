// Package oracle compares cgdelegate's CPU pinning with the kubelet's own
// pod-level resource managers, the reference it imitates.
//
// The VM scenario KubeletPinningOracle runs the same pod manifests twice:
// once with the kubelet's static CPU manager, static memory manager and
// topology manager in pod scope (PodLevelResourceManagers on) and
// cgdelegate's pinning off, once with the kubelet's CPU manager at none and
// cgdelegate pinning. For each manifest it records an Observation per pass:
// whether the pod was admitted (or why not) and, for each container, what
// it sees in its own cgroup (cpuset.cpus.effective, cpuset.mems.effective,
// cpu.max).
//
// Exact CPU numbers may differ between the two; what must not is the
// shape. Normalise turns an Observation into a Shape (per container: the
// class exclusive, pod-shared or node-shared, the number of CPUs, the NUMA
// nodes they span, whether the memory nodes are those of the CPUs, the CFS
// quota; per pod: the bubble's size and NUMA nodes, or the rejection's
// kind), and Compare lists every Difference by name. Explain splits them
// into those an Allowance (a documented, deliberate difference) covers and
// the rest, which fail the scenario.
//
// The package is pure (no host access, no build tag), so its tests run with
// the ordinary `go test`. Use it only for this comparison; it is not a
// model of either allocator.
package oracle
