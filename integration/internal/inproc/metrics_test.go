package inproc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/stub"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/nri"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/status"
	decide "github.com/cgdelegate/cgdelegate/internal/writable"
)

// metricsEnv connects the plugin with the Prometheus recorder, wired as
// cmd/cgdelegate wires it.
func metricsEnv(t *testing.T, nsdelegate bool) (*env, *metrics.Recorder) {
	t.Helper()
	var e *env
	rec := metrics.New(metrics.Options{
		Supported:  func() bool { return e.adv.Report().Supported },
		Pinning:    func() *status.Pinning { return e.p.Pinning() },
		Delegation: func() *status.Delegation { return e.p.Delegation() },
	})
	// The opt-in policy allows writable cgroups in namespace default only.
	e = setupStub(t, nsdelegate, func(c *config.Config) { c.OptIn.Namespaces = []string{"default"} },
		[]stub.Option{metrics.StubOption(rec)}, nri.WithMetrics(rec))
	return e, rec
}

// Containers created over NRI are counted by result and cause, exactly.
func TestMetricsOverNRI(t *testing.T) {
	e, rec := metricsEnv(t, true)
	ann := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	w := annotations.WritableCgroups.Name
	creates := []struct {
		ns, parent string
		ann        map[string]string
		opts       []ContainerOption
		refused    bool
	}{
		{"default", cgroupfsParent, nil, nil, false},
		{"default", cgroupfsParent, nil, nil, false},
		{"default", cgroupfsParent, ann(w, "true"), nil, false},
		{"default", cgroupfsParent, ann(w, "true"), nil, false},
		{"default", cgroupfsParent, ann(w, "true"), nil, false},
		{"default", cgroupfsParent, nil, []ContainerOption{WithRuntimeWritable()}, false},
		{"default", cgroupfsParent, ann(w, "ReadOnly"), []ContainerOption{WithRuntimeWritable()}, false},
		{"default", cgroupfsParent, ann(w, "true"), []ContainerOption{WithPrivileged()}, false},
		{"denied", cgroupfsParent, ann(w, "true"), nil, true},
		{"default", cgroupfsParent, ann(w, "yes"), nil, true},
		{"default", cgroupfsParent, ann(w, "true", annotations.MaxDepth.Name, "deep"), nil, true},
		{"default", cgroupfsParent, ann(w, "true"), []ContainerOption{WithSharedCgroupNS("/proc/7/ns/cgroup")}, true},
		{"default", "/kubepods/burstable/podgone", ann(w, "true"), nil, true},
		{"default", "", ann(w, "true"), nil, true},
	}
	for i, c := range creates {
		pod := Pod(fmt.Sprintf("web%d", i), fmt.Sprintf("u%d", i), c.parent, c.ann)
		pod.Namespace = c.ns
		_, err := e.create(t, pod, Container(pod, "app", c.opts...))
		if (err != nil) != c.refused {
			t.Fatalf("create %d: err = %v, want refused %v", i, err, c.refused)
		}
	}
	want := `
# HELP cgdelegate_containers_total CreateContainer decisions, by result: the cgroup mount outcome (unchanged, writable, readonly, guarded, privileged) or refused.
# TYPE cgdelegate_containers_total counter
cgdelegate_containers_total{result="guarded"} 1
cgdelegate_containers_total{result="privileged"} 1
cgdelegate_containers_total{result="readonly"} 1
cgdelegate_containers_total{result="refused"} 6
cgdelegate_containers_total{result="unchanged"} 2
cgdelegate_containers_total{result="writable"} 3
# HELP cgdelegate_refusals_total Refused containers, by cause: policy, bad_annotation, cgroup_v1, no_nsdelegate, no_cgroupns, pod_bounds, shared_cgroup, node_budget, pinning, other.
# TYPE cgdelegate_refusals_total counter
cgdelegate_refusals_total{cause="bad_annotation"} 2
cgdelegate_refusals_total{cause="cgroup_v1"} 0
cgdelegate_refusals_total{cause="no_cgroupns"} 1
cgdelegate_refusals_total{cause="no_nsdelegate"} 0
cgdelegate_refusals_total{cause="node_budget"} 0
cgdelegate_refusals_total{cause="other"} 0
cgdelegate_refusals_total{cause="pinning"} 0
cgdelegate_refusals_total{cause="pod_bounds"} 2
cgdelegate_refusals_total{cause="policy"} 1
cgdelegate_refusals_total{cause="shared_cgroup"} 0
# HELP cgdelegate_node_supported 1 when the node supports writable cgroups (cgroup v2 with nsdelegate), else 0.
# TYPE cgdelegate_node_supported gauge
cgdelegate_node_supported 1
`
	if err := testutil.GatherAndCompare(rec.Registry(), strings.NewReader(want),
		metrics.ContainersTotal, metrics.RefusalsTotal, metrics.NodeSupported, metrics.CPUs); err != nil {
		t.Fatal(err)
	}
	// Every request the runtime sent is timed on the stub's ttrpc server,
	// under its NRI event name.
	for event, n := range map[string]int{"CreateContainer": len(creates), "Configure": 1, "Synchronize": 1} {
		if got := histogramCount(t, rec, event); got != uint64(n) {
			t.Errorf("%s durations observed %d, want %d", event, got, n)
		}
	}
}

