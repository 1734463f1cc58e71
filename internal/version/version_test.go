package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	info := func(v string, ok bool) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			if !ok {
				return nil, false
			}
			return &debug.BuildInfo{Main: debug.Module{Path: "github.com/cgdelegate/cgdelegate", Version: v}}, true
		}
	}
	tests := []struct {
		name   string
		linked string
		info   func() (*debug.BuildInfo, bool)
		want   string
	}{
		{"linked wins", "v1.2.3-4-gabcdef0-dirty", info("v1.0.0", true), "v1.2.3-4-gabcdef0-dirty"},
		{"module version", "", info("v1.0.0", true), "v1.0.0"},
		{"devel build", "", info("(devel)", true), "dev"},
		{"empty module version", "", info("", true), "dev"},
		{"no build info", "", info("", false), "dev"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolve(tc.linked, tc.info); got != tc.want {
				t.Fatalf("resolve = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	if String() == "" {
		t.Fatal("String is empty")
	}
}
