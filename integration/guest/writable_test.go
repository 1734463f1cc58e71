//go:build integration_guest

package guest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/inspect"
)

// delegationSteps moves every process of the container to a leaf, enables
// memory and pids for children, limits a child and moves a process (left
// running as $pid) into it. It prints KEY=value markers; busybox sh reports
// failed writes on stderr.
const delegationSteps = `cd /sys/fs/cgroup || exit 1
mkdir leaf limited || exit 2
for p in $(cat cgroup.procs); do echo $p > leaf/cgroup.procs 2>/dev/null; done
echo "ROOTPROCS=$(wc -l < cgroup.procs)"
if echo "+memory +pids" > cgroup.subtree_control; then echo ENABLE=ok; else echo ENABLE=fail; fi
echo "SUBTREE=$(cat cgroup.subtree_control)"
if echo 33554432 > limited/memory.max; then echo MEMSET=ok; else echo MEMSET=fail; fi
if echo 16 > limited/pids.max; then echo PIDSSET=ok; else echo PIDSSET=fail; fi
sleep 600 >/dev/null 2>&1 &
pid=$!
if echo $pid > limited/cgroup.procs; then echo MOVE=ok; else echo MOVE=fail; fi
echo "CHILDPID=$pid"
echo "CHILDCG=$(cat /proc/$pid/cgroup)"
echo "MEMMAX=$(cat limited/memory.max)"
echo "PIDSMAX=$(cat limited/pids.max)"
`

// delegateScript is the delegation, then the child process goes away.
const delegateScript = delegationSteps + "kill $pid\n"

// annotatedWritable (S01): an annotated container sees a rw cgroup2 mount of
// its own cgroup namespace root, with nsdelegate, and can run a real
// delegation: a leaf for its processes, controllers for children, limits on
// a child, and a process moved into it.
func annotatedWritable(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("work", 0))

	assertWritableMount(ctx, t, c)
	assertDelegates(ctx, t, c)
}

// assertDelegates runs delegateScript in a writable container and checks
// every step of the delegation.
func assertDelegates(ctx context.Context, t *testing.T, c *cri.Container) {
	t.Helper()
	shOK(ctx, t, c, "mkdir /sys/fs/cgroup/probe && rmdir /sys/fs/cgroup/probe")

	r := sh(ctx, t, c, delegateScript)
	t.Logf("delegation: %s", r)
	got := inspect.Markers(r.Stdout)
	want := map[string]string{
		"ROOTPROCS": "0", "ENABLE": "ok", "MEMSET": "ok", "PIDSSET": "ok", "MOVE": "ok",
		"CHILDCG": "0::/limited", "MEMMAX": "33554432", "PIDSMAX": "16",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if s := got["SUBTREE"]; !strings.Contains(s, "memory") || !strings.Contains(s, "pids") {
		t.Errorf("subtree_control = %q, want memory and pids", s)
	}
	// Not an assertion of the issue, but worth knowing: can the runtime still
	// exec into a container whose root cgroup now has children and controllers?
	if r, err := c.Sh(ctx, "cat /proc/self/cgroup"); err != nil || r.ExitCode != 0 {
		t.Logf("note: exec after delegation: %v %s", err, r)
	} else {
		t.Logf("note: exec after delegation lands in %q", strings.TrimSpace(r.Stdout))
	}
}

// unannotatedReadOnly (S02): without the annotation the cgroup mount stays
// read-only and the container cannot create cgroups.
func unannotatedReadOnly(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{})
	c := runContainer(ctx, t, pod, sleeper("plain", 0))
	m, _ := cgroupMount(ctx, t, c)
	if !m.ReadOnly() {
		t.Errorf("/sys/fs/cgroup = %s, want read-only", m)
	}
	r := sh(ctx, t, c, "mkdir /sys/fs/cgroup/x")
	if r.ExitCode == 0 {
		t.Fatalf("mkdir in an unannotated container succeeded")
	}
	if !strings.Contains(r.Stderr, "Read-only file system") {
		t.Errorf("mkdir error %q, want Read-only file system", r.Stderr)
	}
}

// usernsPod (S08): in a user-namespaced pod (hostUsers: false) with the
// cgroupfs driver, the container's root can create and use child cgroups.
// The pod has its own network namespace, as Kubernetes requires for
// hostUsers: false.
func usernsPod(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable(), UserNS: cri.UserNSPod(65536), PodNetwork: true})
	c := runContainer(ctx, t, pod, sleeper("userns", 0))
	if m := strings.Fields(shOK(ctx, t, c, "cat /proc/self/uid_map")); len(m) != 3 || m[0] != "0" || m[1] != "65536" {
		t.Errorf("uid_map = %q, want 0 65536 65536", m)
	}
	assertWritableMount(ctx, t, c)
	assertUsernsDelegates(ctx, t, c)
	// Seen from the host: the container's cgroup belongs to the host IDs
	// its root maps to. With runc's systemd driver runc chowned the UID and
	// the hook the GID too; they must agree, not undo each other.
	dir := e.containerCgroup(t, pod, c)
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("host cgroup %s: %v", dir, err)
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			t.Fatalf("host %s: no owner in %T", filepath.Join(dir, f), fi.Sys())
		}
		if st.Uid != 65536 || st.Gid != 65536 {
			t.Errorf("host %s owned by %d:%d, want 65536:65536", filepath.Join(dir, f), st.Uid, st.Gid)
		}
	}
}

// assertUsernsDelegates checks that root in a user-namespaced writable
// container can make a child cgroup and move a process into it.
func assertUsernsDelegates(ctx context.Context, t *testing.T, c *cri.Container) {
	t.Helper()
	r := sh(ctx, t, c, `cd /sys/fs/cgroup
ls -ln cgroup.procs cgroup.subtree_control .
if mkdir child; then echo MKDIR=ok; else echo MKDIR=fail; fi
sleep 600 >/dev/null 2>&1 &
pid=$!
if echo $pid > child/cgroup.procs; then echo MOVE=ok; else echo MOVE=fail; fi
echo "CHILDCG=$(cat /proc/$pid/cgroup)"
kill $pid; wait $pid 2>/dev/null
rmdir child`)
	t.Logf("inside: %s", r)
	for k, want := range map[string]string{"MKDIR": "ok", "MOVE": "ok", "CHILDCG": "0::/child"} {
		if got := inspect.Markers(r.Stdout)[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}
