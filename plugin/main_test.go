package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/hostcheck"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// statusHost builds a host and a config pointing at it.
func statusHost(t *testing.T, nsdelegate bool, publish bool) string {
	t.Helper()
	mounts := fakehost.NoNsdelegate
	if nsdelegate {
		mounts = fakehost.Nsdelegate
	}
	h := fakehost.New(t, fakehost.WithMounts(mounts))
	statusFile := h.StatusFile
	cfg := "cgroupRoot: " + h.CgroupRoot + "\nmountinfoPath: " + h.Mountinfo + "\nstatusFile: " + statusFile + "\n"
	cfgPath := filepath.Join(h.Dir, "config.yaml")
	if err := h.WriteFile(cfgPath, cfg); err != nil {
		t.Fatal(err)
	}
	if publish {
		r := status.Evaluate(config.Default(), hostcheck.Status{Mounted: true, Version: 2, NsDelegate: true, FSType: "cgroup2"}, nil)
		r.Runtime = &status.Runtime{Name: "containerd", Version: "v2.4.2"}
		r.PluginPID = 1234
		r.UpdatedAt = time.Now()
		if err := status.Publish(statusFile, r); err != nil {
			t.Fatal(err)
		}
	}
	return cfgPath
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name      string
		nsdel     bool
		publish   bool
		wantCode  int
		wantInOut []string
	}{
		{"ready", true, true, 0, []string{`"supportsCgroupOptions": true`, `"nsdelegate": true`, `"name": "containerd"`, `"version": "v2.4.2"`, `"cgroupVersion": 2`}},
		{"no nsdelegate", false, true, 1, []string{`"supportsCgroupOptions": false`, "lacks nsdelegate"}},
		{"no running plugin", true, false, 1, []string{`"supportsCgroupOptions": false`, "no running cgdelegate plugin"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run([]string{"status", "-config", statusHost(t, tc.nsdel, tc.publish)}, &out, &errOut)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stdout=%s stderr=%s", code, tc.wantCode, out.String(), errOut.String())
			}
			var parsed map[string]any
			if err := json.Unmarshal(out.Bytes(), &parsed); err != nil {
				t.Fatalf("status output is not JSON: %v\n%s", err, out.String())
			}
			for _, w := range tc.wantInOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("status output lacks %s:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("guard: sometimes\nmaxDepth: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  []string
	}{
		{"unknown flag", []string{"-frobnicate"}, 2, []string{"frobnicate"}},
		{"status unknown flag", []string{"status", "-x"}, 2, []string{"-x"}},
		{"bad log level", []string{"-log-level", "loud"}, 2, []string{`-log-level "loud"`}},
		{"bad config reports every problem", []string{"-config", bad}, 1, []string{`guard: \"sometimes\"`, "maxDepth: -1"}},
		{"status with bad config", []string{"status", "-config", bad}, 2, []string{`guard: "sometimes"`}},
		{"missing config", []string{"-config", filepath.Join(dir, "absent.yaml")}, 1, []string{"absent.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(tc.args, &out, &errOut); code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr=%s", code, tc.wantCode, errOut.String())
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("stderr lacks %s:\n%s", w, errOut.String())
				}
			}
		})
	}
}