// On a host without nsdelegate the node is unsupported and writable
// containers are refused for it.
func TestMetricsUnsupportedNode(t *testing.T) {
	e, rec := metricsEnv(t, false)
	pod := Pod("web", "u1", cgroupfsParent, writableAnn(""))
	if _, err := e.create(t, pod, Container(pod, "app")); err == nil {
		t.Fatal("not refused")
	}
	want := `
# HELP cgdelegate_node_supported 1 when the node supports writable cgroups (cgroup v2 with nsdelegate), else 0.
# TYPE cgdelegate_node_supported gauge
cgdelegate_node_supported 0
`
	if err := testutil.GatherAndCompare(rec.Registry(), strings.NewReader(want), metrics.NodeSupported); err != nil {
		t.Fatal(err)
	}
	for cause, n := range map[string]float64{string(refusal.NoNsdelegate): 1, string(refusal.CgroupV1): 0} {
		if got := counter(t, rec, metrics.RefusalsTotal, "cause", cause); got != n {
			t.Errorf("refusals{cause=%q} = %v, want %v", cause, got, n)
		}
	}
}

// counter reads one counter series from the recorder's registry.
func counter(t *testing.T, rec *metrics.Recorder, name, label, value string) float64 {
	t.Helper()
	families, err := rec.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}

// histogramCount is how many durations of event were observed.
func histogramCount(t *testing.T, rec *metrics.Recorder, event string) uint64 {
	t.Helper()
	families, err := rec.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != metrics.EventDuration {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == event {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	t.Fatalf("no %s for %s", metrics.EventDuration, event)
	return 0
}

// With CPU pinning on, the CPU pools, the asynchronous updates and the
// pinning refusals are exported.
func TestMetricsPinning(t *testing.T) {
	var e *pinEnv
	rec := metrics.New(metrics.Options{Pinning: func() *status.Pinning { return e.p.Pinning() }})
	e = setupPinningStub(t, nil, []stub.Option{metrics.StubOption(rec)}, nri.WithMetrics(rec))
	plain := Pod("plain", "p0", cgroupfsParent, nil)
	e.mustRunPod(plain)
	e.mustCreate(plain, Container(plain, "app"))
	pod := budgetPod("budget", "p1", 4)
	e.mustRunPod(pod)
	e.applyAsync() // the plain container shrinks: one update
	e.mustCreate(pod, Container(pod, "guaranteed", WithGuaranteedCPUs(1, gi)))
	if _, err := e.create(pod, Container(pod, "huge", WithGuaranteedCPUs(8, gi))); err == nil {
		t.Fatal("a container above the pod budget was not refused")
	}
	want := `
# HELP cgdelegate_container_updates_total Container updates sent to the runtime after an event (CPU pool changes), by result: sent or failed.
# TYPE cgdelegate_container_updates_total counter
cgdelegate_container_updates_total{result="failed"} 0
cgdelegate_container_updates_total{result="sent"} 1
# HELP cgdelegate_cpus CPUs by pool while CPU pinning is active: reserved (never handed out), node_shared (the node shared pool), pod_bubbles (in pod bubbles), exclusive (held by exclusive containers).
# TYPE cgdelegate_cpus gauge
cgdelegate_cpus{pool="exclusive"} 1
cgdelegate_cpus{pool="node_shared"} 12
cgdelegate_cpus{pool="pod_bubbles"} 4
cgdelegate_cpus{pool="reserved"} 0
`
	if err := testutil.GatherAndCompare(rec.Registry(), strings.NewReader(want), metrics.ContainerUpdatesTotal, metrics.CPUs); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{metrics.ContainersTotal, "result", "unchanged", 2},
		{metrics.ContainersTotal, "result", "refused", 1},
		{metrics.RefusalsTotal, "cause", string(refusal.Pinning), 1},
	} {
		if got := counter(t, rec, c.name, c.label, c.value); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
		}
	}
	if got := histogramCount(t, rec, "RunPodSandbox"); got != 2 {
		t.Errorf("RunPodSandbox durations observed %d, want 2", got)
	}
}

