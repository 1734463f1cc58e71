package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"

	"github.com/cgdelegate/cgdelegate/delegate"
)

// fakeRoot is a temp dir standing in for a delegated /sys/fs/cgroup.
func fakeRoot(t *testing.T) (dir, proc string) {
	t.Helper()
	cgroups.TestMode = true
	dir, proc = t.TempDir(), t.TempDir()
	files := map[string]string{
		filepath.Join(dir, "cgroup.controllers"):     "cpuset cpu memory pids",
		filepath.Join(dir, "cgroup.subtree_control"): "",
		filepath.Join(dir, "cgroup.procs"):           "",
		filepath.Join(dir, "cpuset.cpus.effective"):  "0-3",
		filepath.Join(proc, "self", "mountinfo"):     "30 25 0:26 / " + dir + " rw,nosuid - cgroup2 cgroup2 rw\n",
		filepath.Join(proc, "self", "cgroup"):        "0::/\n",
	}
	for path, data := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, proc
}

func run(t *testing.T, dir, proc string, env map[string]string, argv ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := realMain(args{
		argv: argv,
		opts: delegate.Options{CgroupRoot: dir, Proc: proc, LookupEnv: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		}},
		stdout: &stdout, stderr: &stderr,
	})
	return code, stdout.String(), stderr.String()
}

func TestRealMain(t *testing.T) {
	tests := []struct {
		name       string
		argv       []string
		env        map[string]string
		wantCode   int
		wantOut    []string
		wantErr    []string
		wantCgroup string // a cgroup that must exist afterwards
		gone       string // one that must not
	}{
		{name: "help", argv: []string{"-h"}, wantErr: []string{"usage: cgdelegate-init"}},
		{name: "run help", argv: []string{"run", "-h"}, wantErr: []string{"usage: cgdelegate-init"}},
		{name: "version", argv: []string{"--version"}, wantOut: []string{"cgdelegate-init "}},
		{name: "run exits with the status", argv: []string{"run", "--cgroup", "w1", "--cpu", "500m", "--memory", "256Mi", "--pids", "5", "--cpuset", "1", "--", "sh", "-c", "exit 3"}, wantCode: 3, gone: "w1"},
		{name: "run keep", argv: []string{"run", "--cgroup", "a/b", "--keep", "--memory", "1Gi", "--", "true"}, wantCgroup: "a/b/memory.max"},
		{
			name:     "run OOM",
			argv:     []string{"run", "--cgroup", "w1", "--memory", "1Mi", "--", "sh", "-c", `echo "oom_kill 1" > "$CGDIR/w1/memory.events"`},
			wantCode: 1, wantErr: []string{"OOM", "memory.max=1048576", "--memory 1Mi"},
		},
		{name: "run no cgroup", argv: []string{"run", "--", "true"}, wantCode: 1, wantErr: []string{"run needs --cgroup"}},
		{name: "run absolute", argv: []string{"run", "--cgroup", "/w1", "--", "true"}, wantCode: 1, wantErr: []string{"cgdelegate-init: invalid cgroup name", "is absolute"}},
		{name: "run dotdot", argv: []string{"run", "--cgroup", "../w1", "--", "true"}, wantCode: 1, wantErr: []string{`".." component`}},
		{name: "run bad quantity", argv: []string{"run", "--cgroup", "w1", "--memory", "lots", "--", "true"}, wantCode: 1, wantErr: []string{`--memory "lots"`, "256Mi"}},
		{name: "run cpuset outside", argv: []string{"run", "--cgroup", "w1", "--cpuset", "9", "--", "true"}, wantCode: 1, wantErr: []string{"not inside the container's CPUs 0-3"}},
		{name: "run no command", argv: []string{"run", "--cgroup", "w1"}, wantCode: 1, wantErr: []string{"no command to run"}},
		{name: "run missing binary", argv: []string{"run", "--cgroup", "w1", "--", "/nonexistent"}, wantCode: 1, wantErr: []string{"start /nonexistent"}, gone: "w1"},
		{name: "unknown flag", argv: []string{"--bogus", "--", "true"}, wantCode: 1, wantErr: []string{"flag provided but not defined: -bogus"}},
		{name: "entrypoint", argv: []string{"--controllers", "cpu,memory", "--", "sh", "-c", "exit 5"}, wantCode: 5},
		{name: "entrypoint bad controller", argv: []string{"--controllers", "io", "--", "true"}, wantCode: 1, wantErr: []string{`"io" is not in`}},
		{name: "tree", argv: []string{"tree"}, wantOut: []string{"CGROUP", "CPU.MAX"}},
		{name: "tree args", argv: []string{"tree", "x"}, wantCode: 1, wantErr: []string{"unexpected arguments"}},
		{
			name: "check", argv: []string{"check"}, env: map[string]string{delegate.EnvMaxDescendants: "250", delegate.EnvMaxDepth: "50"},
			wantOut: []string{"delegation: available", "cgroup.max.descendants=250"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, proc := fakeRoot(t)
			t.Setenv("CGDIR", dir)
			code, out, errOut := run(t, dir, proc, tc.env, tc.argv...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", code, tc.wantCode, out, errOut)
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(out, want) {
					t.Errorf("stdout %q lacks %q", out, want)
				}
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr %q lacks %q", errOut, want)
				}
			}
			if code == 1 && len(tc.wantErr) > 0 && strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Errorf("stderr is not one line: %q", errOut)
			}
			if tc.wantCgroup != "" {
				if _, err := os.Stat(filepath.Join(dir, tc.wantCgroup)); err != nil {
					t.Errorf("%s: %v", tc.wantCgroup, err)
				}
			}
			if tc.gone != "" {
				if _, err := os.Stat(filepath.Join(dir, tc.gone)); err == nil {
					t.Errorf("%s left behind", tc.gone)
				}
			}
		})
	}
}

