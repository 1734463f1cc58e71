package manifests_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// nodeLabel is the label the chart's ServiceMonitor gives every series, with
// the name of the plugin pod's node.
const nodeLabel = "node"

// The files the monitoring values render, and what they are checked with.
const (
	ruleFile       = "prometheusrule.yaml"
	dashboardFile  = "grafana-dashboard.yaml"
	alertsTestFile = "testdata/alerts_test.yaml"
	dashboardJSON  = "dashboards/cgdelegate.json"
	defaultRunbook = "https://github.com/cgdelegate/cgdelegate/blob/main/docs/troubleshooting.md"
)

// rule is the part of a monitoring.coreos.com/v1 PrometheusRule the
// Prometheus Operator reads (no such type in the module).
type rule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// alerts are the rule's alerts by name.
func (r *rule) alerts() map[string]int {
	names := map[string]int{}
	for _, g := range r.Spec.Groups {
		for i, a := range g.Rules {
			names[a.Alert] = i
		}
	}
	return names
}

// ruleArgs render the PrometheusRule.
var ruleArgs = []string{"--set", "metrics.enabled=true", "--set", "metrics.prometheusRule.enabled=true"}

// renderRule renders the chart with args and strictly decodes its
// PrometheusRule; it also returns the rendered document.
func renderRule(t *testing.T, args ...string) (*rule, []byte) {
	t.Helper()
	files, err := manifests.Template(context.Background(), root, args...)
	if err != nil {
		t.Fatal(err)
	}
	data, ok := files[ruleFile]
	if !ok {
		t.Fatalf("%v renders no %s", args, ruleFile)
	}
	r := new(rule)
	if err := sigsyaml.UnmarshalStrict(data, r); err != nil {
		t.Fatalf("%s: %v", ruleFile, err)
	}
	return r, data
}

// headingAnchor is GitHub's anchor of a Markdown heading: lower case,
// punctuation but - and _ dropped, spaces as -.
func headingAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// troubleshootingAnchors are the anchors of docs/troubleshooting.md's headings.
func troubleshootingAnchors(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(data), -1) {
		anchors[headingAnchor(m[1])] = true
	}
	return anchors
}

