package variant

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// kernelNoise is what the host puts on the command line besides a variant.
const kernelNoise = "console=ttyS0 panic=-1 quiet cgdx=1 random.trust_cpu=on"

func TestRoundTrip(t *testing.T) {
	custom := Variant{
		Name: "custom_1.x-Systemd", Containerd: "v9.9.9", Plugin: PluginNone, CgroupWritable: true, FailClosed: true, Systemd: true, SMP: 1,
		Scenarios: []Scenario{Demo, Harness},
	}
	kubelet := Variant{
		Name: "custom-Kubelet", Containerd: "v9.9.9", Plugin: PluginExternal, SMP: 2, Kubelet: true,
		Scenarios: []Scenario{Harness, KubeletStartLatency},
	}
	apparmor := Variant{
		Name: "custom-Systemd-AppArmor", Containerd: "v9.9.9", Plugin: PluginExternal, Systemd: true, AppArmor: true, SMP: 2,
		Scenarios: []Scenario{Harness},
	}
	cluster := Variant{
		Name: "custom-Cluster", Containerd: "v9.9.9", Plugin: PluginExternal, Pinning: true, SMP: 4, NUMA: true, Cluster: true,
		Scenarios: []Scenario{ClusterNodeReady},
	}
	for _, v := range append(Suite(), DemoVariant(), BenchVariant(), custom, kubelet, apparmor, cluster) {
		t.Run(v.Name, func(t *testing.T) {
			enc, err := v.Encode()
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(kernelNoise + " " + enc + " init=/init")
			if err != nil {
				t.Fatalf("Decode(%q): %v", enc, err)
			}
			if !reflect.DeepEqual(got, v) {
				t.Errorf("Decode(Encode(v)) = %+v, want %+v", got, v)
			}
		})
	}
}

// TestEncodeNSDelegate: init.sh mounts cgroup2 without nsdelegate when it
// finds the word cgd.nsdelegate=0 on the command line.
func TestEncodeNSDelegate(t *testing.T) {
	for _, tc := range []struct {
		nsdelegate bool
		word       string
	}{{false, "cgd.nsdelegate=0"}, {true, "cgd.nsdelegate=1"}} {
		v := DemoVariant()
		v.NSDelegate = tc.nsdelegate
		enc, err := v.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Fields(enc), tc.word) {
			t.Errorf("NSDelegate %v: %q has no word %s", tc.nsdelegate, enc, tc.word)
		}
	}
}

// TestEncodeKubelet: the kubelet is one word of the command line.
func TestEncodeKubelet(t *testing.T) {
	for _, tc := range []struct {
		name string
		on   bool
		word string
	}{{"ctd-Kubelet", true, "cgd.kubelet=1"}, {"ctd", false, "cgd.kubelet=0"}} {
		v := Variant{Name: tc.name, Containerd: Containerd24, Plugin: PluginExternal, SMP: 2, Kubelet: tc.on, Scenarios: []Scenario{Harness}}
		enc, err := v.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Fields(enc), tc.word) {
			t.Errorf("Kubelet %v: %q has no word %s", tc.on, enc, tc.word)
		}
	}
}

