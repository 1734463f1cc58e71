//go:build integration_guest

package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// metricsAddress is where the external plugin serves /metrics in a variant
// that runs MetricsScraped (pluginConfigYAML).
const metricsAddress = "127.0.0.1:9767"

// reloadPlugin writes config as the external plugin's -config file, sends
// it SIGHUP and waits for the plugin to log that it reloaded.
func (e *guestEnv) reloadPlugin(ctx context.Context, t *testing.T, config string) {
	t.Helper()
	if e.variant.Plugin != variant.PluginExternal || e.plugin == nil {
		t.Fatalf("variant %s: reloading the config needs the external plugin", e.variant.Name)
	}
	from := fileSize(e.paths.PluginLog)
	if err := writeFile(e.paths.PluginYAML, config); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(e.plugin.Pid(), syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP cgdelegate: %v", err)
	}
	err := waitLog(ctx, e.paths.PluginLog, from, 30*time.Second, func(l string) bool {
		return strings.Contains(l, "config reloaded") || strings.Contains(l, "not reloaded")
	}, func() error {
		if !e.plugin.Running() {
			return fmt.Errorf("cgdelegate exited")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("cgdelegate did not reload %q: %v\n%s", config, err, fileTail(e.paths.PluginLog, 10))
	}
	if tail := fileTail(e.paths.PluginLog, 5); strings.Contains(tail, "not reloaded") {
		t.Fatalf("cgdelegate refused the config %q:\n%s", config, tail)
	}
}

// optInPolicy: the node's opt-in policy, put in force by SIGHUP. It shows
// what containerd 2.4 sends NRI: PodSandbox.RuntimeHandler is the CRI
// request's runtime handler as given (empty for the default runtime, not
// the default runtime's name), and a hostUsers: false pod has a user
// namespace in its Linux namespaces.
func optInPolicy(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	base := pluginConfigYAML(e.variant)
	t.Cleanup(func() { e.reloadPlugin(context.Background(), t, base) })
	before := e.scrapeIfServed(ctx, t)

	e.reloadPlugin(ctx, t, base+"optIn:\n  namespaces: [\"team-*\"]\n  runtimeHandlers: [\"runc\"]\n")
	refused := 0
	for _, tc := range []struct {
		name, namespace, handler, want string
	}{
		{"outside-namespace", "default", "runc", `namespace "default" is not in optIn.namespaces ["team-*"]`},
		// No RuntimeClass: containerd runs its default runtime (runc) but
		// sends NRI the empty handler the CRI request had.
		{"default-handler", "team-a", "", `runtime handler "" is not in optIn.runtimeHandlers ["runc"]`},
	} {
		pod := e.runPod(ctx, t, cri.PodSpec{Name: tc.name, Namespace: tc.namespace, RuntimeHandler: tc.handler, Annotations: writable()})
		_, err := pod.CreateContainer(ctx, sleeper("refused", 0))
		requireErrContains(t, "CreateContainer ("+tc.name+")", err, "optIn", tc.want)
		t.Logf("%s: refusal seen by the CRI client: %v", tc.name, err)
		refused++
	}
	inside := e.runPod(ctx, t, cri.PodSpec{Name: "inside", Namespace: "team-a", RuntimeHandler: "runc", Annotations: writable()})
	assertWritableMount(ctx, t, runContainer(ctx, t, inside, sleeper("writable", 0)))
	// A pod that asks for nothing is not judged.
	plain := e.runPod(ctx, t, cri.PodSpec{Name: "plain", Namespace: "default"})
	runContainer(ctx, t, plain, sleeper("plain", 0))

	e.reloadPlugin(ctx, t, base+"optIn:\n  requireUserNamespace: true\n")
	hostUsers := e.runPod(ctx, t, cri.PodSpec{Name: "host-users", Annotations: writable()})
	_, err := hostUsers.CreateContainer(ctx, sleeper("refused", 0))
	requireErrContains(t, "CreateContainer (hostUsers: true)", err, "optIn.requireUserNamespace", "not in a user namespace")
	refused++
	userns := e.runPod(ctx, t, cri.PodSpec{Name: "userns", Annotations: writable(), UserNS: cri.UserNSPod(65536), PodNetwork: true})
	assertWritableMount(ctx, t, runContainer(ctx, t, userns, sleeper("writable", 0)))
	// Where the verdicts come from: containerd hands NRI the sandbox
	// spec's namespaces (PodSandbox.Linux.Namespaces) and the sandbox's
	// runtime handler, as its verbose pod status shows them.
	for _, c := range []struct {
		pod         *cri.Pod
		wantHandler string
		wantUser    bool
	}{{inside, "runc", false}, {hostUsers, "", false}, {userns, "", true}} {
		handler, nss := e.sandboxInfo(ctx, t, c.pod)
		t.Logf("pod %s: runtime handler %q, sandbox namespaces %v", c.pod.Spec.Name, handler, nss)
		if slices.Contains(nss, "user") != c.wantUser {
			t.Errorf("pod %s: sandbox namespaces %v, want a user namespace %v", c.pod.Spec.Name, nss, c.wantUser)
		}
		if handler != c.wantHandler {
			t.Errorf("pod %s: containerd reports runtime handler %q, want %q (as the CRI request gave it)", c.pod.Spec.Name, handler, c.wantHandler)
		}
	}

	if before == nil {
		return
	}
	after := e.scrape(ctx, t)
	assertDeltas(t, before, after, map[string]float64{
		`cgdelegate_containers_total{result="refused"}`:   float64(refused),
		`cgdelegate_refusals_total{cause="policy"}`:       float64(refused),
		`cgdelegate_containers_total{result="writable"}`:  2,
		`cgdelegate_containers_total{result="unchanged"}`: 1,
	})
}

// sandboxInfo is the pod's runtime handler (CRI pod status) and its
// sandbox spec's namespace types (containerd's verbose status info).
func (e *guestEnv) sandboxInfo(ctx context.Context, t *testing.T, pod *cri.Pod) (string, []string) {
	t.Helper()
	st, err := e.cri.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod.ID, Verbose: true})
	if err != nil {
		t.Fatalf("pod status: %v", err)
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct {
					Type string `json:"type"`
				} `json:"namespaces"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil {
		t.Fatalf("pod status info: %v", err)
	}
	var types []string
	for _, ns := range info.RuntimeSpec.Linux.Namespaces {
		types = append(types, ns.Type)
	}
	return st.GetStatus().GetRuntimeHandler(), types
}

// metricsScraped: /metrics served inside the VM counts exactly the
// containers this scenario creates, by result and refusal cause, and times
// every CreateContainer.
func metricsScraped(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	before := e.scrape(ctx, t)

	plain := e.runPod(ctx, t, cri.PodSpec{Name: "plain"})
	runContainer(ctx, t, plain, sleeper("a", 0))
	runContainer(ctx, t, plain, sleeper("b", 0))
	w := e.runPod(ctx, t, cri.PodSpec{Name: "writable", Annotations: writable()})
	assertWritableMount(ctx, t, runContainer(ctx, t, w, sleeper("w", 0)))
	// The runtime handler with cgroup_writable = true: annotated ReadOnly
	// it is made read-only; unannotated the guard admits it (nsdelegate).
	ro := e.runPod(ctx, t, cri.PodSpec{Name: "readonly", RuntimeHandler: writableHandler, Annotations: map[string]string{writableAnnotation: "ReadOnly"}})
	runContainer(ctx, t, ro, sleeper("ro", 0))
	guarded := e.runPod(ctx, t, cri.PodSpec{Name: "guarded", RuntimeHandler: writableHandler})
	runContainer(ctx, t, guarded, sleeper("g", 0))
	bad := e.runPod(ctx, t, cri.PodSpec{Name: "bad", Annotations: map[string]string{writableAnnotation: "yes"}})
	_, err := bad.CreateContainer(ctx, sleeper("refused", 0))
	requireErrContains(t, "CreateContainer (bad annotation)", err, writableAnnotation, `"yes"`)

	after := e.scrape(ctx, t)
	if got := after[`cgdelegate_node_supported`]; got != 1 {
		t.Errorf("cgdelegate_node_supported = %v, want 1", got)
	}
	assertDeltas(t, before, after, map[string]float64{
		`cgdelegate_containers_total{result="unchanged"}`:                      2,
		`cgdelegate_containers_total{result="writable"}`:                       1,
		`cgdelegate_containers_total{result="readonly"}`:                       1,
		`cgdelegate_containers_total{result="guarded"}`:                        1,
		`cgdelegate_containers_total{result="refused"}`:                        1,
		`cgdelegate_refusals_total{cause="bad_annotation"}`:                    1,
		`cgdelegate_nri_event_duration_seconds_count{event="CreateContainer"}`: 6,
	})
}

// assertDeltas checks that every cgdelegate_containers_total and
// cgdelegate_refusals_total series (and every series in want) changed by
// exactly want's value, 0 when want leaves it out.
func assertDeltas(t *testing.T, before, after map[string]float64, want map[string]float64) {
	t.Helper()
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for _, m := range []map[string]float64{before, after} {
		for k := range m {
			if strings.HasPrefix(k, "cgdelegate_containers_total{") || strings.HasPrefix(k, "cgdelegate_refusals_total{") {
				keys[k] = true
			}
		}
	}
	for k := range keys {
		if _, ok := after[k]; !ok {
			t.Errorf("%s is not exported", k)
			continue
		}
		if got := after[k] - before[k]; got != want[k] {
			t.Errorf("%s went from %v to %v (+%v), want +%v", k, before[k], after[k], got, want[k])
		}
	}
	t.Logf("metrics checked over %d series", len(keys))
}

// scrapeIfServed scrapes /metrics when this variant serves it, else nil.
func (e *guestEnv) scrapeIfServed(ctx context.Context, t *testing.T) map[string]float64 {
	if !servesMetrics(e.variant) {
		return nil
	}
	return e.scrape(ctx, t)
}

// servesMetrics reports whether the variant's plugin config sets
// metricsAddress: for the scenarios that scrape it (the scale ones and the
// bench for the plugin's goroutines).
func servesMetrics(v variant.Variant) bool {
	return v.Plugin == variant.PluginExternal && slices.ContainsFunc(v.Scenarios, func(s variant.Scenario) bool {
		return s == variant.MetricsScraped || s == variant.BenchNode || s == variant.ScaleChurn || s == variant.ScaleRestart ||
			s == variant.DyingCgroups || s == variant.UnsafeAfterStart
	})
}

// scrape reads http://metricsAddress/metrics: every sample, by its name and
// labels as exposed (e.g. cgdelegate_containers_total{result="writable"}).
func (e *guestEnv) scrape(ctx context.Context, t *testing.T) map[string]float64 {
	t.Helper()
	if !servesMetrics(e.variant) {
		t.Fatalf("variant %s does not serve metrics", e.variant.Name)
	}
	body, err := pluginGet(ctx, "/metrics")
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	samples, err := parseSamples(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	return samples
}

// pluginGet reads path from the external plugin's metrics server
// (metricsAddress: /metrics, and /debug/pprof/ with profiling: true),
// asking for text (the Prometheus text format; pprof ignores it). A status
// other than 200 is an error naming the URL, the status and the body.
func pluginGet(ctx context.Context, path string) ([]byte, error) {
	url := "http://" + metricsAddress + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return body, nil
}

// parseSamples reads the Prometheus text format's sample lines.
func parseSamples(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("sample line %q: no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("sample line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// withValidatorSetting restarts containerd, for the scenario's length, with
// a drop-in (imported after the shipped one) that turns on the default
// validator's setting (a reject_* key), and returns the scenario's context.
func (e *guestEnv) withValidatorSetting(t *testing.T, setting string) context.Context {
	t.Helper()
	e.requirePlugin(t)
	if !e.variant.FailClosed || e.variant.Plugin != variant.PluginExternal {
		t.Fatalf("variant %s: this scenario needs the fail-closed drop-in and an external plugin", e.variant.Name)
	}
	ctx := scenarioCtx(t)
	dropIn := "/etc/containerd/conf.d/zz-" + strings.ReplaceAll(setting, "_", "-") + ".toml"
	e.restartContainerdWith(ctx, t, dropIn, `version = 3
[plugins."io.containerd.nri.v1.nri".default_validator]
  enable = true
  `+setting+` = true
`)
	t.Cleanup(func() { e.restartContainerdWith(context.Background(), t, "", "") })
	return ctx
}

// validatorRejectsHook: containerd's default validator with
// reject_oci_hook_adjustment = true refuses every container cgdelegate
// gives its hook; the CRI error a user sees must name that setting.
func validatorRejectsHook(t *testing.T, e *guestEnv) {
	ctx := e.withValidatorSetting(t, "reject_oci_hook_adjustment")

	pod := e.runPod(ctx, t, cri.PodSpec{Name: "annotated", Annotations: writable()})
	_, err := pod.CreateContainer(ctx, sleeper("refused", 0))
	t.Logf("refusal seen by the CRI client: %v", err)
	requireErrContains(t, "CreateContainer (validator rejects hooks)", err, "cgdelegate", "reject_oci_hook_adjustment")
	if cs := e.podContainers(ctx, t, pod); len(cs) != 0 {
		t.Errorf("refused container exists anyway: %v", cs)
	}
	// Containers cgdelegate does not touch get no hook and still run.
	plain := e.runPod(ctx, t, cri.PodSpec{Name: "plain"})
	runContainer(ctx, t, plain, sleeper("plain", 0))
}

// validatorRejectsNamespace: containerd's default validator with
// reject_namespace_adjustment = true refuses any plugin's namespace change.
// cgdelegate adds a cgroup namespace only to a spec that has none, and
// containerd's CRI gives every non-privileged container on a cgroup v2 host
// its own (privileged ones cgdelegate leaves alone): so cgdelegate makes no
// namespace adjustment, the validator refuses nothing, and an opted-in
// container runs writable in its own cgroup namespace. That the validator
// runs with this config shows in a pod requiring a plugin that is not
// there: refused in the validator's words.
func validatorRejectsNamespace(t *testing.T, e *guestEnv) {
	ctx := e.withValidatorSetting(t, "reject_namespace_adjustment")

	absent := e.runPod(ctx, t, cri.PodSpec{Name: "requires-absent", Annotations: map[string]string{requiredPluginsAnnotation: `["absent"]`}})
	_, err := absent.CreateContainer(ctx, sleeper("refused", 0))
	t.Logf("the validator in force: %v", err)
	requireErrContains(t, "CreateContainer (requires a plugin that is not there)", err, `required plugin "absent"`)

	pod := e.runPod(ctx, t, cri.PodSpec{Name: "annotated", Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("writable", 0))
	assertWritableMount(ctx, t, c)
	shOK(ctx, t, c, "mkdir /sys/fs/cgroup/child && rmdir /sys/fs/cgroup/child")
	t.Logf("reject_namespace_adjustment = true: the opted-in container runs writable (containerd gave it a cgroup namespace; cgdelegate added none)")
}

// restartContainerdWith restarts containerd with the suite's config plus
// one more imported drop-in (none when path is empty), and reconnects the
// external plugin.
func (e *guestEnv) restartContainerdWith(ctx context.Context, t *testing.T, path, content string) {
	t.Helper()
	cfg := containerdConfig(e.variant)
	if path != "" {
		if err := writeFile(path, content); err != nil {
			t.Fatal(err)
		}
		cfg = containerdConfig(e.variant, path)
	}
	if err := writeFile(e.paths.ContainerdConfig, cfg); err != nil {
		t.Fatal(err)
	}
	if err := e.restartContainerd(ctx); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
	if err := e.restartPlugin(ctx); err != nil {
		t.Fatalf("restart plugin after containerd: %v", err)
	}
}
