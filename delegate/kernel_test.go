package delegate

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// envKernelRoot names a writable cgroup v2 directory delegated to the
// test (a container's /sys/fs/cgroup made writable by cgdelegate, or a
// systemd Delegate=yes scope); the test makes and removes one group there.
const envKernelRoot = "CGDELEGATE_TEST_CGROUP_ROOT"

// On a real cgroup2 root, Start puts the child in its group with
// CLONE_INTO_CGROUP, and Remove removes the group.
func TestKernelStart(t *testing.T) {
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
	g, err := r.Create("cgdelegate-test/w1", Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	}()
	cmd := exec.Command("sh", "-c", "cat /proc/self/cgroup; exit 3")
	var out strings.Builder
	cmd.Stdout = &out
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if code, err := Wait(cmd, nil); err != nil || code != 3 {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	if !strings.Contains(out.String(), "cgdelegate-test/w1") {
		t.Errorf("child ran in %q, want .../cgdelegate-test/w1", out.String())
	}
}
