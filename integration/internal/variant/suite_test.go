package variant

import (
	"regexp"
	"slices"
	"testing"
)

// maxVariantParams keeps the encoded variant well inside the x86 kernel's
// 2048-byte command line, next to the host's own parameters.
const maxVariantParams = 1024

// withFollowers is the suite and the boots the host starts beside its
// variants (MixedFleetNode).
func withFollowers(vs []Variant) []Variant {
	for _, v := range vs {
		if f, ok := MixedFleetNode(v); ok {
			vs = append(vs, f)
		}
	}
	return vs
}

func TestSuite(t *testing.T) {
	all := withFollowers(slices.Concat(Suite(), Extended(), Conformance(), []Variant{DemoVariant(), BenchVariant()}))
	names := map[string]bool{}
	expected := map[Scenario]bool{}
	for _, v := range all {
		if names[v.Name] {
			t.Errorf("variant name %s used twice", v.Name)
		}
		names[v.Name] = true
		enc, err := v.Encode()
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		if len(enc) > maxVariantParams {
			t.Errorf("%s: %d bytes of kernel parameters, want at most %d", v.Name, len(enc), maxVariantParams)
		}
		for _, s := range v.Scenarios {
			expected[s] = true
		}
	}
	// A scenario no variant expects would never run.
	for _, s := range AllScenarios() {
		if !expected[s] {
			t.Errorf("no variant runs scenario %s", s)
		}
	}
}

// TestKubeletScenarios: a scenario needs the kubelet exactly when its name
// says Kubelet, and the suite boots kubelet variants with and without
// nsdelegate.
func TestKubeletScenarios(t *testing.T) {
	for _, tc := range []struct {
		s    Scenario
		want bool
	}{{KubeletWritable, true}, {KubeletStartLatency, true}, {AnnotatedWritable, false}, {Harness, false}} {
		if got := tc.s.NeedsKubelet(); got != tc.want {
			t.Errorf("%s.NeedsKubelet() = %v, want %v", tc.s, got, tc.want)
		}
	}
	hosts := map[bool]bool{}
	for _, v := range Suite() {
		if v.Kubelet {
			hosts[v.NSDelegate] = true
		}
	}
	if !hosts[true] || !hosts[false] {
		t.Errorf("kubelet variants by nsdelegate: %v, want both", hosts)
	}
}

// TestClusterScenarios: a scenario needs the cluster exactly when its name
// says Cluster; CI's suite boots exactly one cluster variant and Extended
// one more (the second node and the user stories); each carries the
// registered kubelet only, and together they run every Cluster scenario.
func TestClusterScenarios(t *testing.T) {
	for _, tc := range []struct {
		s    Scenario
		want bool
	}{{ClusterNodeReady, true}, {ClusterResizeUnpinned, true}, {KubeletWritable, false}, {Harness, false}} {
		if got := tc.s.NeedsCluster(); got != tc.want {
			t.Errorf("%s.NeedsCluster() = %v, want %v", tc.s, got, tc.want)
		}
	}
	clusters := func(vs []Variant) []Variant {
		return slices.DeleteFunc(slices.Clone(vs), func(v Variant) bool { return !v.Cluster })
	}
	ci, ext := clusters(Suite()), clusters(Extended())
	if len(ci) != 1 || len(ext) != 1 {
		t.Fatalf("%d cluster variants in the suite and %d in Extended, want one each", len(ci), len(ext))
	}
	ran := map[Scenario]bool{}
	for _, v := range append(ci, ext...) {
		if !v.RunsKubelet() || v.Kubelet {
			t.Errorf("%s: RunsKubelet %v, Kubelet %v; want the registered kubelet only", v.Name, v.RunsKubelet(), v.Kubelet)
		}
		for _, s := range v.Scenarios {
			ran[s] = true
		}
	}
	for _, s := range AllScenarios() {
		if s.NeedsCluster() && s != ClusterMixedFleetNode && !ran[s] {
			t.Errorf("no cluster boot runs %s", s)
		}
	}
	// CI's cluster boot has neither a second guest nor the engines image
	// nor the previous release (its build and the upgrade from it are the
	// extended boot's).
	if _, ok := MixedFleetNode(ci[0]); ok || ci[0].NeedsEngines() || ci[0].NeedsPrevious() {
		t.Errorf("CI's %s boots a second node, carries the engines image or installs the previous release", ci[0].Name)
	}
	// The extended boot upgrades from the previous release before its
	// own install, which then installs on a node the upgrade left clean.
	if !ext[0].NeedsPrevious() {
		t.Errorf("Extended's %s does not upgrade from the previous release", ext[0].Name)
	}
	from, install := slices.Index(ext[0].Scenarios, ClusterUpgradeFromPrevious), slices.Index(ext[0].Scenarios, ClusterRegistryInstall)
	if from < 0 || install < 0 || from > install {
		t.Errorf("%s runs %s at %d and %s at %d; want the upgrade from the previous release first", ext[0].Name, ClusterUpgradeFromPrevious, from, ClusterRegistryInstall, install)
	}
}

