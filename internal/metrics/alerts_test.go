package metrics

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// The chart's alerts and the series their promtool test feeds them
// (integration/internal/manifests runs promtool on both).
const (
	alertRules = "../../contrib/helm/cgdelegate/templates/prometheusrule.yaml"
	alertTests = "../../integration/internal/manifests/testdata/alerts_test.yaml"
)

// scrapeLabels are the labels Prometheus and the chart's ServiceMonitor add
// to every series of a target.
var scrapeLabels = map[string]bool{"job": true, "instance": true, "node": true}

// exported are the series a recorder with every option exports: by metric
// name (a histogram's as _bucket, _sum and _count), each label's values.
func exported(t *testing.T) map[string]map[string]map[string]bool {
	t.Helper()
	r := New(Options{
		Supported:  func() bool { return true },
		FailClosed: func() *status.FailClosed { return &status.FailClosed{State: status.FailClosedOff} },
		Pinning: func() *status.Pinning {
			return &status.Pinning{Active: true, Allocations: &policy.Status{ReservedCPUs: "0", NodeSharedPool: "1-3"}}
		},
		Delegation: func() *status.Delegation { return &status.Delegation{Node: &host.CgroupStat{}} },
	})
	families, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]map[string]map[string]bool{}
	add := func(name, label, value string) {
		if series[name] == nil {
			series[name] = map[string]map[string]bool{}
		}
		if label == "" {
			return
		}
		if series[name][label] == nil {
			series[name][label] = map[string]bool{}
		}
		series[name][label][value] = true
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			names := []string{f.GetName()}
			if h := m.GetHistogram(); h != nil {
				names = []string{f.GetName() + "_bucket", f.GetName() + "_sum", f.GetName() + "_count"}
				for _, b := range h.GetBucket() {
					add(f.GetName()+"_bucket", "le", formatBound(b.GetUpperBound()))
				}
				add(f.GetName()+"_bucket", "le", "+Inf")
			}
			for _, n := range names {
				add(n, "", "")
				for _, l := range m.GetLabel() {
					add(n, l.GetName(), l.GetValue())
				}
			}
		}
	}
	return series
}

// formatBound writes a bucket bound as the alerts' test writes le.
func formatBound(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// seriesLine is one input series of a promtool test: name{labels}.
var (
	seriesLine = regexp.MustCompile(`(?m)^\s*- series: '([a-z_]+)\{([^}]*)\}'`)
	labelPair  = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
)

// The alerts query only metrics the recorder exports, and their promtool
// test is fed the series the plugin exports: the same names, labels and
// label values (but job, instance and node, which the scrape adds), so a
// renamed metric or label fails here, not only in production.
func TestAlertsOnExportedSeries(t *testing.T) {
	series := exported(t)
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, name := range metricName.FindAllString(string(rules), -1) {
		if series[name] == nil {
			t.Errorf("%s queries %s, which the recorder does not export", alertRules, name)
		}
		used++
	}
	if used == 0 {
		t.Fatalf("%s queries no cgdelegate metric", alertRules)
	}

	tests, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	lines := seriesLine.FindAllStringSubmatch(string(tests), -1)
	if len(lines) == 0 {
		t.Fatalf("%s has no input series", alertTests)
	}
	for _, l := range lines {
		name, labels := l[1], l[2]
		if name == "up" {
			continue // Prometheus's own
		}
		want, ok := series[name]
		if !ok {
			t.Errorf("%s feeds %s, which the recorder does not export", alertTests, name)
			continue
		}
		seen := map[string]bool{}
		for _, p := range labelPair.FindAllStringSubmatch(labels, -1) {
			seen[p[1]] = true
			if scrapeLabels[p[1]] {
				continue
			}
			if !want[p[1]][p[2]] {
				t.Errorf("%s feeds %s{%s}: the recorder exports no %s=%q (it has %v)", alertTests, name, labels, p[1], p[2], want[p[1]])
			}
		}
		for label := range want {
			if !seen[label] {
				t.Errorf("%s feeds %s{%s} without its label %s", alertTests, name, labels, label)
			}
		}
	}
}
