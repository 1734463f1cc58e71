// Package policy is cgdelegate's CPU allocation state and its rules: which
// CPUs each pod's bubble holds, which exclusive slices are carved from it,
// and what every container's cpuset and memory nodes should be. It also
// holds the topology-aware CPU picker every carve-out goes through
// (allocation.go).
//
// Use it through the Manager in internal/cpumanager, which translates NRI
// events into PodSpecs and ContainerSpecs (budgets from
// internal/cpumanager/budget), calls the matching method here, and turns
// the returned Assignments into a ContainerAdjustment (for the container
// being created) and ContainerUpdates (for the others). It is a pure state
// machine guarded by a mutex: it never touches the host, and every method
// is atomic — on error nothing changes. Do not use it to discover topology
// (internal/cpumanager/topology) or to read budgets from NRI values.
//
// # Picking CPUs
//
// Every exclusive carve-out (a pod's bubble out of the node pool, a
// container's slice out of its pod's shared pool) asks the allocator
// (allocation.go, allocator.take, its numbered algorithm in the comment;
// its step 2, the choice of NUMA nodes, in choosenodes.go)
// for a NUMA-aligned, core-aligned set: given a topology, the CPUs still
// free and a count, it returns the fewest NUMA nodes, best fit, whole nodes
// and cores before single threads. It holds no state between calls and
// knows nothing of pods, reserved or isolated CPUs: the Policy subtracts
// those from the available set first, and records what it was given.
//
// # Pools
//
// The usable CPUs are the topology's online CPUs minus the isolated ones
// (isolcpus=) minus the reserved set. Isolated CPUs are never assigned to
// anyone. Reserved CPUs (the kubelet's reservedSystemCPUs) never go to a
// bubble or an exclusive slice; like the kubelet, they stay in the node
// shared pool unless Options.StrictReservation (the kubelet's
// strict-cpu-reservation) keeps them out of it too. From the usable CPUs:
//
//   - a pod bubble is a NUMA-aligned set of whole CPUs held by one pod
//     (pod scope, pods with a Guaranteed budget of whole CPUs): its CPU
//     request (budget.Budget.BubbleCPUs, the kubelet's rule). A pod whose
//     first container's oom_score_adj says it is not Guaranteed gives its
//     bubble back (ContainerSpec.PodQoS); later such containers are
//     refused with ErrQoS;
//   - an exclusive slice is held by one Guaranteed container with integer
//     CPUs, carved from its pod's bubble (pod scope) or from the node pool
//     (container scope);
//   - a pod shared pool is a bubble minus its slices, shared by the pod's
//     other containers (a container without resources of its own in a pod
//     with pod-level resources among them, see internal/cpumanager/budget);
//   - the node shared pool is everything usable that is in no bubble and no
//     node-level slice, plus the reserved CPUs unless strict. Pods without
//     a CPU budget (and, in container scope, every non-exclusive container)
//     run there, and so does a regular container without CPUs whose pod's
//     bubble is all exclusive (see Rejections).
//
// Bubbles and node-level slices always leave a CPU in the node shared
// pool, so a pod without a budget can always start: the reserved CPUs when
// they are shared (then, like the kubelet, every usable CPU may be pinned),
// otherwise at least one usable CPU.
//
// cpuset.mems of a pinned container (an exclusive slice, a pod shared pool)
// is the set of NUMA nodes of its CPUs. A node-shared container keeps every
// memory node (topology.MemoryNodes), however narrow its CPUs get: the
// kubelet never narrows the memory of its shared pool, and narrowing it
// would migrate the pages of pods whose memory lives on another node.
// A bubble's NUMA nodes hold its pod's memory limit (placeBubble): the
// nodes of the CPUs the allocator picks, or else the smallest, closest
// group of nodes (all groups up to 12 nodes) with that much free memory and
// the CPUs; a pinned container's mems are the nodes of its CPUs plus the
// nodes the bubble was widened to. Free memory is MemTotal minus
// Options.ReservedMemory minus the reservations of the bubbles
// (podState.memShare) and, in container scope, of the exclusive containers:
// there a node-level slice's NUMA nodes hold its container's memory limit
// by the same rules (ctrState.memShare, extraMems). ErrInsufficientMemory
// refuses a pod or container that fits nowhere.
//
// Rebuild keeps each holder's memory nodes (from the stamps) and
// recomputes how its memory is split over them, with a max flow
// (memory.spread) that finds a split within every node's capacity
// whenever one exists. The split is bookkeeping the kernel never sees
// (pages land anywhere in cpuset.mems), so it is not stamped: a holder on
// one memory node reserves exactly what it did; one on several reserves
// the same total on the same nodes, the nodes of its CPUs first, which may
// differ from the split it got when it was placed (TestRebuildRecomputesSplit).
//
// Exclusive containers run without a CFS quota (Assignment.QuotaDisabled,
// quota -1); shared ones keep theirs.
//
// # Rejections
//
// ErrNoSharedCPUs, whose text is the kubelet's ("pod rejected, sum of
// exclusive container cpu requests equals pod budget, leaving no cpus for
// shared containers"), refuses an exclusive container that would take the
// last CPUs of its pod's bubble while a container of the pod is in its
// shared pool, and an init container or sidecar without exclusive CPUs
// that finds that pool empty (the kubelet refuses their pod at admission).
// Not enough free CPUs is ErrInsufficient; container requests above the
// pod budget are budget.ErrInconsistent.
//
// A regular container without exclusive CPUs that finds its pod's shared
// pool empty is not refused: it runs in the node shared pool (PoolNodeShared
// with its pod's Bubble), keeps its quota, and follows that pool's
// updates. The kubelet would have refused a regular container like it, so
// it is an ephemeral container (kubectl debug), which the kubelet sends
// like a regular one without CPUs (with pod-level resources: the pod's
// limits, budget.PodLimitsOnly) and runs in its node shared pool (v1.37
// GetCPUSetOrDefault: only init and regular containers get assignments).
// It stays there when the pod's shared pool gets CPUs back, and Rebuild
// keeps it there from its stamp. An ephemeral container arriving while the
// pool has CPUs goes into it, as a regular one would: NRI can not tell
// them apart.
//
// Resize refuses any change of an exclusive container, and a change of
// the CPU request of a shared container in a pod with a bubble (the
// kubelet refuses both in a Guaranteed pod); a shared container's CPU or
// memory limit may change, its CPUs do not.
//
// # Init containers
//
// ContainerSpec.Lifecycle marks init containers. A plain init container
// (LifecycleInit) holds its CPUs only until the pod's first regular
// container is added: app containers start after every init container has
// completed, so that add releases them (as the kubelet reuses init
// containers' CPUs). The lifecycle is the pod author's word and the
// container's stop may come later, so a released init container is not
// forgotten: the same add moves it to the node shared pool, with an
// update that restores its quota (Policy.release), and it stays there
// until it is removed. A restartable init container (LifecycleSidecar)
// runs alongside the app containers and keeps its CPUs like a regular
// one. The NRI layer sets Lifecycle; the zero value is a regular
// container.
//
// # Restart safety
//
// Each Assignment has a Stamp, to be put on the container as the
// StampAnnotation through the creation adjustment:
//
//	cpuset.cgdelegate.io/assignment: v=1;pool=exclusive;bubble=0-3;cpus=2-3;mems=0
//
// pool is exclusive, pod-shared or node-shared; bubble is the pod's bubble
// (empty without one); cpus and mems are the container's sets at creation.
// A shared container's cpus go stale as its pool changes (annotations
// cannot be updated), so Rebuild trusts the stamped bubble and exclusive
// slices and recomputes the shared pools. A stamp is trusted only when it
// agrees with the container's current cpuset (Stamp.agrees): an
// annotation can come from elsewhere (a runtime that copies the pod's
// annotations onto its containers), and a stamp checked this way can
// only keep a container on CPUs it already runs on.
//
// Rebuild takes a Synchronize snapshot (pods, containers with their stamps
// and current cpusets), reconstructs the state, repairs conflicts (a CPU
// claimed by two bubbles or slices, a stamp that no longer fits or that
// disagrees with the container's cpuset) and returns the updates that make every
// container match. Synchronize is the truth; there is no checkpoint file.
// The runtime reports an exclusive container without the CPU limit that its
// quota -1 replaced; pass the raw quota in ContainerState.CPUQuota and
// Rebuild puts the limit back before it looks for the slice.
package policy
