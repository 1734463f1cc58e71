package doccheck

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// metricsPage is the page with the table of every metric.
const metricsPage = "docs/metrics.md"

// family is one metric the plugin registers: its type (counter, gauge,
// histogram) and, by label name, the values it exports.
type family struct {
	typ    string
	labels map[string]map[string]bool
}

// openLabels are the labels whose values are not a closed set: an
// event's histogram is made at its first request, for any NRI event.
var openLabels = map[string]bool{"event": true}

var (
	// metricRef is one of the plugin's metrics named on a page, with its
	// label matchers when it has some: cgdelegate_dying_cgroups{scope="node"}.
	metricRef = regexp.MustCompile(`\bcgdelegate_[a-z0-9_]*[a-z0-9](?:\{([^}]*)\})?`)
	// matcher is one label matcher, label="value" (or !=, =~).
	matcher = regexp.MustCompile(`([a-z_]+)\s*(?:=|!=|=~|!~)\s*"([^"]*)"`)
	// metricRow is a row of the metrics table: | `name` | type | labels | meaning |.
	metricRow = regexp.MustCompile("^\\| `(cgdelegate_[a-z0-9_]+)` \\|\\s*([a-z]*)\\s*\\|([^|]*)\\|")
	// causeRow is a row of the table of refusal causes: | `cause` | ... |.
	causeRow = regexp.MustCompile("^\\| `([a-z0-9_]+)` \\| ")
)

// gatheredFamilies are the metrics of a recorder with every option on, as
// a scrape sees them.
func gatheredFamilies() (map[string]family, error) {
	r := metrics.New(metrics.Options{
		Supported:  func() bool { return true },
		FailClosed: func() *status.FailClosed { return &status.FailClosed{State: status.FailClosedEnforced} },
		Pinning: func() *status.Pinning {
			return &status.Pinning{Active: true, Allocations: &policy.Status{ReservedCPUs: "0", NodeSharedPool: "1-3"}}
		},
		Delegation: func() *status.Delegation { return &status.Delegation{Node: &host.CgroupStat{}} },
	})
	gathered, err := r.Registry().Gather()
	if err != nil {
		return nil, err
	}
	families := map[string]family{}
	for _, mf := range gathered {
		if !strings.HasPrefix(mf.GetName(), "cgdelegate_") {
			continue
		}
		f := family{typ: strings.ToLower(mf.GetType().String()), labels: map[string]map[string]bool{}}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if f.labels[lp.GetName()] == nil {
					f.labels[lp.GetName()] = map[string]bool{}
				}
				f.labels[lp.GetName()][lp.GetValue()] = true
			}
		}
		families[mf.GetName()] = f
	}
	return families, nil
}

// metricBase is the family a sample name belongs to: the name itself, or a
// histogram's without _bucket, _sum or _count.
func metricBase(name string, families map[string]family) (string, bool) {
	if _, ok := families[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suffix); ok && families[b].typ == "histogram" {
			return b, true
		}
	}
	return "", false
}

// checkMetricNames returns a problem for every metric of the plugin a page
// names (anywhere) that it does not register, and every label matcher of
// one (name{label="value"}) whose label it does not have or whose value it
// never exports.
func checkMetricNames(page, md string, families map[string]family) []string {
	var problems []string
	seen := map[string]bool{}
	for _, m := range metricRef.FindAllStringSubmatch(md, -1) {
		if seen[m[0]] {
			continue
		}
		seen[m[0]] = true
		name, _, _ := strings.Cut(m[0], "{")
		base, ok := metricBase(name, families)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %s: the plugin registers no such metric (internal/metrics)", where(page, md, m[0]), name))
			continue
		}
		for _, lm := range matcher.FindAllStringSubmatch(m[1], -1) {
			label, value := lm[1], lm[2]
			values, has := families[base].labels[label]
			switch {
			case label == "le" && families[base].typ == "histogram":
			case !has:
				problems = append(problems, fmt.Sprintf("%s: %s has no label %s", where(page, md, m[0]), base, label))
			case !openLabels[label] && !values[value]:
				problems = append(problems, fmt.Sprintf("%s: %s{%s} is never %q (it is one of %q)", where(page, md, m[0]), base, label, value, slices.Sorted(maps.Keys(values))))
			}
		}
	}
	return problems
}

