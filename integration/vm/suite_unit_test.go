//go:build integration_vm

package vm

import (
	"slices"
	"strings"
	"testing"
)

func TestSuiteOf(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
		err  string
	}{
		{"", len(suiteNames(t, "ci")), ""},
		{"extended", len(suiteNames(t, "extended")), ""},
		{"conformance", len(suiteNames(t, "conformance")), ""},
		{"all", len(suiteNames(t, "ci")) + len(suiteNames(t, "extended")) + len(suiteNames(t, "conformance")), ""},
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
	ci, ext, conf := suiteNames(t, "ci"), suiteNames(t, "extended"), suiteNames(t, "conformance")
	for name := range ext {
		if ci[name] || conf[name] {
			t.Errorf("%s is in the extended suite and another", name)
		}
	}
	for name := range conf {
		if ci[name] {
			t.Errorf("%s is in both the CI suite and the conformance one", name)
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

// TestCmdlineAppArmor: every boot but an AppArmor node's switches the
// kernel's AppArmor off, busybox ones too (critest reads the module's
// parameter).
func TestCmdlineAppArmor(t *testing.T) {
	vs, err := suiteOf("all")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		cl, err := cmdline(v)
		if err != nil {
			t.Fatal(err)
		}
		if off := slices.Contains(strings.Fields(cl), "apparmor=0"); off == v.AppArmor {
			t.Errorf("%s (AppArmor %v): apparmor=0 on its command line: %v", v.Name, v.AppArmor, off)
		}
	}
}
