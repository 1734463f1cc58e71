package variant

import (
	"slices"
	"strings"
)

// The containerd releases the suite runs against: the current release and
// the newest 2.3 LTS the module proxy served when the suite was written.
const (
	Containerd24 = "v2.4.2"
	Containerd23 = "v2.3.7"
)

// Suite returns the variants `make integration` boots, in order.
func Suite() []Variant {
	// The in-pod helper runs on one containerd only: what it proves is the
	// kernel's and runc's, not containerd's. On this cgroupfs host the
	// helper's own scenarios; the nested engines (runc, systemd as PID 1)
	// see the same cgroup namespace on either driver and run on the
	// systemd host (ctd24-Systemd-AppArmor-Kubelet), as kubeadm sets nodes up, and
	// in the cluster's user stories: each costs 40 to 90 s under TCG.
	inPod := []Scenario{InPodWorkers, InPodExecAfterLeafMove}
	// The node budget of delegated cgroups, the dying cgroups, a tenant
	// that churns them beside another, and the writable containers a
	// remount without nsdelegate leaves running.
	delegation := []Scenario{NodeDelegationBudget, DyingCgroups, TenantChurn, UnsafeAfterStart}
	return []Variant{
		{
			Name: "ctd24-nsdelegate-external", Containerd: Containerd24, NSDelegate: true, Plugin: PluginExternal, SMP: 2,
			Scenarios: slices.Concat(nsdelegateScenarios(), inPod, delegation),
		},
		// The kubelet's view of the same refusal shares the boot, last
		// (a kubelet kills pods it did not make).
		{
			Name: "ctd24-no-nsdelegate-Kubelet", Containerd: Containerd24, Plugin: PluginExternal, SMP: 2, Kubelet: true,
			Scenarios: append(noNSDelegateScenarios(), KubeletRefusedWithoutNSDelegate),
		},
		// The shipped containerd drop-in, fail closed per pod; the
		// writable scenario shows the validator lets cgdelegate's own
		// adjustments through. The operator scenarios share the
		// boot: the opt-in policy by SIGHUP, /metrics (served in this
		// variant only), and the validator told to reject hooks, then
		// namespaces, last because they restart containerd.
		{
			Name: "ctd24-failclosed", Containerd: Containerd24, NSDelegate: true, Plugin: PluginExternal, FailClosed: true, SMP: 2,
			Scenarios: []Scenario{
				Harness, AnnotatedWritable, FailClosedPerPod,
				OptInPolicy, MetricsScraped, ValidatorRejectsHook, ValidatorRejectsNamespace, // operator controls
			},
		},
		// PID 1 is systemd and runc uses its systemd cgroup driver: pod
		// cgroups are kubepods-<qos>-pod<uid>.slice units.
		{
			Name: "ctd24-Systemd-AppArmor-Kubelet", Containerd: Containerd24, NSDelegate: true, Plugin: PluginExternal, Systemd: true, AppArmor: true, SMP: 2,
			Kubelet: true,
			Scenarios: []Scenario{
				Harness, AnnotatedWritable, UnannotatedReadOnly, OwnLimitsProtected, PodBounds,
				HookRefusesAfterRemount, UsernsPod,
				// The in-pod stories under runc's systemd driver.
				InPodWorkers, InPodExecAfterLeafMove, InPodNestedRunc, InPodSystemd,
				// Last: the kubelet (systemd driver) kills pods it did
				// not make.
				KubeletWritable, KubeletUserns,
			},
		},
		// The CPU pinning scenarios, on four CPUs in two NUMA
		// nodes; PinningContainerScope restarts cgdelegate in container
		// scope and back. The kubelet starts only for
		// the Kubelet scenarios, after the CRI ones (a kubelet kills pods
		// it did not make): the pod-level pinning, then the real kubelet
		// with static pods on a cgroupfs host (the systemd host
		// is ctd24-Systemd-AppArmor-Kubelet), which share this boot as every boot
		// costs about 20 s before its first scenario. The scale checks
		// and the start latency run in Extended.
		{
			Name: "ctd24-numa-smp4-Kubelet", Containerd: Containerd24, NSDelegate: true, Plugin: PluginExternal, Pinning: true, SMP: 4, NUMA: true,
			Kubelet: true,
			Scenarios: []Scenario{
				Harness, PinningPodBudget, PinningDynamicAdd, PinningPluginRestartDuringChurn, NUMATopology,
				PinningContainerScope, PinningLiveInitContainer, KubeletPodLevelPinning,
				KubeletWritable, KubeletUserns,
			},
		},
		// A real cluster: a control plane on the host's
		// loopback (integration/vm), the guest's kubelet registered as its
		// Node, kubectl and helm in the guest; systemd as PID 1 and the
		// systemd cgroup driver, as kubeadm sets a node up; cgdelegate
		// installed with helm install of the chart, the containerd drop-in
		// as shipped (FailClosed), with pinning (CPU 0
		// reserved) on four CPUs in two NUMA nodes, so that an in-place
		// resize meets an exclusive CPU beside it. The second node, the
		// user stories, the uninstall and the kubelet's own pinning after
		// it boot in Extended's cluster (ctd24-Systemd-AppArmor-numa-smp4-Cluster-fleet).
		{
			Name: "ctd24-Systemd-numa-smp4-Cluster", Containerd: Containerd24, NSDelegate: true, Plugin: PluginHelm, FailClosed: true, Pinning: true,
			SMP: 4, NUMA: true, Systemd: true, Cluster: true,
			Scenarios: []Scenario{
				ClusterNodeReady, ClusterPodNetwork, ClusterRegistryInstall, ClusterNodeLabel,
				ClusterHelmSetConfig, ClusterAdmissionPolicy,
				ClusterRegistryUpgrade, ClusterRegistryRollback, ClusterResizeUnpinned,
				ClusterEphemeralContainers,
			},
		},
	}
}

