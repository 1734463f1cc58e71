package cpumanager

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseKubeletState(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		wantStatic bool
		wantErr    error
	}{
		{"static", `{"policyName":"static","defaultCpuSet":"0-3","checksum":1}`, true, nil},
		{"none", `{"policyName":"none","defaultCpuSet":"","checksum":2}`, false, nil},
		{"entries", `{"policyName":"static","defaultCpuSet":"0,2","entries":{"u":{"c":"1"}},"checksum":3}`, true, nil},
		{"no policy", `{"defaultCpuSet":"0-3"}`, false, errKubeletState},
		{"not json", `policyName: static`, false, errKubeletState},
		{"empty", ``, false, errKubeletState},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseKubeletState(strings.NewReader(tc.in))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if s.Static() != tc.wantStatic {
				t.Fatalf("Static() = %v, want %v", s.Static(), tc.wantStatic)
			}
		})
	}
}

func TestReadKubeletState(t *testing.T) {
	dir := t.TempDir()
	s, found, err := readKubeletState(filepath.Join(dir, "absent"))
	if err != nil || found || s.Static() {
		t.Fatalf("missing file: %+v %v %v", s, found, err)
	}
	path := filepath.Join(dir, "cpu_manager_state")
	if err := os.WriteFile(path, []byte(`{"policyName":"static"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, found, err = readKubeletState(path)
	if err != nil || !found || !s.Static() {
		t.Fatalf("static file: %+v %v %v", s, found, err)
	}
	if err := os.WriteFile(path, []byte(`{`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, found, err = readKubeletState(path)
	if !found || !errors.Is(err, errKubeletState) || !strings.Contains(err.Error(), path) {
		t.Fatalf("malformed file: %v %v", found, err)
	}
}

func TestKubeletConflictMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu_manager_state")
	if err := os.WriteFile(path, []byte(`{"policyName":"static"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	reason := kubeletConflict(path, false)
	for _, want := range []string{"static", path, "allowKubeletStaticCPUManager"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q does not name %q", reason, want)
		}
	}
	if reason := kubeletConflict(path, true); reason != "" {
		t.Errorf("allowed: reason %q", reason)
	}
	if reason := kubeletConflict(filepath.Join(t.TempDir(), "missing"), false); reason != "" {
		t.Errorf("no state file: reason %q", reason)
	}
	if err := os.WriteFile(path, []byte(`not json`), 0o600); err != nil {
		t.Fatal(err)
	}
	if reason := kubeletConflict(path, false); !strings.Contains(reason, "cannot tell") {
		t.Errorf("malformed state file: reason %q", reason)
	}
}

func TestStateWatcher(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu_manager_state")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	w := newStateWatcher(path)
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{"missing, unchanged", func() {}, false},
		{"created", func() { write(`{"policyName":"none"}`) }, true},
		{"unchanged", func() {}, false},
		{"replaced by rename", func() { write(`{"policyName":"static"}`) }, true},
		{"rewritten in place", func() {
			if err := os.WriteFile(path, []byte(`{"policyName":"none"}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"forgotten", w.Forget, true},
		{"removed", func() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"still missing", func() {}, false},
	}
	for _, s := range steps {
		s.do()
		if got := w.Changed(); got != s.want {
			t.Fatalf("%s: Changed = %v, want %v", s.name, got, s.want)
		}
	}
}
