//go:build integration_guest

package guest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/inspect"
)

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

// ownLimitsProtected (S03): from inside a writable container, the limits the
// kubelet set on it cannot be raised and the parent is out of reach.
func ownLimitsProtected(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("limited", 64<<20))
	assertWritableMount(ctx, t, c)

	assertOwnLimitsRefused(ctx, t, c, strconv.Itoa(64<<20), false)
}

// assertOwnLimitsRefused runs ownLimitsScript in the writable container c:
// every write to its own limits and bounds and to its parent's
// cgroup.procs is refused, and memory.max still reads wantMemory. The
// refusal is nsdelegate's EPERM; in a user-namespaced pod, whose limit
// files belong to an unmapped owner, it may be EACCES first (userns).
func assertOwnLimitsRefused(ctx context.Context, t *testing.T, c *cri.Container, wantMemory string, userns bool) {
	t.Helper()
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
		case userns && strings.Contains(v, "Permission denied"):
		case !strings.Contains(v, "Operation not permitted"):
			t.Errorf("%s: %q, want EPERM (Operation not permitted)", k, v)
		}
	}
	if v := got["PARENT_PROCS"]; v == "written" || v == "" {
		t.Errorf("writing the parent's cgroup.procs: %q, want a failure", v)
	}
	if got["MEMNOW"] != wantMemory {
		t.Errorf("memory.max is now %q, want %s", got["MEMNOW"], wantMemory)
	}
}

// podBounds (S04): a mkdir loop stops at the pod bound with EAGAIN, and the
// count matches the bound; so does a nesting loop for max.depth.
func podBounds(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("bomb", 0))
	assertBoundsHold(ctx, t, c, e.podCgroup(pod))
}

// assertBoundsHold checks the bounds of the pod cgroup at podCg (a host
// path) from inside the writable container c, one level below it: a mkdir
// loop stops at max.descendants with EAGAIN, a nesting loop at max.depth.
func assertBoundsHold(ctx context.Context, t *testing.T, c *cri.Container, podCg string) {
	t.Helper()
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