// TestNeedsPrevious: only ClusterUpgradeFromPrevious needs the previous
// release, and a variant needs it exactly when it runs that scenario.
func TestNeedsPrevious(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    Variant
		want bool
	}{
		{"none", Variant{}, false},
		{"install and upgrade", Variant{Scenarios: []Scenario{ClusterRegistryInstall, ClusterRegistryUpgrade}}, false},
		{"from previous", Variant{Scenarios: []Scenario{ClusterNodeReady, ClusterUpgradeFromPrevious}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.NeedsPrevious(); got != tc.want {
				t.Errorf("NeedsPrevious() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestScenarioKnown(t *testing.T) {
	for _, s := range AllScenarios() {
		if !s.Known() || !isToken(string(s)) {
			t.Errorf("scenario %q: known %v, token %v", s, s.Known(), isToken(string(s)))
		}
	}
	if n := len(AllScenarios()); n != len(slices.Compact(slices.Sorted(slices.Values(AllScenarios())))) {
		t.Errorf("AllScenarios lists a scenario twice")
	}
	for _, s := range []Scenario{"", "TestHarness", "harness"} {
		if s.Known() {
			t.Errorf("Scenario(%q).Known() = true", s)
		}
	}
}

// TestDaemonSetVariants: a variant that runs cgdelegate as the DaemonSet's
// pod (static, or installed with helm) gets the release image and loads the shipped containerd drop-in as
// written (FailClosed); no other variant carries the image.
func TestDaemonSetVariants(t *testing.T) {
	n := 0
	for _, v := range withFollowers(append(append(Suite(), Extended()...), DemoVariant(), BenchVariant())) {
		ds := v.Plugin == PluginDaemonSet || v.Plugin == PluginHelm
		if v.NeedsReleaseImage() != ds {
			t.Errorf("%s: NeedsReleaseImage %v, plugin %s", v.Name, v.NeedsReleaseImage(), v.Plugin)
		}
		if v.CarriesReleaseArchive() != (v.Plugin == PluginDaemonSet) {
			t.Errorf("%s: CarriesReleaseArchive %v, plugin %s: only the static pod imports the archive, helm pulls", v.Name, v.CarriesReleaseArchive(), v.Plugin)
		}
		if ds && !v.FailClosed {
			t.Errorf("%s runs the DaemonSet's pod without the shipped containerd drop-in", v.Name)
		}
		if ds {
			n++
		}
	}
	if n == 0 {
		t.Error("no variant runs cgdelegate as the DaemonSet's pod")
	}
}

// TestSystemdSelector: `go test -run 'TestVM/.*Systemd'` selects exactly
// the variants whose PID 1 is systemd, and there is at least one.
func TestSystemdSelector(t *testing.T) {
	sel := regexp.MustCompile(".*" + SystemdMark)
	n := 0
	for _, v := range Suite() {
		t.Run(v.Name, func(t *testing.T) {
			if got := sel.MatchString(v.Name); got != v.Systemd {
				t.Errorf("selector matches %v, Systemd = %v", got, v.Systemd)
			}
		})
		if v.Systemd {
			n++
		}
	}
	if n == 0 {
		t.Error("the suite has no systemd variant")
	}
}

// TestAppArmorNodes: the writable, hook and in-pod scenarios run under
// containerd's default profile on an AppArmor node (a standalone kubelet's
// systemd node), the chart's pod and its engine profiles on another (a
// cluster that sets the chart's values), and the engine stories there; the
// second node of the mixed fleet is the systemd node without AppArmor.
func TestAppArmorNodes(t *testing.T) {
	var kubelet, cluster, stories bool
	for _, v := range append(Suite(), Extended()...) {
		if !v.AppArmor {
			continue
		}
		kubelet = kubelet || (v.Kubelet && slices.Contains(v.Scenarios, InPodNestedRunc) && slices.Contains(v.Scenarios, InPodSystemd))
		cluster = cluster || (v.Cluster && slices.Contains(v.Scenarios, ClusterHelmSetConfig))
		stories = stories || (slices.Contains(v.Scenarios, ClusterDocker) && slices.Contains(v.Scenarios, ClusterPodman))
		if f, ok := MixedFleetNode(v); ok && (f.AppArmor || !f.Systemd) {
			t.Errorf("the second node of %s: Systemd %v, AppArmor %v; want the systemd node without AppArmor", v.Name, f.Systemd, f.AppArmor)
		}
	}
	if !kubelet || !cluster || !stories {
		t.Errorf("AppArmor nodes: kubelet with nested runc and systemd %v, a cluster with the chart's values %v, the engine stories %v; want all", kubelet, cluster, stories)
	}
}

// TestBenchVariant: `make bench-node` boots a pinning variant with a
// kubelet and only the BenchNode scenario, and `make boots` never does.
func TestBenchVariant(t *testing.T) {
	v := BenchVariant()
	if !v.Pinning || !v.NUMA || v.SMP != 4 || v.Plugin != PluginExternal || !v.Kubelet || !slices.Equal(v.Scenarios, []Scenario{BenchNode}) {
		t.Errorf("BenchVariant() = %+v, want the demo's pinning machine and a kubelet (the anchor) with only %s", v, BenchNode)
	}
	for _, s := range Suite() {
		if s.Name == v.Name || slices.Contains(s.Scenarios, BenchNode) {
			t.Errorf("the suite's %s boots the bench", s.Name)
		}
	}
}

// TestMixedFleetNode: Extended's cluster boot brings a second node, small
// (one CPU), without nsdelegate, running only its side of
// ClusterMixedFleet, whose scenario comes after ClusterNodeLabel (the label
// it compares against) and before any ClusterHelmUninstall (which removes
// the chart); a boot without ClusterMixedFleet (CI's cluster boot, or
// CGD_SCENARIOS) has no second node.
func TestMixedFleetNode(t *testing.T) {
	var leader Variant
	for _, v := range Extended() {
		if v.Cluster {
			leader = v
		}
	}
	f, ok := MixedFleetNode(leader)
	if !ok {
		t.Fatalf("MixedFleetNode(%s): no second node", leader.Name)
	}
	if err := f.Validate(); err != nil {
		t.Errorf("%s: %v", f.Name, err)
	}
	if f.NSDelegate || f.SMP != 1 || f.NUMA || f.NeedsEngines() || !f.Cluster || f.Plugin != PluginHelm ||
		f.Containerd != leader.Containerd || !slices.Equal(f.Scenarios, []Scenario{ClusterMixedFleetNode}) || f.Name == leader.Name {
		t.Errorf("MixedFleetNode(%s) = %+v; want one CPU, no nsdelegate, no engines, the chart's plugin, only %s", leader.Name, f, ClusterMixedFleetNode)
	}
	at := func(s Scenario) int { return slices.Index(leader.Scenarios, s) }
	if at(ClusterNodeLabel) >= at(ClusterMixedFleet) || (at(ClusterHelmUninstall) >= 0 && at(ClusterMixedFleet) >= at(ClusterHelmUninstall)) {
		t.Errorf("%s runs %v; want %s after %s and before %s", leader.Name, leader.Scenarios, ClusterMixedFleet, ClusterNodeLabel, ClusterHelmUninstall)
	}
	without := leader
	without.Scenarios = []Scenario{ClusterNodeReady, ClusterNodeLabel}
	if _, ok := MixedFleetNode(without); ok {
		t.Errorf("a cluster boot without %s got a second node", ClusterMixedFleet)
	}
	for _, v := range append(Suite(), Extended()...) {
		if _, ok := MixedFleetNode(v); ok != (v.Cluster && slices.Contains(v.Scenarios, ClusterMixedFleet)) {
			t.Errorf("%s: second node %v, cluster %v, scenarios %v", v.Name, ok, v.Cluster, v.Scenarios)
		}
	}
}

// TestExtended: the extended boots hold the size checks, the start
// latency, the eight-CPU oracle and containerd 2.3, and CI's suite none of
// them; each validates.
func TestExtended(t *testing.T) {
	long := []Scenario{ScaleChurn, ScaleRestart, KubeletPinningOracle, KubeletStartLatency}
	releases := map[string]bool{}
	for _, v := range Extended() {
		releases[v.Containerd] = true
	}
	if !releases[Containerd23] {
		t.Errorf("Extended() boots no containerd %s", Containerd23)
	}
	for _, v := range Suite() {
		if v.Containerd != Containerd24 {
			t.Errorf("the CI suite's %s boots containerd %s; CI boots %s only", v.Name, v.Containerd, Containerd24)
		}
	}
	var got []Scenario
	for _, v := range Extended() {
		if err := v.Validate(); err != nil {
			t.Errorf("%s: %v", v.Name, err)
		}
		got = append(got, v.Scenarios...)
	}
	for _, s := range long {
		if !slices.Contains(got, s) {
			t.Errorf("Extended() does not run %s", s)
		}
	}
	for _, v := range Suite() {
		for _, s := range long {
			if slices.Contains(v.Scenarios, s) {
				t.Errorf("the CI suite's %s runs %s, an extended check", v.Name, s)
			}
		}
	}
}
