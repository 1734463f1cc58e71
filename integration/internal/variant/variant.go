package variant

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Plugin is how cgdelegate runs in the VM.
type Plugin string

const (
	// PluginExternal: the guest suite starts cgdelegate, which connects to
	// containerd's NRI socket.
	PluginExternal Plugin = "external"
	// PluginPreregistered: cgdelegate is copied to /opt/nri/plugins and
	// containerd starts it.
	PluginPreregistered Plugin = "preregistered"
	// PluginNone: containerd runs without cgdelegate.
	PluginNone Plugin = "none"
	// PluginDaemonSet: cgdelegate runs as the kubelet's static pod
	// rendered from contrib/kubernetes/daemonset.yaml, from the release
	// image (`make image`) imported with ctr.
	PluginDaemonSet Plugin = "daemonset"
	// PluginHelm: the first scenario that needs cgdelegate installs the
	// chart contrib/helm/cgdelegate with helm into the cluster
	// (Variant.Cluster): the DaemonSet controller and the scheduler place
	// its pod, and the kubelet pulls the release image from the cluster's
	// registry (Registry), where the harness pushed it with the chart.
	PluginHelm Plugin = "helm"
)

func (p Plugin) valid() bool {
	return p == PluginExternal || p == PluginPreregistered || p == PluginNone || p == PluginDaemonSet || p == PluginHelm
}

// NeedsReleaseImage reports whether the boot needs the release image in
// its initramfs: only a variant that runs the DaemonSet's pod, static or
// installed with helm, does.
func (v Variant) NeedsReleaseImage() bool {
	return v.Plugin == PluginDaemonSet || v.Plugin == PluginHelm
}

// CarriesReleaseArchive reports whether the boot carries the release
// image's archive for `ctr images import`: only the static DaemonSet's pod
// needs it; helm's pulls from the cluster's registry.
func (v Variant) CarriesReleaseArchive() bool { return v.Plugin == PluginDaemonSet }

// NeedsEngines reports whether the boot needs the engines image in its
// initramfs (about 300 MB): only a variant with a scenario that runs it.
func (v Variant) NeedsEngines() bool { return slices.ContainsFunc(v.Scenarios, Scenario.NeedsEngines) }

// NeedsPrevious reports whether the boot's registry must hold the
// previous release (Registry.Previous): only a variant with a scenario
// that installs it (the build from the repository's history and the push
// cost the other boots nothing).
func (v Variant) NeedsPrevious() bool {
	return slices.ContainsFunc(v.Scenarios, Scenario.NeedsPrevious)
}

// RunsCritest reports whether the boot needs critest and its images
// in its initramfs: only a variant that runs CRIConformance.
func (v Variant) RunsCritest() bool { return slices.Contains(v.Scenarios, CRIConformance) }

// RunsKubelet reports whether the boot carries a kubelet: the standalone
// one (Kubelet) or the one a cluster registers (Cluster).
func (v Variant) RunsKubelet() bool { return v.Kubelet || v.Cluster }

// Variant is one boot of the VM: a host configuration and the guest
// scenarios that run in it.
type Variant struct {
	// Name names the boot in test names and logs.
	Name string
	// Containerd is the containerd release the VM runs (Containerd24 ...).
	Containerd string
	// NSDelegate mounts the host's cgroup2 with nsdelegate.
	NSDelegate bool
	// Plugin is how cgdelegate runs.
	Plugin Plugin
	// CgroupWritable sets cgroup_writable = true on containerd's default
	// runtime (the runc-writable runtime handler always has it).
	CgroupWritable bool
	// Pinning runs cgdelegate with CPU pinning (cpuPinning: true).
	Pinning bool
	// FailClosed has containerd import the shipped drop-in
	// contrib/containerd/cgdelegate.toml (NRI's default validator, per-pod
	// required plugins) over the suite's own NRI settings.
	FailClosed bool
	// Systemd boots a Debian root filesystem whose PID 1 is systemd (which
	// mounts cgroup2) instead of the busybox init, and containerd uses
	// runc's systemd cgroup driver (SystemdCgroup = true): pod cgroups are
	// kubepods-<qos>-pod<uid>.slice units. The variant's name must contain
	// "Systemd" exactly when this is set, so `go test -run 'TestVM/.*Systemd'`
	// selects these variants.
	Systemd bool
	// AppArmor leaves the kernel's AppArmor on (it is built into the
	// guests' Debian kernel and on by default) on a systemd boot, whose
	// root filesystem has Debian's apparmor package: systemd mounts
	// securityfs, containerd finds apparmor_parser and gives every
	// container without a profile of its own its default profile
	// (cri-containerd.apparmor.d), as on Ubuntu and COS nodes. A systemd
	// boot without it is booted with apparmor=0. It needs Systemd (the
	// busybox init mounts no securityfs and has no parser), and the
	// variant's name must contain "AppArmor" exactly when it is set.
	AppArmor bool
	// SMP is the number of virtual CPUs.
	SMP int
	// NUMA splits CPUs and memory evenly over two NUMA nodes.
	NUMA bool
	// Kubelet puts a standalone kubelet in the VM (integration/internal/kubelet); the
	// guest starts it for the first Kubelet scenario. The variant's name
	// must contain "Kubelet" exactly when it does, so that
	// CGD_VARIANTS=Kubelet selects every boot that runs one.
	Kubelet bool
	// Cluster boots the VM with a network to the host, whose loopback runs
	// a control plane (etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler; integration/vm starts it), and a kubelet registered
	// as a Node of that API server, driven with kubectl from inside the
	// guest. It excludes Kubelet (the standalone kubelet). The variant's
	// name must contain "Cluster" exactly when it is set, so that
	// CGD_VARIANTS=Cluster selects every boot that runs one.
	Cluster bool
	// Scenarios run in this order; each must report a result.
	Scenarios []Scenario
}

