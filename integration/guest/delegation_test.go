//go:build integration_guest

package guest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// waitDelegation polls `cgdelegate status` until its delegation (what the
// running plugin published at its last refresh) satisfies ok, and returns
// the report; it fails the test after a minute.
func (e *guestEnv) waitDelegation(ctx context.Context, t *testing.T, what string, ok func(*status.Delegation) bool) status.Report {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rep, raw := e.cgdelegateStatus(t)
		if rep.Delegation != nil && ok(rep.Delegation) {
			return rep
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("cgdelegate status: no %s in a minute:\n%s", what, raw)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// podCgroupStat reads the pod cgroup's cgroup.stat on the host.
func (e *guestEnv) podCgroupStat(t *testing.T, pod *cri.Pod) host.CgroupStat {
	t.Helper()
	f, err := os.Open(filepath.Join(e.podCgroup(pod), host.FileStat))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := host.ParseCgroupStat(f)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// nodeDelegationBudget: with nodeMaxDelegatedCgroups 500 (two writable pods
// at the default 250 each), the third writable pod is refused, naming the
// budget, what is reserved and by how many pods, and what it asks; a plain
// pod runs beside it; removing a writable pod frees its share; a restarted
// plugin learns the reservations again from the running containers.
func nodeDelegationBudget(t *testing.T, e *guestEnv) {
	ctx := scenarioCtx(t)
	e.withPluginConfig(ctx, t, "nodeMaxDelegatedCgroups: 500\n")
	e.waitDelegation(ctx, t, "empty ledger with a budget of 500", func(d *status.Delegation) bool {
		return d.Budget == 500 && d.Reserved == 0
	})
	a := e.runPod(ctx, t, cri.PodSpec{Name: "a", Annotations: writable()})
	runContainer(ctx, t, a, sleeper("app", 0))
	b := e.runPod(ctx, t, cri.PodSpec{Name: "b", Annotations: writable()})
	runContainer(ctx, t, b, sleeper("app", 0))
	c := e.runPod(ctx, t, cri.PodSpec{Name: "c", Annotations: writable()})
	_, err := c.CreateContainer(ctx, sleeper("app", 0))
	requireErrContains(t, "a third writable pod past the node budget", err,
		"nodeMaxDelegatedCgroups=500", "500 are reserved by 2 writable pods", "need 250", "cgroup-max-descendants.cgdelegate.io")
	t.Logf("refusal seen by the CRI client: %v", err)
	if got := readCgroupFile(t, e.podCgroup(c), host.FileMaxDescendants); got != "max" {
		t.Errorf("the refused pod's cgroup.max.descendants = %q, want max (untouched)", got)
	}
	plain := e.runPod(ctx, t, cri.PodSpec{Name: "plain"})
	runContainer(ctx, t, plain, sleeper("app", 0))
	// A second container of an admitted pod is not a new reservation.
	runContainer(ctx, t, a, sleeper("sidecar", 0))

	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	runContainer(ctx, t, c, sleeper("app", 0))

	// The plugin restarts: Synchronize gives it b and c, and their pod
	// cgroups' 250 each; a fourth writable pod is refused.
	if err := e.restartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	rep := e.waitDelegation(ctx, t, "the ledger rebuilt after the restart", func(d *status.Delegation) bool {
		return d.Reserved == 500 && len(d.Pods) == 2
	})
	t.Logf("after the restart: %d reserved by %d pods of %d", rep.Delegation.Reserved, len(rep.Delegation.Pods), rep.Delegation.Budget)
	d := e.runPod(ctx, t, cri.PodSpec{Name: "d", Annotations: writable()})
	_, err = d.CreateContainer(ctx, sleeper("app", 0))
	requireErrContains(t, "a writable pod past the budget after a plugin restart", err, "nodeMaxDelegatedCgroups=500", "500 are reserved by 2 writable pods")
}

// dyingChurn is the command of a container that makes dying memory cgroups
// for ten seconds: it moves itself to a leaf, enables the memory
// controller for its children, then creates a child, charges it 64 KiB of
// page cache from a process moved into it, and removes it, in a loop; it
// writes how many it made to /tmp/churned.
const dyingChurn = `set -e
cd /sys/fs/cgroup
mkdir init
echo $$ > init/cgroup.procs
echo +memory > cgroup.subtree_control
i=0
end=$(( $(date +%s) + 10 ))
while [ $(date +%s) -lt $end ]; do
  mkdir c$i
  sh -c "echo \$\$ > /sys/fs/cgroup/c$i/cgroup.procs && head -c 65536 /dev/zero > /tmp/f$i"
  rmdir c$i
  i=$((i+1))
done
echo $i > /tmp/churned
exec sleep 3600
`

// dyingCgroups: a writable container without a memory limit churns memory
// cgroups; cgroup.max.descendants does not count the dying ones it leaves,
// cgdelegate does (status, /metrics) and counts them against the node
// budget, so a writable pod that would fit by the reservations alone is
// refused. It measures how many one container makes in ten seconds, and
// what memory.reclaim and drop_caches free.
func dyingCgroups(t *testing.T, e *guestEnv) {
	ctx := scenarioCtx(t)
	// Two pods at the default 250 fit in 501 only while fewer than two
	// cgroups are dying in them.
	e.withPluginConfig(ctx, t, "nodeMaxDelegatedCgroups: 501\n")
	a := e.runPod(ctx, t, cri.PodSpec{Name: "churn", Annotations: writable()})
	churn := runContainer(ctx, t, a, cri.ContainerSpec{Name: "churn", Image: busyboxImage, Command: []string{"sh", "-c", dyingChurn}})
	var made int
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := churn.Exec(ctx, 10*time.Second, "cat", "/tmp/churned")
		if err == nil && r.ExitCode == 0 {
			made, _ = strconv.Atoi(strings.TrimSpace(r.Stdout))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the churn did not finish in two minutes: %v %v", r, err)
		}
		time.Sleep(time.Second)
	}
	st := e.podCgroupStat(t, a)
	t.Logf("one container made %d memory cgroups in 10 s (%.0f/s under TCG); the pod cgroup has %d live and %d dying descendants",
		made, float64(made)/10, st.Descendants, st.DyingDescendants)
	if st.DyingDescendants < 2 {
		t.Fatalf("the churn left %d dying cgroups, want at least 2 (made %d)", st.DyingDescendants, made)
	}
	rep := e.waitDelegation(ctx, t, "the dying cgroups of the churning pod", func(d *status.Delegation) bool {
		return d.DyingInPods >= 2 && d.Node != nil && d.Node.DyingDescendants >= d.DyingInPods
	})
	t.Logf("cgdelegate status: %d dying in writable pods, node %d live %d dying",
		rep.Delegation.DyingInPods, rep.Delegation.Node.Descendants, rep.Delegation.Node.DyingDescendants)
	samples := e.scrape(ctx, t)
	if v := samples[`cgdelegate_dying_cgroups{scope="writable_pods"}`]; v < 2 {
		t.Errorf(`cgdelegate_dying_cgroups{scope="writable_pods"} = %v, want at least 2`, v)
	}
	if v := samples[`cgdelegate_delegated_cgroups_reserved`]; v != 250 {
		t.Errorf("cgdelegate_delegated_cgroups_reserved = %v, want 250", v)
	}

	b := e.runPod(ctx, t, cri.PodSpec{Name: "next", Annotations: writable()})
	_, err := b.CreateContainer(ctx, sleeper("app", 0))
	requireErrContains(t, "a writable pod past the budget by the dying cgroups", err, "nodeMaxDelegatedCgroups=501", "dying cgroups remain")
	t.Logf("refusal seen by the CRI client: %v", err)

	// What frees them: reclaim of what is charged to the pod, the host's
	// caches, then the files themselves. A write to memory.reclaim that
	// asks for more than can be reclaimed retries in the kernel (minutes
	// under TCG): each is a shell's, killed after 30 s.
	pod := e.podCgroup(a)
	charged := readCgroupFile(t, pod, "memory.current")
	writeKilled(t, filepath.Join(pod, "memory.reclaim"), charged)
	time.Sleep(2 * time.Second)
	afterReclaim := e.podCgroupStat(t, a).DyingDescendants
	writeKilled(t, "/proc/sys/vm/drop_caches", "3")
	time.Sleep(2 * time.Second)
	afterDrop := e.podCgroupStat(t, a).DyingDescendants
	shOK(ctx, t, churn, "rm -f /tmp/f*")
	writeKilled(t, filepath.Join(pod, "memory.reclaim"), readCgroupFile(t, pod, "memory.current"))
	time.Sleep(2 * time.Second)
	afterRemove := e.podCgroupStat(t, a).DyingDescendants
	t.Logf("dying cgroups in the pod: %d after the churn (%s bytes charged to the pod), %d after memory.reclaim of that, "+
		"%d after drop_caches, %d after the files were removed", st.DyingDescendants, charged, afterReclaim, afterDrop, afterRemove)
}

// writeKilled writes data to a kernel file from a shell that is killed
// after 30 s, and logs what happened.
func writeKilled(t *testing.T, path, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, "/bin/sh", "-c", `echo "$1" > "$2"`, "sh", data, path).CombinedOutput()
	t.Logf("echo %s > %s: %v %s (%s)", data, path, err, strings.TrimSpace(string(out)), time.Since(start).Round(time.Millisecond))
}

// unsafeAfterStart: cgroup2 is remounted without nsdelegate while a
// writable container runs. The container can then raise its own
// memory.max (what nsdelegate forbade); cgdelegate names it: an error log
// with its pod and container, cgdelegate status (a problem, and
// delegation.unsafeContainers), cgdelegate_unsafe_writable_containers; a
// plain container is not named. With nsdelegate back the list empties.
func unsafeAfterStart(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	w := e.runPod(ctx, t, cri.PodSpec{Name: "w", Annotations: writable()})
	app := runContainer(ctx, t, w, sleeper("app", 64<<20))
	plain := e.runPod(ctx, t, cri.PodSpec{Name: "plain"})
	runContainer(ctx, t, plain, sleeper("other", 0))
	e.waitDelegation(ctx, t, "the writable container in the ledger", func(d *status.Delegation) bool {
		for _, p := range d.Pods {
			for _, c := range p.Containers {
				if c.ID == app.ID {
					return true
				}
			}
		}
		return false
	})
	logFrom := fileSize(e.paths.PluginLog)
	if err := e.cgroupRemount(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.cgroupRemount(true); err != nil {
			t.Errorf("restoring nsdelegate: %v", err)
		}
	})
	// The threat: the container raises its own limit.
	r := sh(ctx, t, app, "echo max > /sys/fs/cgroup/memory.max && cat /sys/fs/cgroup/memory.max")
	t.Logf("without nsdelegate, the writable container writes its own memory.max: exit %d, %q %q", r.ExitCode, r.Stdout, r.Stderr)

	rep := e.waitDelegation(ctx, t, "the writable container listed as unsafe", func(d *status.Delegation) bool {
		return len(d.Unsafe) > 0
	})
	if u := rep.Delegation.Unsafe; len(u) != 1 || u[0].ID != app.ID || u[0].Container != "app" {
		t.Errorf("unsafe containers %+v, want only %s (app)", u, app.ID)
	}
	if rep.Supported || !strings.Contains(strings.Join(rep.Problems, "\n"), "writable containers run on this host") {
		t.Errorf("cgdelegate status: supported %v, problems %q; want the unsafe container as a problem", rep.Supported, rep.Problems)
	}
	err := waitLog(ctx, e.paths.PluginLog, logFrom, 30*time.Second, func(l string) bool {
		return strings.Contains(l, "writable container runs on a host no longer safe") && strings.Contains(l, "app") && strings.Contains(l, w.Spec.Name)
	}, func() error { return nil })
	if err != nil {
		t.Errorf("no error log naming the writable container: %v\n%s", err, fileTail(e.paths.PluginLog, 20))
	}
	if servesMetrics(e.variant) {
		if v := e.scrape(ctx, t)["cgdelegate_unsafe_writable_containers"]; v != 1 {
			t.Errorf("cgdelegate_unsafe_writable_containers = %v, want 1", v)
		}
	}

	if err := e.cgroupRemount(true); err != nil {
		t.Fatal(err)
	}
	e.waitDelegation(ctx, t, "no unsafe container with nsdelegate back", func(d *status.Delegation) bool { return len(d.Unsafe) == 0 })
}
