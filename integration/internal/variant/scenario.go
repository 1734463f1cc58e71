package variant

import (
	"slices"
	"strings"
)

// Scenario names one guest scenario. The guest runs it as a subtest of that
// name and reports its result under it; the host expects one result for
// every scenario of a variant and fails the scenario when there is none.
type Scenario string

// The scenarios. The first ten were numbered S01 to S10; each says its
// number.
const (
	// Harness checks the VM itself, without cgdelegate.
	Harness Scenario = "Harness"
	// AnnotatedWritable (S01): an annotated container gets a writable
	// cgroup namespace root and can delegate below it.
	AnnotatedWritable Scenario = "AnnotatedWritable"
	// UnannotatedReadOnly (S02): without the annotation the mount stays
	// read-only.
	UnannotatedReadOnly Scenario = "UnannotatedReadOnly"
	// OwnLimitsProtected (S03): a writable container cannot raise its own
	// limits or reach its parent.
	OwnLimitsProtected Scenario = "OwnLimitsProtected"
	// PodBounds (S04, was CgroupBomb): child cgroups stop at the pod's
	// max.descendants and max.depth.
	PodBounds Scenario = "PodBounds"
	// RefusedWithoutNSDelegate (S05, was NoNsdelegate): without nsdelegate
	// an annotated container is refused, plain pods still run.
	RefusedWithoutNSDelegate Scenario = "RefusedWithoutNSDelegate"
	// GuardCgroupWritable (S06): the guard refuses containerd's
	// cgroup_writable containers on a host without nsdelegate.
	GuardCgroupWritable Scenario = "GuardCgroupWritable"
	// HookRefusesAfterRemount (S07): the OCI hook refuses the start when
	// nsdelegate was dropped after admission.
	HookRefusesAfterRemount Scenario = "HookRefusesAfterRemount"
	// UsernsPod (S08): delegation works in a user-namespaced pod.
	UsernsPod Scenario = "UsernsPod"
	// PluginMode (S09): the plugin runs, and works, in the variant's mode.
	PluginMode Scenario = "PluginMode"
	// Restarts (S10): containerd and plugin restarts keep running
	// containers and new ones get mount and bounds.
	Restarts Scenario = "Restarts"
	// FailClosedPerPod: with the shipped containerd drop-in and cgdelegate
	// stopped, a pod that requires cgdelegate is refused with an error
	// naming it, and a plain pod runs.
	FailClosedPerPod Scenario = "FailClosedPerPod"
	// OptInPolicy: the node's opt-in policy (optIn, put in force by
	// SIGHUP) refuses a pod outside it, naming the rule and the value, and
	// admits one inside it; it shows which runtime handler and user
	// namespace containerd sends NRI.
	OptInPolicy Scenario = "OptInPolicy"
	// MetricsScraped: /metrics, scraped inside the VM, counts exactly the
	// containers the scenario creates, by result and refusal cause.
	MetricsScraped Scenario = "MetricsScraped"
	// ValidatorRejectsHook: with containerd's default validator set to
	// reject OCI hook adjustments, an opted-in container is refused and
	// the error a user sees names the setting to change.
	ValidatorRejectsHook Scenario = "ValidatorRejectsHook"
	// ValidatorRejectsNamespace: with containerd's default validator set to
	// reject namespace adjustments, an opted-in container still runs
	// writable: containerd gives it a cgroup namespace, so cgdelegate adds
	// none and the validator has nothing to refuse.
	ValidatorRejectsNamespace Scenario = "ValidatorRejectsNamespace"
	// NUMATopology checks the two-node topology the pinning scenarios use.
	NUMATopology Scenario = "NUMATopology"
	// PinningPodBudget: a pod budget becomes a bubble of exclusive CPUs.
	PinningPodBudget Scenario = "PinningPodBudget"
	// PinningDynamicAdd: a container added to a running pod is pinned.
	PinningDynamicAdd Scenario = "PinningDynamicAdd"
	// PinningPluginRestartDuringChurn: the plugin is killed during churn
	// and rebuilds its state.
	PinningPluginRestartDuringChurn Scenario = "PinningPluginRestartDuringChurn"
	// KubeletDaemonSetPod: the release image, imported with ctr, runs as
	// the static pod rendered from the shipped DaemonSet under the real
	// kubelet, with the shipped containerd drop-in; an annotated pod gets
	// a writable cgroup through it, and `cgdelegate status` on the node
	// says supported.
	KubeletDaemonSetPod Scenario = "KubeletDaemonSetPod"
	// KubeletPluginPodRestart: cgdelegate's process in that pod is
	// killed; the kubelet restarts it, it reconnects, and no pod loses
	// what it was given.
	KubeletPluginPodRestart Scenario = "KubeletPluginPodRestart"
	// InPodWorkers: in a writable pod, cgdelegate-init runs 20 workers in
	// their own cgroups with their own limits, one is reported OOM, a
	// fork-bomb of cgroups stops at the pod bound with the helper's
	// message, and the delegate package's kernel tests pass in the pod.
	InPodWorkers Scenario = "InPodWorkers"
	// InPodExecAfterLeafMove: after cgdelegate-init (entrypoint) moved the
	// container's processes into a leaf and enabled controllers, CRI
	// ExecSync and a probe-shaped exec still work.
	InPodExecAfterLeafMove Scenario = "InPodExecAfterLeafMove"
	// InPodNestedRunc: a user-namespaced, unprivileged writable pod runs
	// runc, whose nested container gets memory.max and pids.max through the
	// delegated subtree.
	InPodNestedRunc Scenario = "InPodNestedRunc"
	// InPodSystemd: systemd is PID 1 of a writable pod, reaches running
	// (or degraded), and makes a scope with MemoryMax in the pod's subtree.
	InPodSystemd Scenario = "InPodSystemd"
	// PinningContainerScope: in container scope a Guaranteed container gets
	// exclusive CPUs from the node pool, without a bubble.
	PinningContainerScope Scenario = "PinningContainerScope"
	// PinningLiveInitContainer: in container scope a Guaranteed container
	// annotated as an init container that never exits keeps running after
	// a regular sibling is created; the CPUs its exclusive slice gave back
	// go to another pod's exclusive container, and the real cgroups show
	// the first one moved off them (its quota back), never sharing them.
	PinningLiveInitContainer Scenario = "PinningLiveInitContainer"
	// ScaleChurn (the churn check at a smaller N than `make bench-node`): pods are created and
	// removed through the CRI in waves (BestEffort, Burstable and pinned
	// pods whose budgets carve bubbles and return them); after the churn
	// the plugin's allocation table holds none of the churned pods, its
	// goroutines are back to the start and its open fds and RSS within a
	// stated tolerance of their values after the first (warm-up) wave.
	ScaleChurn Scenario = "ScaleChurn"
	// ScaleRestart (the restart check at a smaller N than `make bench-node`): with a fleet of
	// node-shared containers and pinned pods (exclusive and pod-shared
	// containers) running, the plugin is SIGKILLed and started again; its
	// allocation table and every container's cpuset.cpus, cpuset.mems and
	// cpu.max are what they were, and the time until it synchronized is
	// reported.
	ScaleRestart Scenario = "ScaleRestart"
	// Demo is `make demo`: the story of what cgdelegate does to a pod.
	Demo Scenario = "Demo"
	// BenchNode is `make bench-node`, never part of the suite:
	// with 0, 50, 100 and 250 node-shared containers running (or the sizes of
	// the cgdbench.sizes kernel parameter), the lag until a pinned pod's
	// CPUs are exclusive, the pinned pod's start, the plugin's own cost and
	// a restart at the largest size (integration/internal/bench); then the
	// same lags and starts with the kubelet's static CPU manager pinning
	// static pods (the anchor). It needs the variant's kubelet, but it is
	// no Kubelet scenario: the kubelet starts only after cgdelegate's part.
	BenchNode Scenario = "BenchNode"

	// The Kubelet scenarios run a standalone kubelet with static
	// pods from the manifests in integration/guest/testdata/pods; see
	// NeedsKubelet.

	// KubeletWritable: an annotated static pod makes and limits child
	// cgroups; the bounds are on the pod cgroup the kubelet made.
	KubeletWritable Scenario = "KubeletWritable"
	// KubeletRefusedWithoutNSDelegate: the same pod on a host without
	// nsdelegate never runs, and the kubelet's /pods view carries
	// cgdelegate's error naming nsdelegate.
	KubeletRefusedWithoutNSDelegate Scenario = "KubeletRefusedWithoutNSDelegate"
	// KubeletUserns: a hostUsers: false static pod can delegate.
	KubeletUserns Scenario = "KubeletUserns"
	// KubeletPodLevelPinning: a static pod with pod-level resources gets a
	// bubble; its Guaranteed container an exclusive CPU, its others the
	// rest of the bubble.
	KubeletPodLevelPinning Scenario = "KubeletPodLevelPinning"
	// KubeletStartLatency measures static pod start (manifest written to
	// container running) with cgdelegate loaded and not loaded.
	KubeletStartLatency Scenario = "KubeletStartLatency"
	// KubeletPinningOracle runs the oracle-*.yaml manifests twice, with
	// the kubelet's own pod-level resource managers and with cgdelegate's
	// pinning, and fails on a difference the allow-list does not explain
	// (integration/internal/oracle).
	KubeletPinningOracle Scenario = "KubeletPinningOracle"

	// The Cluster scenarios run against a real control plane on the host
	// (Variant.Cluster), with kubectl inside the guest; see NeedsCluster.

	// ClusterNodeReady: the guest's kubelet registers as a Node and becomes
	// Ready; a Pod applied with kubectl is scheduled onto it by the
	// scheduler and runs.
	ClusterNodeReady Scenario = "ClusterNodeReady"
	// ClusterPodNetwork: the cluster's pod network and kube-proxy. A pod
	// on the pod network gets an address of its node's pod CIDR; kubectl
	// logs shows its output and kubectl exec runs in it (the API server
	// reaches the kubelet on the node's address); from inside it the
	// kubernetes Service answers (kube-proxy's DNAT to the API server on
	// the host); from the node, its Service's ClusterIP and the pod's own
	// address answer.
	ClusterPodNetwork Scenario = "ClusterPodNetwork"
	// ClusterRegistryInstall: helm install of the chart from the cluster's
	// registry (oci://, the first release the harness pushed) with no
	// value set but the registry's image repository; the DaemonSet
	// controller and the scheduler place cgdelegate's pod on the pod
	// network, whose image the kubelet pulled from the registry (its image
	// ID is the pushed digest; nothing was imported with ctr), and which
	// runs with the chart's default ConfigMap as the API serves it;
	// `cgdelegate status` on the node says supported; an annotated
	// Deployment's pod is delegated.
	ClusterRegistryInstall Scenario = "ClusterRegistryInstall"
	// ClusterUpgradeFromPrevious: the upgrade path from the previous
	// release (Registry.Previous: the pinned commit the harness builds,
	// integration/vm previousReleaseCommit). helm install of its chart from
	// the registry with the install command its own docs gave (the
	// registry's image repository, CPU pinning with CPU 0 reserved), a
	// writable and a pinned pod started under it, then helm upgrade to
	// the first release of this code with the command docs/deploying.md
	// gives now (--reset-then-reuse-values): the DaemonSet's pod runs
	// this release's digest, the running pods keep their delegation,
	// bounds and CPUs, a new writable pod starts writable; the window (the
	// old plugin's connection closed to the new one synchronized) is
	// reported. helm uninstall at the end, so that ClusterRegistryInstall
	// installs as always.
	ClusterUpgradeFromPrevious Scenario = "ClusterUpgradeFromPrevious"
	// ClusterHelmSetConfig: helm upgrade --reuse-values of the same chart
	// with CPU pinning on and a namespace allowed by name; the config's
	// checksum rolls the DaemonSet's pod, which reads the new ConfigMap.
	ClusterHelmSetConfig Scenario = "ClusterHelmSetConfig"
	// ClusterAdmissionPolicy: kube-apiserver type-checks the
	// chart's admission policy without a warning and enforces it: a pod
	// asking for a writable cgroup is denied outside the allowed
	// namespaces with the policy's message, admitted and delegated in one
	// allowed by name and in one allowed by label; a pod that asks for
	// nothing is admitted and runs. A pod naming the RuntimeClass of the
	// node's cgroup_writable handler (in the chart's
	// admissionPolicy.writableRuntimeClasses) is denied outside the allowed
	// namespaces with a message naming it, and admitted, writable and
	// bounded by guard mode in an allowed one.
	ClusterAdmissionPolicy Scenario = "ClusterAdmissionPolicy"
	// ClusterNodeLabel: cgdelegate labels its own Node
	// cgdelegate.io/supports-cgroup-options=true with its service account
	// and a pod selecting the label is scheduled there; the account's
	// token, stolen, can neither label another Node nor change anything
	// else on its own.
	ClusterNodeLabel Scenario = "ClusterNodeLabel"
	// ClusterMixedFleet: a second, smaller node (cgd-vm2, booted by the
	// host beside the cluster boot: MixedFleetNode) whose cgroup2 has no
	// nsdelegate joins the cluster, as upgrades leave fleets. The chart's
	// DaemonSet runs there too (desired 2) and its pod's log says why the
	// node cannot delegate; that node gets no
	// cgdelegate.io/supports-cgroup-options label while the first keeps
	// it; an annotated Deployment selecting the label puts every replica
	// on the first node; a token bound to the second node's plugin pod
	// cannot change the first node's label. The second node leaves the
	// cluster at the end (its Node is deleted).
	ClusterMixedFleet Scenario = "ClusterMixedFleet"
	// ClusterMixedFleetNode is the second node's side of
	// ClusterMixedFleet, its boot's one scenario: it waits, idle, until
	// the first node's scenario asks it to join, registers its kubelet
	// and kube-proxy as Node cgd-vm2, and stops them when that scenario
	// is done with it.
	ClusterMixedFleetNode Scenario = "ClusterMixedFleetNode"
	// ClusterRegistryUpgrade: helm upgrade to the next release in the
	// registry (another chart version, another image digest) while a
	// writable and a pinned pod run: they keep their delegation and CPUs;
	// a fail-closed writable pod created while no plugin runs waits and
	// starts once the new one is up; plain pods start throughout; the
	// DaemonSet's pod runs the next release's digest; the window is
	// reported.
	ClusterRegistryUpgrade Scenario = "ClusterRegistryUpgrade"
	// ClusterRegistryRollback: helm rollback to the previous revision (the
	// first release, with ClusterHelmSetConfig's values) while a writable
	// and a pinned pod run: the DaemonSet's pod is back on the first
	// release's digest with that revision's config, the running pods keep
	// their delegation and CPUs.
	ClusterRegistryRollback Scenario = "ClusterRegistryRollback"
	// ClusterHelmUninstall: helm uninstall while a writable
	// pod runs: the node label is withdrawn (the chart's pre-delete
	// hook), a pod selecting it stays Pending with the scheduler's reason,
	// the running pod keeps its cgroup, a new fail-closed pod waits and a
	// plain pod starts. Last in its boot: cgdelegate is gone after it.
	ClusterHelmUninstall Scenario = "ClusterHelmUninstall"
	// ClusterRuntimeDropIn: the runtime side of the install from the chart
	// (runtimeConfig.install). The node's containerd moves into
	// containerd.service, with containerd 2.x's default import of
	// conf.d and no cgdelegate drop-in: the plugin says it does not fail
	// closed (cgdelegate status, cgdelegate_fail_closed, the node
	// annotation); install-nri-config on a config.toml that imports
	// nothing fails naming the import to add. There, a request that
	// times out (the plugin stopped while a pod that asks is created)
	// creates the pod's container without cgdelegate, read-only, and once
	// the plugin reconnects the pod has a CgroupDelegationMissed Event.
	// helm upgrade --set
	// runtimeConfig.install=true: the init container writes the drop-in
	// and restarts containerd.service once through systemd's private
	// socket; the plugin then says enforced in all three. With the plugin
	// off the node, a pod that asks for a writable cgroup has its
	// container refused by containerd, naming cgdelegate, a plain pod
	// starts; with the plugin back (no second restart) it starts
	// writable. containerd stays in its unit for the rest of the boot.
	ClusterRuntimeDropIn Scenario = "ClusterRuntimeDropIn"
	// ClusterResizeUnpinned: with CPU pinning on, an ordinary
	// Burstable pod is resized in place three times (kubectl patch
	// --subresource resize: CPU limit up, CPU limit down, memory limit up)
	// beside a Guaranteed pod with an exclusive CPU; each resize completes,
	// the cgroup files show it, and the exclusive CPU never appears in the
	// resized container's cpuset.
	ClusterResizeUnpinned Scenario = "ClusterResizeUnpinned"
	// ClusterEphemeralContainers: kubectl debug into a
	// writable pod (the debugger's cgroup mount is the one the pod's
	// annotation asks for) and into two pinned pods (never refused); the
	// pinned observations are kept for ClusterPinningOracle.
	ClusterEphemeralContainers Scenario = "ClusterEphemeralContainers"
	// ClusterResizeBubble: in-place resizes of a Burstable
	// container in a bubble pod, of the bubble pod itself and of a
	// container in the node shared pool; observations kept for
	// ClusterPinningOracle.
	ClusterResizeBubble Scenario = "ClusterResizeBubble"
	// ClusterPinningOracle: after cgdelegate is gone,
	// the kubelet restarts with its own pod-level resource managers and
	// the same debug and resize steps run again; what the containers see
	// must match what they saw under cgdelegate, or differ as
	// docs/cpu-pinning.md says.
	ClusterPinningOracle Scenario = "ClusterPinningOracle"

	// The user stories of KEP-5474, each the manifest of its
	// page in docs/stories/ applied with kubectl in a namespace the
	// admission policy allows, under the kubelet on the systemd driver.

	// ClusterDocker: dockerd (Debian's docker.io) in an unprivileged,
	// user-namespaced writable pod; docker run --memory, --pids-limit and
	// --cpus are enforced inside the pod's subtree and the pod survives.
	ClusterDocker Scenario = "ClusterDocker"
	// ClusterPodman: the same with Debian's podman and its cgroupfs
	// manager.
	ClusterPodman Scenario = "ClusterPodman"
	// ClusterWorkers: a Ray-style head process starts workers in
	// sub-cgroups with their own limits (cgdelegate-init run); the one
	// over its memory is OOM-killed alone and reported.
	ClusterWorkers Scenario = "ClusterWorkers"
	// ClusterVMSplit: a KubeVirt-style pod with two exclusive CPUs from a
	// pod-level budget splits into a management and a vCPU sub-cgroup on
	// one CPU each (cgdelegate-init, the cpuset controller delegated); a
	// CPU outside the pod's is refused.
	ClusterVMSplit Scenario = "ClusterVMSplit"
	// NodeDelegationBudget: with a small nodeMaxDelegatedCgroups, the
	// writable pod past it is refused with an error naming the budget, what
	// is reserved and by how many pods, and what it asks; a plain pod
	// runs; a removed pod frees its share; a restarted plugin rebuilds
	// the reservations from the running containers.
	NodeDelegationBudget Scenario = "NodeDelegationBudget"
	// DyingCgroups: a writable container churns memory cgroups (mkdir,
	// charge page cache, rmdir); the dying cgroups it leaves are in
	// cgdelegate status and /metrics; what memory.reclaim and drop_caches
	// free is measured.
	DyingCgroups Scenario = "DyingCgroups"
	// TenantChurn: one tenant's writable pod churns memory cgroups while
	// another tenant's writable pod is created: the churner's bound
	// follows its cap less its dying cgroups, so the kernel refuses its
	// mkdir and its live plus dying cgroups stay near its cap; the other
	// pod is admitted and runs; the budget counts the node's real dying
	// cgroups.
	TenantChurn Scenario = "TenantChurn"
	// UnsafeAfterStart: cgroup2 is remounted without nsdelegate while a
	// writable container runs: it can now raise its own memory.max, and
	// cgdelegate names it (an error log with its pod and container,
	// cgdelegate status, cgdelegate_unsafe_writable_containers) until
	// nsdelegate is back.
	UnsafeAfterStart Scenario = "UnsafeAfterStart"
	// CRIConformance runs SIG Node's CRI validation suite (critest,
	// integration/internal/critest) against containerd once per
	// critest.Passes entry: without cgdelegate, then with the shipped
	// config, then with CPU pinning on too; it prints each pass's counts
	// and fails when a spec ends differently with cgdelegate than without
	// it and docs/critest.md does not explain why.
	CRIConformance Scenario = "CRIConformance"
)