// A runtime whose default validator rejects OCI hooks (containerd's
// config, or CRI-O's drop-in): the plugin refuses the writable container
// itself, naming the setting and the file of the runtime it runs under,
// counts it as a policy refusal, and lets a plain container through. The
// rule is wired as cmd/cgdelegate wires it, by the runtime seen in Configure.
func TestValidatorRejectsHookOverNRI(t *testing.T) {
	dir := t.TempDir()
	ctdConfig := filepath.Join(dir, "config.toml")
	crioDropIns := filepath.Join(dir, "crio.conf.d")
	crioDropIn := filepath.Join(crioDropIns, "20-hardening.conf")
	for path, content := range map[string]string{
		ctdConfig: `version = 3
[plugins."io.containerd.nri.v1.nri".default_validator]
  enable = true
  reject_oci_hook_adjustment = true
`,
		crioDropIn: `[crio.nri.default_validator]
nri_enable_default_validator = true
nri_validator_reject_oci_hook_adjustment = true
`,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		runtime string
		want    []string
	}{
		{"containerd", []string{
			"containerd's NRI default validator", "reject_oci_hook_adjustment = true", ctdConfig,
			"set reject_oci_hook_adjustment = false there and restart containerd",
		}},
		{"cri-o", []string{
			"CRI-O's NRI default validator", "nri_validator_reject_oci_hook_adjustment = true under [crio.nri.default_validator]",
			crioDropIn, "set nri_validator_reject_oci_hook_adjustment = false there and restart CRI-O",
		}},
	} {
		t.Run(tc.runtime, func(t *testing.T) {
			rec := metrics.New(metrics.Options{})
			rule := func(cfg config.Config, runtime string) decide.Check {
				check, err := decide.ValidatorRule(cfg, config.RuntimeOf(runtime))
				if err != nil {
					t.Errorf("validator settings: %v", err)
				}
				return check
			}
			e := setupRuntime(t, tc.runtime, true, func(c *config.Config) {
				c.ContainerdConfig, c.CRIOConfig, c.CRIOConfigDir = ctdConfig, config.Disabled, crioDropIns
			}, []stub.Option{metrics.StubOption(rec)}, nri.WithMetrics(rec), nri.WithRuntimeAdmission(rule))
			pod := Pod("web", "u1", cgroupfsParent, writableAnn(""))
			_, err := e.create(t, pod, Container(pod, "app"))
			if err == nil {
				t.Fatal("a writable container was not refused")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal does not mention %q: %v", want, err)
				}
			}
			plain := Pod("plain", "u2", cgroupfsParent, nil)
			if _, err := e.create(t, plain, Container(plain, "app")); err != nil {
				t.Fatalf("plain container: %v", err)
			}
			for _, c := range []struct {
				name, label, value string
				want               float64
			}{
				{metrics.ContainersTotal, "result", "refused", 1},
				{metrics.ContainersTotal, "result", "unchanged", 1},
				{metrics.RefusalsTotal, "cause", string(refusal.Policy), 1},
			} {
				if got := counter(t, rec, c.name, c.label, c.value); got != c.want {
					t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
				}
			}
		})
	}
}
