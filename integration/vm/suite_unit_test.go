//go:build integration_vm

package vm

import (
	"slices"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

func TestSuiteOf(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
		err  string
	}{
		{"", len(suiteNames(t, "ci")), ""},
		{"extended", len(suiteNames(t, "extended")), ""},
		{"all", len(suiteNames(t, "ci")) + len(suiteNames(t, "extended")), ""},
		{"nightly", 0, `CGD_SUITE="nightly"`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			vs, err := suiteOf(tc.env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("suiteOf(%q): %v, want an error with %q", tc.env, err, tc.err)
				}
				return
			}
			if err != nil || len(vs) != tc.want || tc.want == 0 {
				t.Fatalf("suiteOf(%q) = %d variants, %v; want %d", tc.env, len(vs), err, tc.want)
			}
		})
	}
	ci, ext := suiteNames(t, "ci"), suiteNames(t, "extended")
	for name := range ext {
		if ci[name] {
			t.Errorf("%s is in both the CI suite and the extended one", name)
		}
	}
}

func suiteNames(t *testing.T, env string) map[string]bool {
	t.Helper()
	vs, err := suiteOf(env)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, v := range vs {
		names[v.Name] = true
	}
	return names
}

// TestBootStages: the CI suite's quick boots come first (what TestVM
// boots while the Kubernetes build goes on), none of them needs the
// kubelet, systemd or the engines, and the split keeps every variant once,
// in the suite's order within each stage.
func TestBootStages(t *testing.T) {
	vs := variant.Suite()
	early, late := bootStages(vs)
	if len(early) == 0 || len(late) == 0 {
		t.Fatalf("bootStages(Suite) = %d early, %d late: CI boots nothing while the Kubernetes build runs", len(early), len(late))
	}
	for _, v := range early {
		if v.RunsKubelet() || v.Systemd || v.NeedsEngines() || v.CarriesReleaseArchive() {
			t.Errorf("%s boots early but needs a late ingredient", v.Name)
		}
	}
	for _, v := range late {
		if !v.RunsKubelet() && !v.Systemd && !v.NeedsEngines() && !v.CarriesReleaseArchive() {
			t.Errorf("%s waits for the late stage but needs none of its ingredients", v.Name)
		}
	}
	order := func(vs []variant.Variant) []string {
		var names []string
		for _, v := range vs {
			names = append(names, v.Name)
		}
		return names
	}
	var all []variant.Variant
	for _, v := range vs {
		for _, w := range slices.Concat(early, late) {
			if w.Name == v.Name {
				all = append(all, w)
			}
		}
	}
	if got, want := order(all), order(vs); !slices.Equal(got, want) {
		t.Errorf("the stages hold %v, want each of %v once", got, want)
	}
	for _, stage := range [][]variant.Variant{early, late} {
		names := order(stage)
		var inSuite []string
		for _, v := range vs {
			if slices.Contains(names, v.Name) {
				inSuite = append(inSuite, v.Name)
			}
		}
		if !slices.Equal(names, inSuite) {
			t.Errorf("stage %v is not in the suite's order %v", names, inSuite)
		}
	}
}
