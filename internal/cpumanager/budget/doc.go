// Package budget turns what the runtime tells an NRI plugin about a pod and
// its containers into CPU and memory budgets: requests and limits in
// millicores and bytes, a QoS class, and whether a container qualifies for
// exclusive CPUs.
//
// Use it to read budgets. It is pure: it never touches the host and keeps no
// state. Do not use it to allocate CPUs; that is
// internal/cpumanager/policy's job. The Manager in internal/cpumanager calls
// ForPod and ForContainer on every NRI event that carries resources.
//
// # Where the numbers come from
//
// The pod budget comes from PodSandbox.Linux.PodResources, which is how the
// kubelet's pod.spec.resources (pod-level resources) reaches NRI through
// containerd and CRI-O. A container's budget comes from its own
// Container.Linux.Resources. The conversions invert the kubelet's:
//
//   - CPU limit: quota*1000/period millicores, rounded up (kubelet writes
//     quota = millicores*period/1000 with a 1000µs floor). A quota <= 0 means
//     no limit.
//   - CPU request: shares*1000/1024 millicores, rounded up (kubelet writes
//     shares = millicores*1024/1000 with a floor of 2). Shares of 2 or less
//     mean no request: 0m, 1m and 2m all produce 2 shares, which is
//     exactly the ambiguity the annotation below resolves.
//   - Memory limit: Memory.Limit in bytes; <= 0 means no limit. The memory
//     request never reaches the runtime, so only the annotation can state it.
//
// # Containers without resources in pods with pod-level resources
//
// With pod-level resources (KEP-2837) a container may state no CPU or
// memory of its own; the pod's limits bound it. The kubelet (feature gate
// PodLevelResources,
// pkg/kubelet/kuberuntime/kuberuntime_container_linux.go:
// generateLinuxContainerResources, getCPULimit, getMemoryLimit and
// calculateLinuxResources) then sends for it:
//
//   - cpu limit: the pod's CPU limit, so quota = the pod's quota and period
//     = the pod's period (100000 by default);
//   - cpu shares: with no CPU request and a limit, the request defaults to
//     the limit, so shares = the pod's CPU limit converted to shares (not
//     the floor of 2);
//   - memory limit: the pod's memory limit (none when the pod has none);
//   - oom_score_adj: from the pod's QoS class (pkg/kubelet/qos/policy.go,
//     GetContainerOOMScoreAdjust), -997 in a Guaranteed pod.
//
// The pod's own values (kuberuntime_sandbox_linux.go,
// calculateSandboxResources) carry the same quota and period and memory
// limit. For the pod spec.resources requests = limits = {cpu: 2, memory:
// 256Mi} that is shares 2048, quota 200000, period 100000, memory limit
// 268435456 on both the pod and such a container.
//
// Read naively, these values are a request of the pod's whole CPU budget,
// and any other container's request makes the sum exceed the pod budget.
// So PodLimitsOnly recognises them: the pod has a CPU quota > 0, and the
// container has the same quota and period, shares equal to the pod's CPU
// limit converted to shares, and the same memory limit as the pod (both
// none counts as the same). Such a container has CPU request 0 (its CPU
// limit stays the pod's), is Burstable, never exclusive, runs in its pod's
// shared pool and adds nothing to the pod's container request sum;
// Container.PodLimits says so.
//
// The values are ambiguous: a container that itself states cpu = memory =
// the pod's limits sends the same ones and is read the same way (it would
// otherwise take the whole bubble as an exclusive slice, leaving nothing
// for any other container). State its CPU with the resources annotation
// below to have it read as its own; an annotated CPU amount always is.
//
// # QoS and exclusive eligibility
//
// A container is Guaranteed when its CPU request equals its CPU limit (both
// set) and it has a memory limit (and, if an annotation states a memory
// request, that request equals the limit). It is BestEffort when it has no
// CPU request, no CPU limit and no memory limit; otherwise Burstable.
// oom_score_adj is a cross-check: the kubelet gives BestEffort containers
// 1000, so 1000 on a container that has a request or limit is an
// inconsistency. (-997 is not conclusive: critical pods and containers of a
// Guaranteed pod with pod-level resources get it without their own limits.)
//
// A container is exclusive-eligible ("Guaranteed with integer CPUs") when it
// is Guaranteed and its CPU limit is a whole number of CPUs;
// Container.ExclusiveCPUs returns that number.
//
// A pod-level budget is classified the same way (the kubelet's
// ComputePodQOS uses the pod-level resources alone when they are set), and
// Budget.BubbleCPUs is the size of the pod's bubble: its CPU request when
// Guaranteed with whole CPUs, else none. NRI carries no memory request, so
// a budget with a memory limit reads as Guaranteed unless the annotation
// states a lower request; PodQoSFromOOMScoreAdj reads the pod's class from
// the kubelet's oom_score_adj of its containers.
//
// # The resources annotation
//
// A pod annotation states a pod's or a container's CPU and memory exactly.
// The keys follow NRI's effective-annotation convention:
//
//	resources.cgdelegate.io/pod               the pod budget
//	resources.cgdelegate.io/container.<name>  the container named <name>
//
// The value is a comma-separated list of fields, each at most once:
//
//	value  = field *( "," field )
//	field  = ( "cpu" / "memory" ) "=" amount
//	amount = qty              ; request = limit = qty
//	       / qty "/" qty      ; request "/" limit
//	       / qty "/"          ; request only, no limit
//
// CPU quantities are whole or decimal CPUs with at most three decimals
// ("2", "1.5", "0.25") or millicores ("1500m"). Memory quantities are whole
// bytes with an optional suffix: k, M, G, T, P (powers of 1000) or Ki, Mi,
// Gi, Ti, Pi (powers of 1024). Spaces around tokens are ignored. A limit
// must be positive and at least the request.
//
// Examples:
//
//	resources.cgdelegate.io/pod: "cpu=4,memory=8Gi"
//	resources.cgdelegate.io/container.app: "cpu=2,memory=1Gi"
//	resources.cgdelegate.io/container.web: "cpu=500m/2, memory=256Mi/1Gi"
//	resources.cgdelegate.io/container.batch: "cpu=250m/"
//
// Fields the annotation states replace the converted values; fields it
// leaves out keep them. Where the runtime also carries a value, the
// annotated value must convert to the same quota or memory limit, and to
// shares within one cgroup v2 cpu.weight step (SameCPURequest: a pod's
// request can reach NRI read back from its cgroup's cpu.weight);
// otherwise the result is an ErrInconsistent error naming both. A malformed
// annotation is an ErrAnnotation error naming the key and the value.
//
// # Consistency
//
// CheckPod checks a pod budget against its containers: container CPU
// requests may not sum above the pod's CPU budget, and no container's CPU
// or memory limit may exceed the pod's. Every problem is reported, each an
// ErrInconsistent naming both values.
package budget