// Extended returns the variants `make boots-extended` boots, in order,
// and `make integration` after Suite's: the checks of size, the static
// pod start latency, the kubelet's own pinning (on eight CPUs, and in the
// cluster after the uninstall), the cluster's second node and user
// stories, the DaemonSet's pod as a static pod, and containerd 2.3. They
// take about 40 minutes under emulation, which CI
// (`make boots`, Suite only) leaves out to stay under its time goal: the
// cold run is bound by CPU, and two VMs at once are each more than twice
// as slow (docs/development.md). The same behaviours have smaller checks
// in CI: the churn and restart in process (TestChurnThousandPods, the
// restart tests of internal/cpumanager), the pod-level pinning under the
// kubelet (KubeletPodLevelPinning) and the debug and resize steps the
// oracle compares, the DaemonSet's pod in the cluster boot, every
// containerd 2.3 scenario on 2.4.
func Extended() []Variant {
	return []Variant{
		// A churn of pods and a restart with a fleet running, measured
		// (the plugin's memory, goroutines and descriptors; the restart's
		// answer): the node benchmark's checks at a smaller size. After
		// the pinning scenarios, as when they ran in
		// ctd24-numa-smp4-Kubelet. The plugin's goroutines move by one or
		// two while it works (its update sender, the status refresh, the
		// scrape's connection): ScaleChurn read 16, 17 and 18 before the
		// churn, after its warm-up wave and after it on 2026-11-27 (a
		// failure), and 17, 19 and 17 on 2026-11-28 (a pass); when they
		// do not settle it prints the plugin's goroutine profile before
		// and after the churn, which tells a leak from a late retry.
		// Last, the static pod start latency with cgdelegate loaded and
		// not (a measurement: under TCG only a ratio over 2 fails), with
		// the kubelet, which starts after the CRI scenarios.
		{
			Name: "ctd24-numa-smp4-scale-Kubelet", Containerd: Containerd24, NSDelegate: true, Plugin: PluginExternal, Pinning: true, SMP: 4, NUMA: true,
			Kubelet: true,
			Scenarios: []Scenario{
				Harness, PinningPodBudget, PinningDynamicAdd, PinningPluginRestartDuringChurn, NUMATopology,
				PinningContainerScope, PinningLiveInitContainer, ScaleChurn, ScaleRestart, KubeletStartLatency,
			},
		},
		// The kubelet's own pod-level resource managers against cgdelegate's
		// pinning, on eight CPUs in two NUMA nodes: with CPU 0
		// reserved, a node of four free CPUs holds the three-exclusive pod,
		// and a six-CPU pod needs both nodes. Four CPUs are too few for that.
		{
			Name: "ctd24-numa-smp8-Kubelet", Containerd: Containerd24, NSDelegate: true, Plugin: PluginExternal, Pinning: true, SMP: 8, NUMA: true,
			Kubelet:   true,
			Scenarios: []Scenario{KubeletPinningOracle},
		},
		// The cluster boot's two heaviest loads under emulation, on the
		// same machine as CI's cluster boot: a second guest (the mixed
		// fleet, MixedFleetNode) and the engines image (333 MB, imported
		// in the guest's background from its start) of the user stories.
		// Beside them, each took the first scenarios of CI's cluster boot
		// from 45, 23, 67 and 23 s to 81, 43, 150 and 47 s (2026-11-28),
		// and together about 9 minutes of the boot. Then the uninstall
		// and, with cgdelegate gone, the kubelet's own pod-level resource
		// managers against what the debug and resize steps saw under it
		// (3.3 minutes of the cold run of 2026-11-27). Before the
		// uninstall, the runtime side of the install from the chart
		// (ClusterRuntimeDropIn: the drop-in and containerd's restart by
		// the init container, several minutes of rollouts and a
		// containerd restart). The chart is
		// installed from the registry, the node labelled, and pinning and
		// the stories' namespace set by ClusterHelmSetConfig, as in CI's.
		{
			Name: "ctd24-Systemd-AppArmor-numa-smp4-Cluster-fleet", Containerd: Containerd24, NSDelegate: true, Plugin: PluginHelm, FailClosed: true, Pinning: true,
			SMP: 4, NUMA: true, Systemd: true, AppArmor: true, Cluster: true,
			Scenarios: []Scenario{
				ClusterNodeReady,
				ClusterUpgradeFromPrevious, // the previous release installed, upgraded to this one, uninstalled
				ClusterRegistryInstall, ClusterNodeLabel,
				ClusterMixedFleet, // a second node without nsdelegate (MixedFleetNode) joins, then leaves
				ClusterHelmSetConfig,
				ClusterDocker, ClusterPodman, ClusterWorkers, ClusterVMSplit, // the user stories
				ClusterEphemeralContainers, ClusterResizeBubble, // what the oracle compares
				ClusterRuntimeDropIn, // containerd in containerd.service from here on
				ClusterHelmUninstall, // cgdelegate is gone after it
				ClusterPinningOracle, // last: the kubelet pins
			},
		},
		// cgdelegate deployed as it ships without a registry: the release
		// image imported with ctr, the DaemonSet's pod as a static pod of
		// the real kubelet, the containerd drop-in as written; CPU pinning
		// on (the ConfigMap's config plus cpuPinning: true), so the
		// SIGKILL shows a pinned pod keeping its CPUs. CI's cluster boot
		// runs the same pod template from the registry, and its upgrade
		// and rollback restart it with pinned pods running.
		{
			Name: "ctd24-daemonset-Kubelet", Containerd: Containerd24, NSDelegate: true, Plugin: PluginDaemonSet, FailClosed: true,
			Pinning: true, SMP: 4, NUMA: true, Kubelet: true,
			Scenarios: []Scenario{KubeletDaemonSetPod, KubeletPluginPodRestart},
		},
		// Out of CI's suite on 2026-11-29, to bring its cold run under 70
		// minutes (docs/development.md, CI): a node whose default runtime
		// makes every container writable, where the guard refuses them all
		// (CI's ctd24-no-nsdelegate-Kubelet runs the guard on a writable
		// runtime handler), and the plugin pre-registered (started by
		// containerd from /opt/nri/plugins, its config in the Configure
		// blob), with pinning in the same boot (CI runs every one of its
		// scenarios on the external plugin).
		{
			Name: "ctd24-no-nsdelegate-cgroup-writable", Containerd: Containerd24, Plugin: PluginExternal, CgroupWritable: true, SMP: 2,
			Scenarios: []Scenario{GuardCgroupWritable},
		},
		{
			Name: "ctd24-preregistered", Containerd: Containerd24, NSDelegate: true, Plugin: PluginPreregistered, Pinning: true, SMP: 4, NUMA: true,
			Scenarios: []Scenario{Harness, AnnotatedWritable, PluginMode, Restarts, PinningPodBudget, PinningDynamicAdd, NUMATopology},
		},
		// containerd 2.3, the previous release: the refusal without
		// nsdelegate, then the writable scenarios and pinning in one boot,
		// as they share a production node.
		{Name: "ctd23-no-nsdelegate", Containerd: Containerd23, Plugin: PluginExternal, SMP: 2, Scenarios: noNSDelegateScenarios()},
		{
			Name: "ctd23-nsdelegate-pinning", Containerd: Containerd23, NSDelegate: true, Plugin: PluginExternal, Pinning: true, SMP: 4, NUMA: true,
			Scenarios: append(nsdelegateScenarios(), PinningPodBudget, PinningDynamicAdd, PinningPluginRestartDuringChurn, NUMATopology),
		},
	}
}

