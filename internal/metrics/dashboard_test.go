package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// dashboard is in the chart, which packages it as a ConfigMap for Grafana's
// sidecar (metrics.grafanaDashboard).
const dashboard = "../../contrib/helm/cgdelegate/dashboards/cgdelegate.json"

// nodeFilter is the dashboard's node variable on the node label the chart's
// ServiceMonitor gives every series.
const nodeFilter = `node=~"$node"`

// runtimeMetric finds the Go and process collectors' metrics, and
// onlyPlugin keeps their series of the plugin's targets.
var (
	runtimeMetric = regexp.MustCompile(`\b(?:go|process)_[a-z0-9_]+\b`)
	onlyPlugin    = " * on (job, instance) group_left " + BuildInfo
)

// metricName finds the metric names in a PromQL expression: ours, and the
// Go and process collectors'.
var metricName = regexp.MustCompile(`\b(?:cgdelegate|go|process)_[a-z0-9_]+\b`)

// The Grafana dashboard queries only metrics the recorder registers, and
// shows every cgdelegate metric.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			// Every selector of every query is filtered by node, and a
			// legend names the node, never the instance (a pod IP).
			if n := strings.Count(tg.Expr, "{"); n == 0 || strings.Count(tg.Expr, nodeFilter) != n {
				t.Errorf("panel %q: not every selector of %q has %s", p.Title, tg.Expr, nodeFilter)
			}
			if strings.Contains(tg.LegendFormat, "instance") || strings.Contains(tg.Expr, "instance=") || strings.Contains(tg.Expr, "by (instance") {
				t.Errorf("panel %q shows the instance, not the node: %q %q", p.Title, tg.Expr, tg.LegendFormat)
			}
			// The Go and process collectors' series are every target's (a
			// kubelet's carry node too): only the plugin's, by its build info.
			if runtimeMetric.MatchString(tg.Expr) && !strings.HasSuffix(tg.Expr, onlyPlugin) {
				t.Errorf("panel %q: %q is not limited to the plugin's targets (%s)", p.Title, tg.Expr, onlyPlugin)
			}
		}
	}
	node := false
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok {
			exprs = append(exprs, q)
			if v.Name == "node" && strings.HasSuffix(q, ", node)") {
				node = true
			}
		}
	}
	if !node {
		t.Errorf("%s has no variable node with the values of the node label", dashboard)
	}

	registered := registeredNames(t)
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && registered[b] {
					base = b
				}
			}
			if !registered[base] {
				t.Errorf("%s queries %s, which the recorder does not register (in %q)", dashboard, name, e)
			}
			used[base] = true
		}
	}
	for _, name := range []string{ContainersTotal, RefusalsTotal, EventDuration, NodeSupported, FailClosed, CPUs, ContainerUpdatesTotal, BuildInfo} {
		if !used[name] {
			t.Errorf("%s does not show %s", dashboard, name)
		}
	}
}

// registeredNames are the metric families of a recorder with every option.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	r := New(Options{
		Supported:  func() bool { return true },
		FailClosed: func() *status.FailClosed { return &status.FailClosed{State: status.FailClosedOff} },
		Pinning: func() *status.Pinning {
			return &status.Pinning{Active: true, Allocations: &policy.Status{ReservedCPUs: "0", NodeSharedPool: "1-3"}}
		},
	})
	families, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	return names
}