// Under containerd's default AppArmor profile with CAP_SYS_ADMIN, check
// and the entrypoint say that mounts are denied and what allows them; under
// the engines' profile they say nothing of it.
func TestAppArmorNote(t *testing.T) {
	const (
		capAdmin = "00000000a82435fb"
		note     = "mounts are denied by AppArmor profile cri-containerd.apparmor.d: nested runtimes and systemd need appArmorProfile {type: Localhost, localhostProfile: cgdelegate-engines} (docs/engine-profiles.md)"
	)
	for _, tc := range []struct {
		name, label string
		want        bool
	}{
		{"runtime default", "cri-containerd.apparmor.d (enforce)\n", true},
		{"engines", "cgdelegate-engines (enforce)\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, proc := fakeRoot(t)
			for name, data := range map[string]string{"attr/apparmor/current": tc.label, "status": "Seccomp:\t2\nCapEff:\t" + capAdmin + "\n"} {
				p := filepath.Join(proc, "self", name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			code, out, _ := run(t, dir, proc, nil, "check")
			label := strings.TrimSuffix(tc.label, "\n")
			if code != 0 || !strings.Contains(out, "note: AppArmor: "+label+"; seccomp: filter") || strings.Contains(out, note) != tc.want {
				t.Errorf("check = %d, %q; want the label, and the note %v", code, out, tc.want)
			}
			code, _, errOut := run(t, dir, proc, nil, "--", "true")
			if code != 0 || strings.Contains(errOut, "cgdelegate-init: note: "+note) != tc.want {
				t.Errorf("entrypoint = %d, stderr %q; want the note %v", code, errOut, tc.want)
			}
		})
	}
}

func TestCheckNotAvailable(t *testing.T) {
	dir, proc := fakeRoot(t)
	if err := os.WriteFile(filepath.Join(proc, "self", "mountinfo"), []byte("30 25 0:26 / "+dir+" ro,nosuid - cgroup2 cgroup2 rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := run(t, dir, proc, nil, "check")
	if code != 1 || !strings.Contains(out, "delegation: not available") || !strings.Contains(out, "writable-cgroups.noderesource.dev") {
		t.Errorf("check = %d, %q", code, out)
	}
}