// Conformance returns the variants `make boots-conformance` boots, and
// `make integration` last: SIG Node's CRI validation suite (critest)
// against containerd 2.4 with nsdelegate and the cgroupfs driver, three
// times in one boot (integration/internal/critest's Passes: without
// cgdelegate, with the shipped config, with CPU pinning on too).
// cgdelegate runs as an external plugin so that the passes stop and
// reconfigure it, with the shipped containerd drop-in (FailClosed), as the
// chart deploys it. Each pass takes about 6 minutes under TCG; CI leaves
// it out to stay under its time goal. The same boot on the systemd driver
// (ctd24-Systemd-conformance, 2026-11-28) died of the emulator's
// "Oops: int3" race in __alloc_pages four times in five boots, once after
// two passes that matched (docs/critest.md), so it is not in the suite.
func Conformance() []Variant {
	return []Variant{
		{
			Name: "ctd24-conformance", Containerd: Containerd24, NSDelegate: true, Plugin: PluginExternal, FailClosed: true, SMP: 2,
			Scenarios: []Scenario{Harness, CRIConformance},
		},
	}
}

// noNSDelegateScenarios are the refusals of a host without nsdelegate.
func noNSDelegateScenarios() []Scenario {
	return []Scenario{Harness, RefusedWithoutNSDelegate, GuardCgroupWritable}
}

