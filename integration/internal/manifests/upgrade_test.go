package manifests_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

// firstValues is the chart's first values.yaml, as a release of that chart
// keeps it.
const firstValues = "testdata/values-first.yaml"

// allOn turns on every part of the chart, so that every value is read.
const allOn = `
metrics:
  enabled: true
  serviceMonitor: {enabled: true}
  prometheusRule: {enabled: true}
  grafanaDashboard: {enabled: true}
engineProfiles: {seccomp: true, appArmor: true}
runtimeConfig: {install: true}
admissionPolicy: {requireUserNamespace: true}
`

// readYAML decodes a YAML file into a map.
func readYAML(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := sigsyaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return m
}

// has reports whether m has the value at path.
func has(m map[string]any, path []string) bool {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = mm[k]; !ok {
			return false
		}
	}
	return true
}

// without returns a deep copy of m without the value at path.
func without(t *testing.T, m map[string]any, path []string) map[string]any {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	parent := c
	for _, k := range path[:len(path)-1] {
		next, ok := parent[k].(map[string]any)
		if !ok {
			return c
		}
		parent = next
	}
	delete(parent, path[len(path)-1])
	return c
}

// structuredPaths returns the path of every value of values the schema
// describes key by key (its node has properties), depth first: the keys an
// older values.yaml may lack. Free-form maps (nodeSelector, labels,
// resources' quantities) are values as a whole, and config's keys are not
// followed: a key missing there takes the plugin's built-in default, as
// docs/configuration.md says.
func structuredPaths(values, schema map[string]any, prefix []string) [][]string {
	props, _ := schema["properties"].(map[string]any)
	var out [][]string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range values {
			if !yield(k) {
				return
			}
		}
	}) {
		p := append(slices.Clone(prefix), k)
		out = append(out, p)
		sub, _ := props[k].(map[string]any)
		v, isMap := values[k].(map[string]any)
		if isMap && sub != nil && sub["properties"] != nil && !slices.Equal(p, []string{"config"}) {
			out = append(out, structuredPaths(v, sub, p)...)
		}
	}
	return out
}

// renderChart renders the chart with values as its values.yaml, as helm
// upgrade --reuse-values renders the new chart (its templates and schema)
// with the old release's values in place of its defaults, and the user's
// values over them, for an API server that serves MutatingAdmissionPolicy:
// every template's output (NOTES.txt too) by name. It renders in process
// (helm's engine): the test renders the chart some forty times.
func renderChart(t *testing.T, ch *chart.Chart, values, user map[string]any) (map[string]string, error) {
	t.Helper()
	c := *ch
	c.Values = values
	caps := common.DefaultCapabilities.Copy()
	caps.APIVersions = append(slices.Clone(caps.APIVersions), manifests.MutatingAdmissionPolicyAPI)
	opts := common.ReleaseOptions{Name: manifests.ReleaseName, Namespace: manifests.Namespace, Revision: 2, IsUpgrade: true}
	vals, err := util.ToRenderValuesWithSchemaValidation(&c, user, opts, caps, false)
	if err != nil {
		return nil, err
	}
	return engine.Render(&c, vals)
}

// firstDifference names the first template and line where got and want
// differ; empty when they do not.
func firstDifference(got, want map[string]string) string {
	for _, name := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[name]
		switch {
		case !ok:
			return name + " is not rendered"
		case g == want[name]:
			continue
		}
		gl, wl := strings.Split(g, "\n"), strings.Split(want[name], "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				return fmt.Sprintf("%s:%d: %q, want %q", name, i+1, strings.TrimSpace(gl[i]), strings.TrimSpace(wl[i]))
			}
		}
		return fmt.Sprintf("%s: %d lines, want %d", name, len(gl), len(wl))
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			return name + " is rendered only without the value"
		}
	}
	return ""
}

// helm upgrade --reuse-values renders the new chart with the old release's
// values in place of its defaults, so every value the new chart added is
// missing. The chart renders with the values.yaml of its first commit; and
// each value today's values.yaml has and the first lacked (at any depth
// the schema describes key by key), left out in turn, renders exactly as
// its default in values.yaml does (the templates fall back to it), with
// every part of the chart on.
func TestChartUpgradeWithOldValues(t *testing.T) {
	needGo(t)
	cur := readYAML(t, filepath.Join(root, manifests.ChartDir, "values.yaml"))
	first := readYAML(t, firstValues)
	var schema map[string]any
	data, err := os.ReadFile(filepath.Join(root, manifests.ChartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var on map[string]any
	if err := sigsyaml.Unmarshal([]byte(allOn), &on); err != nil {
		t.Fatal(err)
	}

	ch, err := loader.Load(filepath.Join(root, manifests.ChartDir))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("first values.yaml", func(t *testing.T) {
		for _, user := range []map[string]any{{}, on} {
			if _, err := renderChart(t, ch, first, user); err != nil {
				t.Errorf("with %v: %v", user, err)
			}
		}
	})

	// The defaults fill in only what the old values lack: a value they
	// have, false or empty, stays.
	t.Run("old values kept", func(t *testing.T) {
		old := without(t, without(t, cur, []string{"engineProfiles", "kubeletRootDir"}), []string{"livenessProbe", "periodSeconds"})
		old["runtimeConfig"] = map[string]any{"install": true, "restart": false, "runtime": "containerd"}
		old["engineProfiles"].(map[string]any)["seccomp"] = true
		old["livenessProbe"].(map[string]any)["enabled"] = false
		out, err := renderChart(t, ch, old, nil)
		if err != nil {
			t.Fatal(err)
		}
		ds := out["cgdelegate/templates/daemonset.yaml"]
		for _, want := range []string{`"-runtime", "containerd", "-restart=false"`, "path: \"/var/lib/kubelet/seccomp/cgdelegate\""} {
			if !strings.Contains(ds, want) {
				t.Errorf("daemonset.yaml lacks %s", want)
			}
		}
		if strings.Contains(ds, "livenessProbe:") {
			t.Error("livenessProbe.enabled false renders a liveness probe")
		}
	})

	var added [][]string
	for _, p := range structuredPaths(cur, schema, nil) {
		if !has(first, p) {
			added = append(added, p)
		}
	}
	for _, want := range [][]string{{"engineProfiles", "kubeletRootDir"}, {"hostNetwork"}, {"nri", "plugin", "index"}} {
		if !slices.ContainsFunc(added, func(p []string) bool { return slices.Equal(p, want) }) {
			t.Fatalf("the values added since the first values.yaml, %q, lack %s: the test no longer finds them", added, strings.Join(want, "."))
		}
	}
	for _, p := range added {
		name := strings.Join(p, ".")
		t.Run(name, func(t *testing.T) {
			user := without(t, on, p)
			got, err := renderChart(t, ch, without(t, cur, p), user)
			if err != nil {
				t.Fatalf("values without %s: %v", name, err)
			}
			want, err := renderChart(t, ch, cur, user)
			if err != nil {
				t.Fatal(err)
			}
			if d := firstDifference(got, want); d != "" {
				t.Errorf("values without %s render otherwise than with its default in values.yaml: %s", name, d)
			}
		})
	}
}