// The PrometheusRule is off by default; on, it is a PrometheusRule in the
// release's namespace with the values' labels, every alert has a severity
// and a runbook_url that is its own section of docs/troubleshooting.md,
// and the thresholds, the job and the runbook base are the values'.
func TestChartPrometheusRule(t *testing.T) {
	needGo(t)
	def, err := manifests.Template(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := def[ruleFile]; ok {
		t.Errorf("the default values render a %s", ruleFile)
	}

	r, _ := renderRule(t, append(ruleArgs, "--set", "metrics.prometheusRule.labels.release=prometheus")...)
	if r.APIVersion != "monitoring.coreos.com/v1" || r.Kind != "PrometheusRule" || r.Metadata.Namespace != manifests.Namespace ||
		r.Metadata.Name != manifests.ReleaseName || r.Metadata.Labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule %+v", r.Metadata)
	}
	anchors := troubleshootingAnchors(t)
	if len(r.alerts()) == 0 {
		t.Fatal("the PrometheusRule has no alert")
	}
	for _, g := range r.Spec.Groups {
		for _, a := range g.Rules {
			if sev := a.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", a.Alert, sev)
			}
			if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description: %v", a.Alert, a.Annotations)
			}
			anchor := strings.ToLower(a.Alert)
			if want := defaultRunbook + "#" + anchor; a.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", a.Alert, a.Annotations["runbook_url"], want)
			}
			if !anchors[anchor] {
				t.Errorf("%s: docs/troubleshooting.md has no heading %s (anchor #%s)", a.Alert, a.Alert, anchor)
			}
		}
	}

	// The job CgdelegateDown and CgdelegateAbsent select is the metrics
	// Service's name, which the Prometheus Operator makes the ServiceMonitor
	// targets' job, for any release name.
	for _, release := range []string{manifests.ReleaseName, "team-a"} {
		t.Run("job of release "+release, func(t *testing.T) {
			out, err := manifests.Helm(t.Context(), root, append([]string{
				"template", release, manifests.ChartDir, "--namespace", "ops",
				"--set", "metrics.serviceMonitor.enabled=true",
			}, ruleArgs...)...)
			if err != nil {
				t.Fatal(err)
			}
			files, err := manifests.Split(out)
			if err != nil {
				t.Fatal(err)
			}
			var svc corev1.Service
			if err := sigsyaml.Unmarshal([]byte(strings.Split(string(files["servicemonitor.yaml"]), "\n---\n")[0]), &svc); err != nil {
				t.Fatal(err)
			}
			var r rule
			if err := sigsyaml.UnmarshalStrict(files[ruleFile], &r); err != nil {
				t.Fatal(err)
			}
			want := `up{job="` + svc.Name + `"}`
			for _, name := range []string{"CgdelegateDown", "CgdelegateAbsent"} {
				i, ok := r.alerts()[name]
				if !ok || !strings.Contains(r.Spec.Groups[0].Rules[i].Expr, want) {
					t.Errorf("%s does not select %s", name, want)
				}
			}
		})
	}

	tests := []struct {
		name  string
		set   string
		alert string
		want  string // in the expression, or in runbook_url
	}{
		{"createContainerMilliseconds", "metrics.prometheusRule.createContainerMilliseconds=250", "CgdelegateCreateContainerSlow", "> 0.25"},
		{"delegatedCgroupsPercent", "metrics.prometheusRule.delegatedCgroupsPercent=75", "CgdelegateDelegatedCgroupsNearlyFull", "> 0.75"},
		{"dyingNodeCgroups", "metrics.prometheusRule.dyingNodeCgroups=120000", "CgdelegateDyingCgroups", "> 120000"},
		{"job", "metrics.prometheusRule.job=kube-system/cgdelegate", "CgdelegateDown", `up{job="kube-system/cgdelegate"} == 0`},
		{"runbookURL", "metrics.prometheusRule.runbookURL=https://runbooks.example/cgdelegate.md", "CgdelegateDown", "https://runbooks.example/cgdelegate.md#cgdelegatedown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, _ := renderRule(t, append(ruleArgs, "--set", tc.set)...)
			i, ok := r.alerts()[tc.alert]
			if !ok {
				t.Fatalf("no alert %s", tc.alert)
			}
			a := r.Spec.Groups[0].Rules[i]
			if !strings.Contains(a.Expr, tc.want) && a.Annotations["runbook_url"] != tc.want {
				t.Errorf("%s with %s: expr %q, runbook_url %q, want %q", tc.alert, tc.set, a.Expr, a.Annotations["runbook_url"], tc.want)
			}
		})
	}
}

// promtoolTest is the part of a promtool test rules file the check reads.
type promtoolTest struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name           string `json:"name"`
		AlertRuleTests []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// Every alert of the rule is made to fire by testdata/alerts_test.yaml and
// is expected silent in its healthy test, and the file tests no alert the
// rule does not have (promtool runs it: TestChartRulesPromtool).
func TestChartAlertsTested(t *testing.T) {
	needGo(t)
	r, _ := renderRule(t, ruleArgs...)
	data, err := os.ReadFile(alertsTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var pt promtoolTest
	if err := sigsyaml.Unmarshal(data, &pt); err != nil {
		t.Fatalf("%s: %v", alertsTestFile, err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range pt.Tests {
		for _, a := range tc.AlertRuleTests {
			if _, ok := r.alerts()[a.Alertname]; !ok {
				t.Errorf("%s (%s) tests %s, which the rule does not have", alertsTestFile, tc.Name, a.Alertname)
			}
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else if strings.HasPrefix(tc.Name, "healthy") {
				silent[a.Alertname] = true
			}
		}
	}
	for name := range r.alerts() {
		if !fires[name] {
			t.Errorf("%s makes %s fire in no test", alertsTestFile, name)
		}
		if !silent[name] {
			t.Errorf("%s does not expect %s silent in its healthy test", alertsTestFile, name)
		}
	}
}

// promtool is the promtool binary `make promtool` builds (PROMTOOL, which
// make unit and make promtool-rules set); without it the test is skipped,
// but never under CI, where make test always builds it first.
func promtool(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("PROMTOOL is not set under CI: make test runs this test through make promtool-rules, which builds promtool")
		}
		t.Skip("PROMTOOL is not set: make promtool-rules builds promtool and runs this test")
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PROMTOOL under CI: %v", err)
		}
		t.Skipf("PROMTOOL: %v (make promtool builds it)", err)
	}
	return p
}