// nsdelegateScenarios are the writable-cgroup scenarios of a host with
// nsdelegate and an external plugin.
func nsdelegateScenarios() []Scenario {
	return []Scenario{
		Harness, AnnotatedWritable, UnannotatedReadOnly, OwnLimitsProtected, PodBounds,
		HookRefusesAfterRemount, UsernsPod, PluginMode, Restarts,
	}
}

// MixedFleetNode is the boot of the second node of leader's cluster when
// leader runs ClusterMixedFleet (ok is false otherwise): the same
// containerd, containerd drop-in and systemd root filesystem, a cgroup2
// without nsdelegate, AppArmor off (apparmor=0: the fleet's one systemd
// node without it), one CPU, the chart's plugin (the DaemonSet places it), and only
// ClusterMixedFleetNode. It is not in Suite: the host boots it beside
// leader, on the same pod network (integration/internal/podnet's second
// node).
func MixedFleetNode(leader Variant) (v Variant, ok bool) {
	if !leader.Cluster || !slices.Contains(leader.Scenarios, ClusterMixedFleet) {
		return Variant{}, false
	}
	release, _, _ := strings.Cut(leader.Name, "-") // ctd24
	return Variant{
		Name: release + "-" + SystemdMark + "-" + ClusterMark + "-node2", Containerd: leader.Containerd,
		Plugin: PluginHelm, FailClosed: true, Systemd: true, SMP: 1, Cluster: true,
		Scenarios: []Scenario{ClusterMixedFleetNode},
	}, true
}

// DemoVariant is the one VM `make demo` boots: containerd 2.4, nsdelegate,
// cgdelegate as an external plugin with CPU pinning on four CPUs in two
// NUMA nodes, and only the Demo scenario.
func DemoVariant() Variant {
	return Variant{
		Name: "demo", Containerd: Containerd24, NSDelegate: true, Plugin: PluginExternal,
		Pinning: true, SMP: 4, NUMA: true,
		Scenarios: []Scenario{Demo},
	}
}

// BenchVariant is the one VM `make bench-node` boots: the demo's machine
// (containerd 2.4, nsdelegate, cgdelegate as an external plugin with CPU
// pinning on four CPUs in two NUMA nodes) with only the BenchNode scenario,
// and the standalone kubelet for its anchor (the kubelet's static CPU
// manager pinning the same pods after cgdelegate's measurements). It is
// not in Suite: its numbers are measured, never judged by CI.
func BenchVariant() Variant {
	v := DemoVariant()
	v.Name = "bench-node-Kubelet"
	v.Kubelet = true
	v.Scenarios = []Scenario{BenchNode}
	return v
}
