package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"

	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/version"
)

// runMainEnv makes the test binary act as cgdelegate-hook, so the real
// main (exit code, stderr) is exercised in a child process.
const runMainEnv = "CGDELEGATE_HOOK_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	// Plain temp files stand in for cgroupfs.
	cgroups.TestMode = true
	if os.Getenv(runMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

const prefix = "cgdelegate-hook: "

// checkOutput asserts the exit code and that stderr is empty on success or
// exactly one prefixed line containing want on failure.
func checkOutput(t *testing.T, code int, stderr string, wantCode int, want string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("exit code %d, want %d; stderr: %q", code, wantCode, stderr)
	}
	if wantCode == 0 {
		if stderr != "" {
			t.Fatalf("stderr %q, want silence", stderr)
		}
		return
	}
	if !strings.HasPrefix(stderr, prefix) || !strings.HasSuffix(stderr, "\n") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("stderr %q, want one line starting with %q", stderr, prefix)
	}
	if !strings.Contains(stderr, want) {
		t.Fatalf("stderr %q lacks %q", stderr, want)
	}
}

type mainCase struct {
	name     string
	setup    func(h *fakehost.Host) (args []string, state string, err error)
	wantCode int
	want     string
}

// prepare builds a host with the hook's container and applies the setup.
func (tc mainCase) prepare(t *testing.T) (args []string, state string) {
	t.Helper()
	args, state, err := tc.setup(fakehost.New(t, fakehost.WithContainer()))
	if err != nil {
		t.Fatal(err)
	}
	return args, state
}

func mainCases() []mainCase {
	writeConfig := func(h *fakehost.Host, yaml string) (string, error) {
		p := filepath.Join(h.Dir, "config.yaml")
		return p, h.WriteFile(p, yaml)
	}
	return []mainCase{
		{
			name:  "success",
			setup: func(h *fakehost.Host) ([]string, string, error) { return h.Args(), h.State(), nil },
		},
		{
			name: "no nsdelegate",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				return h.Args(), h.State(), h.Remount(fakehost.NoNsdelegate)
			},
			wantCode: 1, want: "host cgroup2 mount lacks nsdelegate",
		},
		{
			name: "same cgroupns",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				return h.Args(), h.State(), h.SetCgroupNS(fakehost.HostCgroupNS, fakehost.HostCgroupNS)
			},
			wantCode: 1, want: "container shares the host cgroup namespace",
		},
		{
			name: "bounds missing",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				return h.Args(), h.State(), h.SetPodBounds(fakehost.PodCgroup, "max", "max")
			},
			wantCode: 1, want: "pod cgroup bounds not in place",
		},
		{
			name:     "bad state JSON",
			setup:    func(h *fakehost.Host) ([]string, string, error) { return h.Args(), "not json", nil },
			wantCode: 1, want: "invalid OCI state on stdin",
		},
		{
			name:     "unknown flag",
			setup:    func(h *fakehost.Host) ([]string, string, error) { return []string{"--bogus"}, h.State(), nil },
			wantCode: 1, want: "flag provided but not defined: -bogus",
		},
		{
			name:     "extra argument",
			setup:    func(h *fakehost.Host) ([]string, string, error) { return append(h.Args(), "prestart"), h.State(), nil },
			wantCode: 1, want: "unexpected arguments",
		},
		{
			name: "config lowers the limit below the pod bounds",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				cfg, err := writeConfig(h, "maxDescendants: 100\n")
				return append(h.Args(), "--config", cfg), h.State(), err
			},
			wantCode: 1, want: "want at most cgroup.max.descendants=100",
		},
		{
			name: "flags win over config",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				cfg, err := writeConfig(h, "maxDescendants: 100\nprocRoot: /nonexistent\n")
				return append([]string{"--config", cfg, "--max-descendants", "250"}, h.Args()...), h.State(), err
			},
		},
		{
			name: "config paths are used",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				cfg, err := writeConfig(h, "cgroupRoot: "+h.CgroupRoot+"\nmountinfoPath: "+h.Mountinfo+
					"\nprocRoot: "+h.Proc+"\nsysfsRoot: "+h.Sysfs+"\n")
				return []string{"--config", cfg}, h.State(), err
			},
		},
		{
			name: "invalid config is one line",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				cfg, err := writeConfig(h, "maxDescendants: -1\nmaxDepth: -1\n")
				return []string{"--config", cfg}, h.State(), err
			},
			wantCode: 1, want: "maxDescendants: -1 must be at least 1; maxDepth: -1",
		},
		{
			name: "config zero is not the default",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				cfg, err := writeConfig(h, "maxDepth: 0\n")
				return []string{"--config", cfg}, h.State(), err
			},
			wantCode: 1, want: "maxDepth: 0 must be at least 1",
		},
		{
			name: "config type error names key and value",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				cfg, err := writeConfig(h, "maxDescendants: lots\nguard: no\n")
				return []string{"--config", cfg}, h.State(), err
			},
			wantCode: 1, want: `maxDescendants: "lots" is not a whole number; guard: "no" is not one of enforce, warn, off`,
		},
		{
			name: "missing config",
			setup: func(h *fakehost.Host) ([]string, string, error) {
				return []string{"--config", filepath.Join(h.Dir, "nope.yaml")}, h.State(), nil
			},
			wantCode: 1, want: "open config",
		},
	}
}