// checkMetricsTable returns a problem for every row of the metrics table
// whose metric, type or labels are not what the plugin registers, for every
// metric without a row, and when the table of refusal causes is not
// causes, in order.
func checkMetricsTable(md string, families map[string]family, causes []refusal.Cause) []string {
	var problems []string
	rows := map[string]bool{}
	var causeRows []string
	inCauses := false
	for i, line := range strings.Split(md, "\n") {
		at := fmt.Sprintf("%s:%d", metricsPage, i+1)
		if strings.HasPrefix(line, "| cause |") {
			inCauses = true
			continue
		}
		if !strings.HasPrefix(line, "|") {
			inCauses = false
			continue
		}
		if m := causeRow.FindStringSubmatch(line); inCauses && m != nil {
			causeRows = append(causeRows, m[1])
			continue
		}
		m := metricRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, typ := m[1], m[2]
		rows[name] = true
		f, ok := families[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: the table lists %s, which the plugin does not register", at, name))
			continue
		}
		if typ != f.typ {
			problems = append(problems, fmt.Sprintf("%s: the table says %s is a %s; it is a %s", at, name, typ, f.typ))
		}
		var labels []string
		for _, s := range keySpan.FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, s[1])
		}
		slices.Sort(labels)
		if want := slices.Sorted(maps.Keys(f.labels)); !slices.Equal(labels, want) {
			problems = append(problems, fmt.Sprintf("%s: the table gives %s the labels %q; it has %q", at, name, labels, want))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(families)) {
		if !rows[name] {
			problems = append(problems, fmt.Sprintf("%s: no row for %s in the table of metrics", metricsPage, name))
		}
	}
	want := make([]string, len(causes))
	for i, c := range causes {
		want[i] = string(c)
	}
	if !slices.Equal(causeRows, want) {
		problems = append(problems, fmt.Sprintf("%s: the table of refusal causes lists %q; refusal.Causes is %q", metricsPage, causeRows, want))
	}
	return problems
}

// testFamilies are a recorder's metrics for the tests of the checks.
var testFamilies = map[string]family{
	"cgdelegate_refusals_total":             {typ: "counter", labels: map[string]map[string]bool{"cause": {"policy": true, "other": true}}},
	"cgdelegate_nri_event_duration_seconds": {typ: "histogram", labels: map[string]map[string]bool{"event": {"CreateContainer": true}}},
	"cgdelegate_node_supported":             {typ: "gauge", labels: map[string]map[string]bool{}},
}

func TestMetricNames(t *testing.T) {
	md := "`cgdelegate_refusals_total{cause=\"policy\"}`, cgdelegate_node_supported,\n" +
		"`rate(cgdelegate_nri_event_duration_seconds_bucket{event=\"UpdateContainer\",le=\"0.001\"}[5m])`,\n" +
		"`cgdelegate_nri_event_duration_seconds_count`.\n" +
		"Planted: `cgdelegate_refusal_total`, `cgdelegate_refusals_total{reason=\"policy\"}`,\n" +
		"`cgdelegate_refusals_total{cause=\"polcy\"}` and `cgdelegate_node_supported_count`.\n"
	got := checkMetricNames("docs/a.md", md, testFamilies)
	want := []string{
		"docs/a.md:4: cgdelegate_refusal_total: the plugin registers no such metric (internal/metrics)",
		`docs/a.md:4: cgdelegate_refusals_total has no label reason`,
		`docs/a.md:5: cgdelegate_refusals_total{cause} is never "polcy" (it is one of ["other" "policy"])`,
		"docs/a.md:5: cgdelegate_node_supported_count: the plugin registers no such metric (internal/metrics)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkMetricNames =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMetricsTable(t *testing.T) {
	md := "# Metrics\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n" +
		"| `cgdelegate_refusals_total` | counter | `cause` | refusals |\n" +
		"| `cgdelegate_nri_event_duration_seconds` | gauge | `event`, `result` | planted: wrong type and a label too many |\n" +
		"| `cgdelegate_old_total` | counter | | planted: gone |\n" +
		"| `go_*` | | | the Go collector |\n\n" +
		"| cause | the refusal |\n|---|---|\n| `other` | planted: out of order |\n| `policy` | the opt-in policy |\n"
	got := checkMetricsTable(md, testFamilies, []refusal.Cause{"policy", "other"})
	want := []string{
		"docs/metrics.md:6: the table says cgdelegate_nri_event_duration_seconds is a gauge; it is a histogram",
		`docs/metrics.md:6: the table gives cgdelegate_nri_event_duration_seconds the labels ["event" "result"]; it has ["event"]`,
		"docs/metrics.md:7: the table lists cgdelegate_old_total, which the plugin does not register",
		"docs/metrics.md: no row for cgdelegate_node_supported in the table of metrics",
		`docs/metrics.md: the table of refusal causes lists ["other" "policy"]; refusal.Causes is ["policy" "other"]`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkMetricsTable =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRepositoryMetrics: docs/metrics.md has a row for every metric of the
// plugin with its type and labels, and the causes of refusal.Causes in
// order; every page but the changelog names only metrics, labels and label
// values the plugin exports.
func TestRepositoryMetrics(t *testing.T) {
	families, err := gatheredFamilies()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) < 12 {
		t.Fatalf("a recorder with every option registers only %d cgdelegate_ metrics: the options no longer turn every metric on", len(families))
	}
	root := os.DirFS("../..")
	md, err := fs.ReadFile(root, metricsPage)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkMetricsTable(string(md), families, refusal.Causes) {
		t.Error(p)
	}
	pages, err := namingPages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		b, err := fs.ReadFile(root, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range checkMetricNames(page, string(b), families) {
			t.Error(p)
		}
	}
}
