package delegate

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// envKernelRoot names a writable cgroup v2 directory delegated to the
// test (a container's /sys/fs/cgroup made writable by cgdelegate, or a
// systemd Delegate=yes scope); the test makes and removes groups there.
// The VM scenario InPodWorkers runs this test inside a writable pod.
const envKernelRoot = "CGDELEGATE_TEST_CGROUP_ROOT"

// kernelRoot returns the real delegated root, or skips.
func kernelRoot(t *testing.T) *Root {
	t.Helper()
	dir := os.Getenv(envKernelRoot)
	if dir == "" {
		t.Skipf("needs a real delegated cgroup v2 root: set %s to a writable cgroup2 directory whose processes may be moved (the fake-tree tests cover the logic)", envKernelRoot)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Skipf("%s=%s is not a cgroup2 directory (statfs: %v)", envKernelRoot, dir, err)
	}
	cgroups.TestMode = false
	r := New(Options{CgroupRoot: dir, Proc: "/proc"})
	if err := r.Prepare("", []string{}); err != nil {
		t.Fatal(err)
	}
	return r
}

// On a real cgroup2 root, Start puts the child in its group with
// CLONE_INTO_CGROUP (startInto, no fallback: the first thing the child
// reads is its own cgroup), the limit is the kernel's, and Remove removes
// the group.
func TestKernelStart(t *testing.T) {
	r := kernelRoot(t)
	tests := []struct {
		name  string
		start func(*Group, *exec.Cmd) error
	}{
		{"CLONE_INTO_CGROUP", (*Group).startInto},
		{"Start", (*Group).Start},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := r.Create("cgdelegate-test/w1", Limits{Pids: 16})
			if err != nil {
				t.Fatal(err)
			}
			dir := g.Dir()
			cmd := exec.Command("sh", "-c", "cat /proc/self/cgroup; exit 3")
			var out strings.Builder
			cmd.Stdout = &out
			if err := tc.start(g, cmd); err != nil {
				t.Fatal(err)
			}
			if code, err := Wait(cmd, nil); err != nil || code != 3 {
				t.Fatalf("Wait = %d, %v", code, err)
			}
			rel, _ := filepath.Rel(r.Dir(), dir)
			if !strings.HasSuffix(strings.TrimSpace(out.String()), "/"+rel) {
				t.Errorf("child ran in %q, want .../%s", out.String(), rel)
			}
			if got, err := readFile(dir, "pids.max"); err != nil || got != "16" {
				t.Errorf("pids.max = %q, %v; want 16", got, err)
			}
			if err := g.Remove(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after Remove, %s: %v; want it gone", dir, err)
			}
		})
	}
}

// A worker that leaves a process behind: Remove finds the group busy,
// kills what is left with cgroup.kill, and removes it.
func TestKernelRemoveKillsLeftovers(t *testing.T) {
	r := kernelRoot(t)
	g, err := r.Create("cgdelegate-test-leftover", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!")
	var out strings.Builder
	cmd.Stdout = &out
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if code, err := Wait(cmd, nil); err != nil || code != 0 {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("leftover pid %q: %v", out.String(), err)
	}
	if procs, _ := readFile(g.Dir(), fileProcs); procs != strconv.Itoa(pid) {
		t.Fatalf("%s/cgroup.procs = %q, want the leftover %d", g.Dir(), procs, pid)
	}
	dir := g.Dir()
	if err := g.Remove(); err != nil {
		t.Fatalf("Remove with a leftover process: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Remove, %s: %v; want it gone", dir, err)
	}
	// Killed: gone, or a zombie nobody reaps (PID 1 of the container).
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leftover %d still alive after Remove: %s", pid, stat)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