// Prometheus's own rule checker accepts the rendered rule's groups, and
// promtool test rules makes each alert fire in testdata/alerts_test.yaml
// (and none on healthy nodes).
func TestChartRulesPromtool(t *testing.T) {
	needGo(t)
	bin := promtool(t)
	_, doc := renderRule(t, ruleArgs...)
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := sigsyaml.Unmarshal(doc, &obj); err != nil {
		t.Fatal(err)
	}
	groups, err := sigsyaml.JSONToYAML(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tests, err := os.ReadFile(alertsTestFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"rules.yaml": groups, "alerts_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.Bytes())
		}
	}
}

// The dashboard ConfigMap is off by default; on, it carries the sidecar's
// label (or the values' labels), in the release's namespace or the
// values', and holds dashboards/cgdelegate.json as it is, whose node
// variable is the label the ServiceMonitor writes.
func TestChartGrafanaDashboard(t *testing.T) {
	needGo(t)
	def, err := manifests.Template(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := def[dashboardFile]; ok {
		t.Errorf("the default values render a %s", dashboardFile)
	}
	want, err := os.ReadFile(filepath.Join(root, manifests.ChartDir, dashboardJSON))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		args        []string
		namespace   string
		labels      map[string]string
		annotations map[string]string
	}{
		{"defaults", nil, manifests.Namespace, map[string]string{"grafana_dashboard": "1"}, nil},
		{
			"namespace, labels and annotations",
			[]string{
				"--set", "metrics.grafanaDashboard.namespace=monitoring", "--set", "metrics.grafanaDashboard.labels.grafana_dashboard=null",
				"--set-string", "metrics.grafanaDashboard.labels.dashboards=cgdelegate", "--set", "metrics.grafanaDashboard.annotations.grafana_folder=Nodes",
			},
			"monitoring",
			map[string]string{"dashboards": "cgdelegate"},
			map[string]string{"grafana_folder": "Nodes"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cm := render[corev1.ConfigMap](t, dashboardFile, append([]string{"--set", "metrics.grafanaDashboard.enabled=true"}, tc.args...)...)
			if cm.Namespace != tc.namespace || cm.Name != manifests.ReleaseName+"-dashboard" {
				t.Errorf("ConfigMap %s/%s, want %s/%s-dashboard", cm.Namespace, cm.Name, tc.namespace, manifests.ReleaseName)
			}
			labels := map[string]string{}
			for k, v := range cm.Labels {
				if !strings.HasPrefix(k, "app.kubernetes.io/") && !strings.HasPrefix(k, "helm.sh/") {
					labels[k] = v
				}
			}
			if !maps.Equal(labels, tc.labels) || !maps.Equal(cm.Annotations, tc.annotations) {
				t.Errorf("labels %v, annotations %v, want %v and %v", cm.Labels, cm.Annotations, tc.labels, tc.annotations)
			}
			if got := cm.Data["cgdelegate.json"]; got != strings.TrimSuffix(string(want), "\n") {
				t.Errorf("cgdelegate.json is not %s as it is (%d bytes, want %d)", dashboardJSON, len(got), len(want))
			}
		})
	}

	var d struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(want, &d); err != nil {
		t.Fatal(err)
	}
	var query any
	found := false
	for _, v := range d.Templating.List {
		if v.Name == nodeLabel {
			query, found = v.Query, true
		}
	}
	if !found {
		t.Fatalf("%s has no variable %s", dashboardJSON, nodeLabel)
	}
	if q, _ := query.(string); !strings.HasSuffix(q, ", "+nodeLabel+")") {
		t.Errorf("%s: variable %s queries %q, not the label %s", dashboardJSON, nodeLabel, q, nodeLabel)
	}
}

// scrapeSeries scrapes a recorder's /metrics over HTTP, as Prometheus
// does, and writes its cgdelegate series as promtool input series of one
// target on node, each value constant for 60 minutes (up included).
func scrapeSeries(t *testing.T, r *metrics.Recorder, node string) string {
	t.Helper()
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	target := fmt.Sprintf(`job="cgdelegate-metrics",instance="%s:9767",node=%q`, node, node)
	var b strings.Builder
	fmt.Fprintf(&b, "      - series: 'up{%s}'\n        values: '1x60'\n", target)
	n := 0
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, "cgdelegate_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		name, value := line[:i], line[i+1:]
		if open := strings.IndexByte(name, '{'); open >= 0 {
			name = name[:open+1] + target + "," + name[open+1:]
		} else {
			name += "{" + target + "}"
		}
		fmt.Fprintf(&b, "      - series: '%s'\n        values: '%sx60'\n", name, value)
		n++
	}
	if n == 0 {
		t.Fatalf("the scrape has no cgdelegate series:\n%s", body)
	}
	return b.String()
}