func TestEncodeInvalid(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Variant)
		key    string
		value  string
	}{
		{"name with a space", func(v *Variant) { v.Name = "a b" }, "variant", "a b"},
		{"no name", func(v *Variant) { v.Name = "" }, "variant", ""},
		{"containerd with a comma", func(v *Variant) { v.Containerd = "v2,4" }, "containerd", "v2,4"},
		{"unknown plugin mode", func(v *Variant) { v.Plugin = "sidecar" }, "plugin", "sidecar"},
		{"no CPUs", func(v *Variant) { v.SMP = 0 }, "smp", "0"},
		{"NUMA on three CPUs", func(v *Variant) { v.SMP = 3 }, "numa", "1"},
		{"no scenarios", func(v *Variant) { v.Scenarios = nil }, "scenarios", ""},
		{"unknown scenario", func(v *Variant) { v.Scenarios = []Scenario{"TestS01AnnotatedWritable"} }, "scenarios", "TestS01AnnotatedWritable"},
		{"scenario twice", func(v *Variant) { v.Scenarios = []Scenario{Demo, Demo} }, "scenarios", "Demo,Demo"},
		{"systemd without the name mark", func(v *Variant) { v.Systemd = true }, "systemd", "1"},
		{"name mark without systemd", func(v *Variant) { v.Name = "demo-Systemd" }, "systemd", "0"},
		{"AppArmor without the name mark", func(v *Variant) { v.Name, v.Systemd, v.AppArmor = "demo-Systemd", true, true }, "apparmor", "1"},
		{"AppArmor name mark without AppArmor", func(v *Variant) { v.Name, v.Systemd = "demo-Systemd-AppArmor", true }, "apparmor", "0"},
		{"AppArmor without systemd", func(v *Variant) { v.Name, v.AppArmor = "demo-AppArmor", true }, "apparmor", "1"},
		{"kubelet scenario without a kubelet", func(v *Variant) { v.Scenarios = []Scenario{KubeletWritable} }, "scenarios", "KubeletWritable"},
		{"kubelet not named", func(v *Variant) { v.Kubelet = true }, "kubelet", "1"},
		{"DaemonSet pod without a kubelet", func(v *Variant) { v.Plugin = PluginDaemonSet }, "plugin", "daemonset"},
		{"helm without a cluster", func(v *Variant) { v.Plugin = PluginHelm }, "plugin", "helm"},
		{"named Kubelet without one", func(v *Variant) { v.Name = "ctd24-Kubelet" }, "kubelet", "0"},
		{"cluster not named", func(v *Variant) { v.Cluster = true }, "cluster", "1"},
		{"named Cluster without one", func(v *Variant) { v.Name = "ctd24-Cluster" }, "cluster", "0"},
		{"cluster scenario without a cluster", func(v *Variant) { v.Scenarios = []Scenario{ClusterResizeUnpinned} }, "scenarios", "ClusterResizeUnpinned"},
		{"cluster and the standalone kubelet", func(v *Variant) {
			v.Name, v.Cluster, v.Kubelet = "ctd24-Cluster-Kubelet", true, true
		}, "cluster", "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := DemoVariant()
			tc.modify(&v)
			enc, err := v.Encode()
			if err == nil {
				t.Fatalf("Encode succeeded: %q", enc)
			}
			assertParamError(t, err, ErrInvalid, tc.key, tc.value)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	valid, err := DemoVariant().Encode()
	if err != nil {
		t.Fatal(err)
	}
	// with replaces the parameter key of the valid command line (or
	// appends it when it is new); an empty param drops the key.
	with := func(key, param string) string {
		var out []string
		replaced := false
		for _, f := range strings.Fields(valid) {
			if k, _, _ := strings.Cut(f, "="); k == Prefix+key {
				replaced = true
				if param != "" {
					out = append(out, param)
				}
				continue
			}
			out = append(out, f)
		}
		if !replaced {
			out = append(out, param)
		}
		return strings.Join(out, " ")
	}
	tests := []struct {
		name    string
		cmdline string
		want    error
		key     string
		value   string
	}{
		{"bool not 0 or 1", with("nsdelegate", "cgd.nsdelegate=yes"), ErrInvalid, "nsdelegate", "yes"},
		{"empty bool", with("pinning", "cgd.pinning="), ErrInvalid, "pinning", ""},
		{"bare key", with("numa", "cgd.numa"), ErrInvalid, "numa", ""},
		{"kubelet not 0 or 1", with("kubelet", "cgd.kubelet=true"), ErrInvalid, "kubelet", "true"},
		{"kubelet in a variant not named for it", with("kubelet", "cgd.kubelet=1"), ErrInvalid, "kubelet", "1"},
		{"cluster not 0 or 1", with("cluster", "cgd.cluster=yes"), ErrInvalid, "cluster", "yes"},
		{"cluster in a variant not named for it", with("cluster", "cgd.cluster=1"), ErrInvalid, "cluster", "1"},
		{"cluster missing", with("cluster", ""), ErrMissing, "cluster", ""},
		{"CPUs not a number", with("smp", "cgd.smp=four"), ErrInvalid, "smp", "four"},
		{"zero CPUs", with("smp", "cgd.smp=0"), ErrInvalid, "smp", "0"},
		{"odd CPUs on two nodes", with("smp", "cgd.smp=3"), ErrInvalid, "numa", "1"},
		{"unknown plugin mode", with("plugin", "cgd.plugin=sidecar"), ErrInvalid, "plugin", "sidecar"},
		{"unknown scenario", with("scenarios", "cgd.scenarios=Demo,TestDemo"), ErrInvalid, "scenarios", "Demo,TestDemo"},
		{"empty scenario list", with("scenarios", "cgd.scenarios="), ErrInvalid, "scenarios", ""},
		{"name with a slash", with("variant", "cgd.variant=a/b"), ErrInvalid, "variant", "a/b"},
		{"missing key", with("containerd", ""), ErrMissing, "containerd", ""},
		{"unknown key", with("tests", "cgd.tests=TestHarness"), ErrUnknown, "tests", "TestHarness"},
		{"key given twice", valid + " cgd.smp=8", ErrRepeated, "smp", "8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Decode(tc.cmdline)
			if err == nil {
				t.Fatalf("Decode(%q) = %+v, want an error", tc.cmdline, v)
			}
			assertParamError(t, err, tc.want, tc.key, tc.value)
		})
	}
	t.Run("no variant at all", func(t *testing.T) {
		_, err := Decode(kernelNoise)
		for _, k := range keys {
			if !strings.Contains(err.Error(), "cgd."+k+": missing") {
				t.Errorf("error does not say cgd.%s is missing: %v", k, err)
			}
		}
	})
}

// assertParamError checks that err holds a *ParamError for key and value
// wrapping want, and that its message names both.
func assertParamError(t *testing.T, err, want error, key, value string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("error %q is not %v", err, want)
	}
	var pe *ParamError
	if !errors.As(err, &pe) || pe.Key != key || pe.Value != value {
		t.Fatalf("error %q: want a ParamError for %s=%q, got %#v", err, key, value, pe)
	}
	wantText := "cgd." + key
	if !errors.Is(want, ErrMissing) {
		wantText += `="` + value + `"`
	}
	if !strings.Contains(err.Error(), wantText) {
		t.Errorf("error %q does not name %s", err, wantText)
	}
}