func TestRealMain(t *testing.T) {
	for _, tc := range mainCases() {
		t.Run(tc.name, func(t *testing.T) {
			args, state := tc.prepare(t)
			var stderr bytes.Buffer
			code := realMain(args, strings.NewReader(state), io.Discard, &stderr)
			t.Logf("exit %d, stderr: %s", code, stderr.String())
			checkOutput(t, code, stderr.String(), tc.wantCode, tc.want)
		})
	}
}

func TestRealMainHelp(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := realMain([]string{arg}, strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("exit code %d, want 0", code)
			}
			for _, f := range []string{"-cgroup-root", "-mountinfo", "-proc", "-sysfs", "-max-descendants", "-max-depth", "-pod-cgroup", "-config", "-version"} {
				if !strings.Contains(stderr.String(), f) {
					t.Errorf("usage lacks %s:\n%s", f, stderr.String())
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

func TestRealMainVersion(t *testing.T) {
	want := "cgdelegate-hook " + version.String() + "\n"
	tests := []struct {
		name string
		args []string
	}{
		{"-version", []string{"-version"}},
		{"--version", []string{"--version"}},
		// The version does not depend on a config that may not load.
		{"with a missing config", []string{"--version", "--config", "/nonexistent/config.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := realMain(tc.args, strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("exit code %d, want 0; stderr: %q", code, stderr.String())
			}
			if stdout.String() != want || stderr.Len() != 0 {
				t.Fatalf("stdout %q, stderr %q; want stdout %q and no stderr", stdout.String(), stderr.String(), want)
			}
		})
	}
}

// execHook runs the real main in a child process, as a runtime would.
func execHook(t *testing.T, args []string, stdin string) (code int, stdout, stderr string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("cannot find the test binary to re-run as the hook: %v", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// TestExecMain runs the real main in a child process, as a runtime would.
func TestExecMain(t *testing.T) {
	for _, tc := range mainCases() {
		t.Run(tc.name, func(t *testing.T) {
			args, state := tc.prepare(t)
			code, stdout, stderr := execHook(t, args, state)
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			checkOutput(t, code, stderr, tc.wantCode, tc.want)
		})
	}
}

// TestExecHelpVersion checks the real exit code of -h and -version.
func TestExecHelpVersion(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStdout string
		wantStderr string
	}{
		{"--help", []string{"--help"}, "", "usage: cgdelegate-hook"},
		{"--version", []string{"--version"}, "cgdelegate-hook " + version.String() + "\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := execHook(t, tc.args, "")
			if code != 0 || stdout != tc.wantStdout || !strings.Contains(stderr, tc.wantStderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0, stdout %q, stderr with %q", code, stdout, stderr, tc.wantStdout, tc.wantStderr)
			}
		})
	}
}

// -install-to copies the running binary, executable, replacing what was
// there, and exits 0; an unwritable target is an error naming it.
func TestInstallTo(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "bin", "cgdelegate-hook")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"-install-to", dst}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not a copy of the running binary", dst)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v (%v), want 0755", fi.Mode(), err)
	}

	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(blocker, "cgdelegate-hook")
	stderr.Reset()
	if code := realMain([]string{"-install-to", bad}, strings.NewReader(""), &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), bad) {
		t.Errorf("stderr %q does not name %s", stderr.String(), bad)
	}
}