// The alerts fire on what the plugin really serves: a recorder in a known
// state is scraped over HTTP and its series fed to the rule (promtool test
// rules). A node that turned unsafe, near its budget and full of dying
// cgroups fires exactly those three alerts; a healthy node's scrape none.
func TestChartRulesOnLiveScrape(t *testing.T) {
	needGo(t)
	bin := promtool(t)
	_, doc := renderRule(t, ruleArgs...)
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := sigsyaml.Unmarshal(doc, &obj); err != nil {
		t.Fatal(err)
	}
	groups, err := sigsyaml.JSONToYAML(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := renderRule(t, ruleArgs...)

	recorder := func(d *status.Delegation) *metrics.Recorder {
		rec := metrics.New(metrics.Options{Supported: func() bool { return true }, Delegation: func() *status.Delegation { return d }})
		rec.Container("writable", nil)
		rec.Event("CreateContainer", 40*time.Microsecond, false)
		return rec
	}
	healthy := scrapeSeries(t, recorder(&status.Delegation{Budget: 10000, Reserved: 250, Node: &host.CgroupStat{DyingDescendants: 12}}), "node-a")
	unsafe := scrapeSeries(t, recorder(&status.Delegation{
		Budget: 1000, Reserved: 950, Node: &host.CgroupStat{DyingDescendants: 6000},
		Unsafe: []status.WritableContainer{{Pod: "ns/a", Container: "c", ID: "1"}, {Pod: "ns/b", Container: "c", ID: "2"}},
	}), "node-b")

	firing := map[string]string{
		"CgdelegateUnsafeWritableContainers": `          - exp_labels: {severity: critical, job: cgdelegate-metrics, instance: "node-b:9767", node: node-b}
            exp_annotations:
              summary: "2 writable containers run on node node-b, which is no longer safe for writable cgroups"
              description: "The cgroup root lost nsdelegate (or cgroup2) while containers with writable cgroups run; their limits may have been raised."
              runbook_url: "` + defaultRunbook + `#cgdelegateunsafewritablecontainers"
`,
		"CgdelegateDelegatedCgroupsNearlyFull": `          - exp_labels: {severity: warning, job: cgdelegate-metrics, instance: "node-b:9767", node: node-b}
            exp_annotations:
              summary: "The writable pods on node node-b reserve 95% of nodeMaxDelegatedCgroups, above 90%"
              description: "A new writable pod whose cgroup.max.descendants does not fit in the rest is refused (cause node_budget)."
              runbook_url: "` + defaultRunbook + `#cgdelegatedelegatedcgroupsnearlyfull"
`,
		"CgdelegateDyingCgroups": `          - exp_labels: {severity: warning, job: cgdelegate-metrics, instance: "node-b:9767", node: node-b, scope: node}
            exp_annotations:
              summary: "Node node-b keeps 6000 dying cgroups, above 5000"
              description: "Removed cgroups the kernel still keeps hold memory, and nothing bounds how many a pod leaves behind."
              runbook_url: "` + defaultRunbook + `#cgdelegatedyingcgroups"
`,
	}
	var b strings.Builder
	b.WriteString("rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n")
	for _, tc := range []struct {
		name, series string
		fire         map[string]string
	}{
		{"healthy node-a", healthy, nil},
		{"node-b unsafe, its budget nearly used, dying cgroups", healthy + unsafe, firing},
	} {
		fmt.Fprintf(&b, "  - name: %s\n    interval: 1m\n    input_series:\n%s    alert_rule_test:\n", tc.name, tc.series)
		for name := range r.alerts() {
			fmt.Fprintf(&b, "      - alertname: %s\n        eval_time: 45m\n", name)
			if exp, ok := tc.fire[name]; ok {
				b.WriteString("        exp_alerts:\n" + exp)
			} else {
				b.WriteString("        exp_alerts: []\n")
			}
		}
	}
	for name := range firing {
		if _, ok := r.alerts()[name]; !ok {
			t.Errorf("the rule has no %s", name)
		}
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"rules.yaml": groups, "live_test.yaml": []byte(b.String())} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), bin, "test", "rules", "live_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s\n%s", err, out, b.String())
	}
}