// scenarios lists every Scenario constant.
var scenarios = []Scenario{
	Harness,
	AnnotatedWritable, UnannotatedReadOnly, OwnLimitsProtected, PodBounds,
	RefusedWithoutNSDelegate, GuardCgroupWritable, HookRefusesAfterRemount,
	UsernsPod, PluginMode, Restarts, FailClosedPerPod,
	OptInPolicy, MetricsScraped, ValidatorRejectsHook, ValidatorRejectsNamespace,
	NUMATopology, PinningPodBudget, PinningDynamicAdd, PinningPluginRestartDuringChurn,
	KubeletDaemonSetPod, KubeletPluginPodRestart,
	InPodWorkers, InPodExecAfterLeafMove, InPodNestedRunc, InPodSystemd,
	PinningContainerScope, PinningLiveInitContainer, ScaleChurn, ScaleRestart,
	Demo, BenchNode,
	KubeletWritable, KubeletRefusedWithoutNSDelegate, KubeletUserns, KubeletPodLevelPinning, KubeletStartLatency,
	KubeletPinningOracle,
	ClusterNodeReady, ClusterPodNetwork, ClusterRegistryInstall, ClusterHelmSetConfig, ClusterAdmissionPolicy, ClusterNodeLabel,
	ClusterMixedFleet, ClusterMixedFleetNode,
	ClusterRegistryUpgrade, ClusterRegistryRollback, ClusterResizeUnpinned, ClusterRuntimeDropIn, ClusterHelmUninstall,
	ClusterUpgradeFromPrevious,
	ClusterEphemeralContainers, ClusterResizeBubble, ClusterPinningOracle,
	ClusterDocker, ClusterPodman, ClusterWorkers, ClusterVMSplit,
	NodeDelegationBudget, DyingCgroups, TenantChurn, UnsafeAfterStart,
	CRIConformance,
}

// NeedsEngines reports whether the scenario runs the engines image
// (Docker and Podman from Debian's packages, integration/vm).
func (s Scenario) NeedsEngines() bool { return s == ClusterDocker || s == ClusterPodman }

// NeedsPrevious reports whether the scenario installs the previous
// release (Registry.Previous), which the harness builds from the
// repository's history and pushes only for the boots that run it.
func (s Scenario) NeedsPrevious() bool { return s == ClusterUpgradeFromPrevious }

// AllScenarios returns every scenario the guest implements.
func AllScenarios() []Scenario { return slices.Clone(scenarios) }

// Known reports whether s is one of the scenario constants.
func (s Scenario) Known() bool { return slices.Contains(scenarios, s) }

// NeedsKubelet reports whether the scenario drives a kubelet: every such
// scenario, and only those, has "Kubelet" in its name.
func (s Scenario) NeedsKubelet() bool { return strings.Contains(string(s), "Kubelet") }

// NeedsCluster reports whether the scenario drives the cluster: every such
// scenario, and only those, has ClusterMark in its name.
func (s Scenario) NeedsCluster() bool { return strings.Contains(string(s), ClusterMark) }
