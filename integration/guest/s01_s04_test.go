//go:build integration_guest

package guest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/cri"
	"github.com/cgdelegate/cgdelegate/integration/guest/inspect"
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

// TestS01AnnotatedWritable: an annotated container sees a rw cgroup2 mount
// of its own cgroup namespace root, with nsdelegate, and can run a real
// delegation: a leaf for its processes, controllers for children, limits
// on a child, and a process moved into it.
func TestS01AnnotatedWritable(t *testing.T) {
	e := begin(t)
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("work", 0))

	assertWritableMount(ctx, t, c)
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

// TestS02UnannotatedReadOnly: without the annotation the cgroup mount stays
// read-only and the container cannot create cgroups.
func TestS02UnannotatedReadOnly(t *testing.T) {
	e := begin(t)
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

// ownLimitsScript tries to raise the container's own limits from inside.
const ownLimitsScript = `cd /sys/fs/cgroup
try() {
	if [ ! -e "$1" ]; then echo "$3=absent"; return; fi
	if err=$( (echo "$2" > "$1") 2>&1 ); then echo "$3=written"; else echo "$3=$err"; fi
}
try memory.max max MEMORY_MAX
try cpu.max "max 100000" CPU_MAX
try pids.max max PIDS_MAX
try cpuset.cpus 0 CPUSET_CPUS
try cgroup.max.descendants max MAX_DESCENDANTS
try cgroup.max.depth max MAX_DEPTH
if err=$( (echo $$ > ../cgroup.procs) 2>&1 ); then echo PARENT_PROCS=written; else echo "PARENT_PROCS=$err"; fi
echo "MEMNOW=$(cat memory.max)"
`

// TestS03OwnLimitsProtected: from inside a writable container, the limits
// the kubelet set on it cannot be raised and the parent is out of reach.
func TestS03OwnLimitsProtected(t *testing.T) {
	e := begin(t)
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("limited", 64<<20))
	assertWritableMount(ctx, t, c)

	r := sh(ctx, t, c, ownLimitsScript)
	t.Logf("attempts: %s", r.Stdout)
	got := inspect.Markers(r.Stdout)
	for _, k := range []string{"MEMORY_MAX", "CPU_MAX", "PIDS_MAX", "CPUSET_CPUS", "MAX_DESCENDANTS", "MAX_DEPTH"} {
		v, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: no result", k)
		case v == "absent" && (k == "MEMORY_MAX" || k == "PIDS_MAX" || k == "MAX_DESCENDANTS" || k == "MAX_DEPTH"):
			t.Errorf("%s: file absent, but it must exist to prove protection", k)
		case v == "absent":
			t.Logf("%s: not present in the container's cgroup (controller not enabled)", k)
		case !strings.Contains(v, "Operation not permitted"):
			t.Errorf("%s: %q, want EPERM (Operation not permitted)", k, v)
		}
	}
	if v := got["PARENT_PROCS"]; v == "written" || v == "" {
		t.Errorf("writing the parent's cgroup.procs: %q, want a failure", v)
	}
	if got["MEMNOW"] != strconv.Itoa(64<<20) {
		t.Errorf("memory.max is now %q, want %d", got["MEMNOW"], 64<<20)
	}
}

// TestS04CgroupBomb: a mkdir loop stops at the pod bound with EAGAIN, and
// the count matches the bound; so does a nesting loop for max.depth.
func TestS04CgroupBomb(t *testing.T) {
	e := begin(t)
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("bomb", 0))

	podCg := e.podCgroup(pod)
	maxDesc, err1 := strconv.Atoi(readCgroupFile(t, podCg, "cgroup.max.descendants"))
	maxDepth, err2 := strconv.Atoi(readCgroupFile(t, podCg, "cgroup.max.depth"))
	if err1 != nil || err2 != nil {
		t.Fatalf("pod cgroup %s has no numeric bounds: descendants %v, depth %v", podCg, err1, err2)
	}
	if maxDesc > 250 || maxDepth > 50 {
		t.Errorf("pod bounds descendants=%d depth=%d exceed the defaults 250/50", maxDesc, maxDepth)
	}
	before, err := strconv.Atoi(inspect.KeyValues(readCgroupFile(t, podCg, "cgroup.stat"))["nr_descendants"])
	if err != nil {
		t.Fatalf("cgroup.stat: %v", err)
	}
	t.Logf("pod cgroup %s: max.descendants=%d max.depth=%d, %d descendants before", podCg, maxDesc, maxDepth, before)

	r := sh(ctx, t, c, `i=0; while mkdir /sys/fs/cgroup/b$i 2>/tmp/err; do i=$((i+1)); done
echo "COUNT=$i"; echo "ERR=$(cat /tmp/err)"
j=0; while [ $j -lt $i ]; do rmdir /sys/fs/cgroup/b$j; j=$((j+1)); done`)
	got := inspect.Markers(r.Stdout)
	if want := strconv.Itoa(maxDesc - before); got["COUNT"] != want {
		t.Errorf("mkdir loop created %s cgroups, want %s (bound %d - %d existing)", got["COUNT"], want, maxDesc, before)
	}
	if !strings.Contains(got["ERR"], "Resource temporarily unavailable") {
		t.Errorf("mkdir loop stopped with %q, want EAGAIN (Resource temporarily unavailable)", got["ERR"])
	}

	// The container's cgroup is one level below the pod's.
	r = sh(ctx, t, c, `p=/sys/fs/cgroup; d=0; while mkdir $p/d 2>/tmp/err; do p=$p/d; d=$((d+1)); done
echo "DEPTH=$d"; echo "ERR=$(cat /tmp/err)"
while [ "$p" != /sys/fs/cgroup ]; do rmdir $p; p=${p%/d}; done`)
	got = inspect.Markers(r.Stdout)
	if want := strconv.Itoa(maxDepth - 1); got["DEPTH"] != want {
		t.Errorf("nesting loop reached depth %s below the container, want %s (pod max.depth %d)", got["DEPTH"], want, maxDepth)
	}
	if !strings.Contains(got["ERR"], "Resource temporarily unavailable") {
		t.Errorf("nesting loop stopped with %q, want EAGAIN", got["ERR"])
	}
}