// ClusterMark is in the name of every variant with Cluster set, and of
// no other; every scenario that needs the cluster has it in its name.
const ClusterMark = "Cluster"

// SystemdMark is in the name of every variant with Systemd set, and of no
// other.
const SystemdMark = "Systemd"

// AppArmorMark is in the name of every variant with AppArmor set, and of
// no other.
const AppArmorMark = "AppArmor"

// Validate reports every problem of the variant, each as a *ParamError
// naming the kernel parameter that carries the field.
func (v Variant) Validate() error {
	p := v.params()
	var errs []error
	check := func(key string, ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, invalid(key, p[key], fmt.Sprintf(format, args...)))
		}
	}
	check(keyName, isToken(v.Name), "want letters, digits, '.', '_' or '-'")
	check(keyContainerd, isToken(v.Containerd), "want a release such as %s", Containerd24)
	check(keyPlugin, v.Plugin.valid(), "want %s, %s, %s, %s or %s", PluginExternal, PluginPreregistered, PluginNone, PluginDaemonSet, PluginHelm)
	check(keyPlugin, v.Plugin != PluginHelm || v.Cluster, "helm installs into a cluster (cgd.cluster=1)")
	check(keyPlugin, v.Plugin != PluginDaemonSet || v.Kubelet, "the DaemonSet's pod needs a kubelet (cgd.kubelet=1)")
	check(keySystemd, v.Systemd == strings.Contains(v.Name, SystemdMark),
		"a variant named %q must have %s%s=%s", v.Name, Prefix, keySystemd, formatBool(strings.Contains(v.Name, SystemdMark)))
	check(keyAppArmor, v.AppArmor == strings.Contains(v.Name, AppArmorMark),
		"a variant named %q must have %s%s=%s", v.Name, Prefix, keyAppArmor, formatBool(strings.Contains(v.Name, AppArmorMark)))
	check(keyAppArmor, !v.AppArmor || v.Systemd, "AppArmor needs the systemd root filesystem (%s%s=1): the busybox init mounts no securityfs and has no apparmor_parser", Prefix, keySystemd)
	check(keySMP, v.SMP >= 1, "want at least one CPU")
	check(keyNUMA, !v.NUMA || (v.SMP >= 2 && v.SMP%2 == 0), "two NUMA nodes need an even number of CPUs, not %d", v.SMP)
	check(keyKubelet, v.Kubelet == strings.Contains(v.Name, "Kubelet"),
		"a variant runs a kubelet exactly when its name contains \"Kubelet\" (name %q)", v.Name)
	check(keyCluster, v.Cluster == strings.Contains(v.Name, ClusterMark),
		"a variant runs a cluster exactly when its name contains %q (name %q)", ClusterMark, v.Name)
	check(keyCluster, !v.Cluster || !v.Kubelet, "a cluster's kubelet is registered with its API server; it cannot also be the standalone one (cgd.kubelet=1)")
	check(keyScenarios, len(v.Scenarios) > 0, "want at least one scenario")
	seen := map[Scenario]bool{}
	for _, s := range v.Scenarios {
		check(keyScenarios, s.Known(), "unknown scenario %q", s)
		check(keyScenarios, !seen[s], "scenario %s listed twice", s)
		check(keyScenarios, !s.NeedsKubelet() || v.Kubelet, "scenario %s needs a kubelet (cgd.kubelet=1)", s)
		check(keyScenarios, !s.NeedsCluster() || v.Cluster, "scenario %s needs a cluster (cgd.cluster=1)", s)
		seen[s] = true
	}
	return errors.Join(errs...)
}

// isToken reports whether s is a non-empty word that survives the kernel
// command line and a comma-separated list.
func isToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !tokenRune(r) })
}

func tokenRune(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '.', r == '_', r == '-':
		return true
	}
	return false
}
