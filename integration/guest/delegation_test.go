//go:build integration_guest

package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/internal/config"
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
	return cgroupStat(t, e.podCgroup(pod))
}

// cgroupStat reads the cgroup.stat of the host cgroup at dir.
func cgroupStat(t *testing.T, dir string) host.CgroupStat {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, host.FileStat))
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

// nodeDelegationBudget: with a nodeMaxDelegatedCgroups of two writable pods
// at the default 250 each, beside the node's dying cgroups (which count,
// and which a busy guest has: a removed container whose memory is still
// charged, such as the image files it read first, in RAM here) and 20
// more, the third writable pod is refused, naming the budget, what is
// reserved and by how many pods, and what it asks; a plain pod runs beside
// it; removing a writable pod frees its share; a restarted plugin learns
// the reservations again from the running containers.
func nodeDelegationBudget(t *testing.T, e *guestEnv) {
	ctx := scenarioCtx(t)
	dying := cgroupStat(t, e.paths.CgroupRoot).DyingDescendants
	limit := 2*config.DefaultMaxDescendants + dying + 20
	budget := fmt.Sprintf("nodeMaxDelegatedCgroups=%d", limit)
	t.Logf("the node has %d dying cgroups: %s", dying, budget)
	e.withPluginConfig(ctx, t, fmt.Sprintf("nodeMaxDelegatedCgroups: %d\n", limit))
	e.waitDelegation(ctx, t, "empty ledger with the budget", func(d *status.Delegation) bool {
		return d.Budget == limit && d.Reserved == 0
	})
	a := e.runPod(ctx, t, cri.PodSpec{Name: "a", Annotations: writable()})
	runContainer(ctx, t, a, sleeper("app", 0))
	b := e.runPod(ctx, t, cri.PodSpec{Name: "b", Annotations: writable()})
	runContainer(ctx, t, b, sleeper("app", 0))
	c := e.runPod(ctx, t, cri.PodSpec{Name: "c", Annotations: writable()})
	_, err := c.CreateContainer(ctx, sleeper("app", 0))
	requireErrContains(t, "a third writable pod past the node budget", err,
		budget, "500 are reserved by 2 writable pods", "need 250", "cgroup-max-descendants.cgdelegate.io")
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
	requireErrContains(t, "a writable pod past the budget after a plugin restart", err, budget, "500 are reserved by 2 writable pods")
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
// cgdelegate does (status, /metrics), and lowers the pod's bound by them
// (TenantChurn plays the budget). It measures how many one container makes
// in ten seconds, and what memory.reclaim and drop_caches free.
func dyingCgroups(t *testing.T, e *guestEnv) {
	ctx := scenarioCtx(t)
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

// churnCap is the churning tenant's cgroup.max.descendants in TenantChurn:
// small, so that even a slow guest (one cgroup a second on a loaded host)
// fills it in seconds.
const churnCap = 12

// tenantChurnScript is the command of a container that churns memory
// cgroups as dyingChurn does, and goes on when the kernel refuses its
// mkdir (one try a second), until it was refused three times or for 60 s:
// it then writes "made refused seconds start first" to /tmp/churned,
// where start and first are /proc/uptime at its start and at its first
// refusal (its churn rate is made over that time, not over the seconds it
// slept once refused).
const tenantChurnScript = `cd /sys/fs/cgroup
mkdir init && echo $$ > init/cgroup.procs && echo +memory > cgroup.subtree_control || exit 1
i=0
refused=0
start=$(date +%s)
up0=$(cut -d' ' -f1 /proc/uptime)
first=
while [ $(date +%s) -lt $((start + 60)) ] && [ $refused -lt 3 ]; do
  if mkdir c$i 2>/dev/null; then
    sh -c "echo \$\$ > /sys/fs/cgroup/c$i/cgroup.procs && head -c 65536 /dev/zero > /tmp/f$i"
    rmdir c$i
    i=$((i+1))
  else
    refused=$((refused+1))
    [ -n "$first" ] || first=$(cut -d' ' -f1 /proc/uptime)
    sleep 1
  fi
done
echo "$i $refused $(( $(date +%s) - start )) $up0 ${first:-$(cut -d' ' -f1 /proc/uptime)}" > /tmp/churned
exec sleep 3600
`

// tenantChurn: a tenant's writable pod (cap 12) churns memory cgroups
// while the node budget has room for it, another tenant's writable
// pod and the node's dying cgroups, and 30 more. The churner's
// cgroup.max.descendants follows its cap less its dying cgroups, so the
// kernel refuses its own mkdir and its live plus dying cgroups stay near
// its cap (sampled every 250 ms; past it by at most what it churns between
// two tightens); the other tenant's writable pod is admitted and runs;
// cgdelegate status shows the bound and counts the node's real dying
// cgroups (the cgroup root's) in what the budget uses. After a plugin
// restart the churner still reserves its cap; removing its files frees its
// dying cgroups and its bound goes back up; what memory.reclaim frees is
// measured; once the churner is removed, its dying cgroups that remain are
// counted outside the writable pods.
func tenantChurn(t *testing.T, e *guestEnv) {
	ctx := scenarioCtx(t)
	root := e.paths.CgroupRoot
	before := cgroupStat(t, root)
	budget := churnCap + config.DefaultMaxDescendants + before.DyingDescendants + 30
	e.withPluginConfig(ctx, t, fmt.Sprintf("nodeMaxDelegatedCgroups: %d\n", budget))
	ann := writable()
	ann[maxDescendantsAnnotation] = strconv.Itoa(churnCap)
	a := e.runPod(ctx, t, cri.PodSpec{Name: "churn", Namespace: "tenant-churn", Annotations: ann})
	churner := a.Spec.Namespace + "/" + a.Spec.Name
	churn := runContainer(ctx, t, a, cri.ContainerSpec{Name: "churn", Image: busyboxImage, Command: []string{"sh", "-c", tenantChurnScript}})
	// Sample the churner's pod cgroup every 250 ms until it is done.
	var made, refused, secs int
	var up0, first float64
	peak := host.CgroupStat{}
	deadline := time.Now().Add(2 * time.Minute)
	var lastExec time.Time
	for {
		if st := e.podCgroupStat(t, a); st.Descendants+st.DyingDescendants > peak.Descendants+peak.DyingDescendants {
			peak = st
		}
		if time.Since(lastExec) < 2*time.Second {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		lastExec = time.Now()
		r, err := churn.Exec(ctx, 10*time.Second, "cat", "/tmp/churned")
		if err == nil && r.ExitCode == 0 {
			if _, err := fmt.Sscan(r.Stdout, &made, &refused, &secs, &up0, &first); err != nil {
				t.Fatalf("/tmp/churned %q: %v", r.Stdout, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the churn did not finish: %v %v", r, err)
		}
	}
	st := e.podCgroupStat(t, a)
	churning := max(first-up0, 0.5)
	rate := float64(made) / churning
	t.Logf("the churner made %d memory cgroups in %d s (%.1f/s under TCG until its first refusal at %.1f s), its mkdir was refused %d times; "+
		"live plus dying peaked at %d+%d (cap %d); now %d live, %d dying, cgroup.max.descendants %s; budget %d (the node had %d dying before)",
		made, secs, rate, churning, refused, peak.Descendants, peak.DyingDescendants, churnCap, st.Descendants, st.DyingDescendants,
		readCgroupFile(t, e.podCgroup(a), host.FileMaxDescendants), budget, before.DyingDescendants)
	if made < churnCap/2 {
		t.Fatalf("the churner made only %d cgroups: no churn to bound", made)
	}
	// A tighten every 200 ms while it churns (a second otherwise): at
	// most what it churns in about two seconds past its cap, the slack a
	// loaded emulated guest needs.
	if n, limit := peak.Descendants+peak.DyingDescendants, churnCap+max(int(2*rate)+1, 5); n > limit {
		t.Errorf("the churner's live plus dying cgroups reached %d, past its cap %d by more than two seconds of churn (%d)", n, churnCap, limit)
	}
	if refused == 0 {
		t.Errorf("the kernel never refused the churner's mkdir (made %d in %d s)", made, secs)
	}

	// Another tenant's writable pod, at the default cap, is admitted and
	// runs: the churn is within the churner's own reservation.
	b := e.runPod(ctx, t, cri.PodSpec{Name: "app", Namespace: "tenant-b", Annotations: writable()})
	if _, err := b.RunContainer(ctx, sleeper("app", 0)); err != nil {
		t.Fatalf("another tenant's writable pod, with the node's real total within the budget: %v", err)
	}
	rep := e.waitDelegation(ctx, t, "both tenants' pods", func(d *status.Delegation) bool { return len(d.Pods) == 2 && d.Node != nil })
	checkInUse(t, rep.Delegation, cgroupStat(t, root))
	for _, p := range rep.Delegation.Pods {
		if p.Pod == churner && (p.Reserved != churnCap || p.Bound != max(churnCap-p.Dying, 0)) {
			t.Errorf("the churner in cgdelegate status: %+v, want reserved %d and bound %d less its dying cgroups", p, churnCap, churnCap)
		}
	}

	// A restarted plugin finds the churner's cap again from its bound and
	// its dying cgroups.
	if err := e.restartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitDelegation(ctx, t, "the churner's cap after a restart", func(d *status.Delegation) bool {
		return len(d.Pods) == 2 && d.Reserved == churnCap+config.DefaultMaxDescendants
	})

	// What frees the churner's dying cgroups: reclaim of what is charged
	// to the pod, then the files themselves (on the container's root, in
	// RAM here); its bound follows them back up.
	pod := e.podCgroup(a)
	charged := readCgroupFile(t, pod, "memory.current")
	writeKilled(t, filepath.Join(pod, "memory.reclaim"), charged)
	afterReclaim := e.podCgroupStat(t, a)
	shOK(ctx, t, churn, "rm -f /tmp/f*")
	writeKilled(t, filepath.Join(pod, "memory.reclaim"), readCgroupFile(t, pod, "memory.current"))
	afterRemove := e.podCgroupStat(t, a)
	rep = e.waitDelegation(ctx, t, "the churner's bound back up", func(d *status.Delegation) bool {
		for _, p := range d.Pods {
			if p.Pod == churner {
				return p.Bound == max(churnCap-p.Dying, 0) && p.Dying < st.DyingDescendants && p.Bound > 0
			}
		}
		return false
	})
	t.Logf("the churner's dying cgroups: %d after the churn (%s bytes charged), %d after memory.reclaim of that, %d after its files were removed; "+
		"cgroup.max.descendants %s", st.DyingDescendants, charged, afterReclaim.DyingDescendants, afterRemove.DyingDescendants,
		readCgroupFile(t, pod, host.FileMaxDescendants))

	// The churner is removed: the dying cgroups it leaves (as many as
	// remain once its files go with its container) stay in the node's
	// count, outside the writable pods.
	nodeBefore := cgroupStat(t, root).DyingDescendants
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	rep = e.waitDelegation(ctx, t, "the churner out of the ledger", func(d *status.Delegation) bool { return len(d.Pods) == 1 && d.Node != nil })
	checkInUse(t, rep.Delegation, cgroupStat(t, root))
	t.Logf("node dying cgroups: %d before the churner's removal, %d after; in use %d of %d",
		nodeBefore, rep.Delegation.Node.DyingDescendants, rep.Delegation.InUse, rep.Delegation.Budget)
}

// checkInUse checks what the budget uses in d: the caps, what pods hold
// past them, and the node's dying cgroups outside them, from the cgroup
// root's count (node, read just after d; cgroups die and go meanwhile).
func checkInUse(t *testing.T, d *status.Delegation, node host.CgroupStat) {
	t.Helper()
	past := 0
	for _, p := range d.Pods {
		past += max(p.Live+p.Dying-p.Reserved, 0)
	}
	if want := d.Reserved + past + max(d.Node.DyingDescendants-d.DyingInPods, 0); d.InUse != want {
		t.Errorf("cgdelegate status: in use %d, want %d reserved + %d past the caps + %d dying outside the writable pods (node %d, pods %d)",
			d.InUse, d.Reserved, past, d.Node.DyingDescendants-d.DyingInPods, d.Node.DyingDescendants, d.DyingInPods)
	}
	if diff := d.Node.DyingDescendants - node.DyingDescendants; diff > 20 || diff < -20 {
		t.Errorf("cgdelegate status counts %d dying cgroups on the node, the cgroup root has %d", d.Node.DyingDescendants, node.DyingDescendants)
	}
	t.Logf("cgdelegate status: %d in use of %d: %d reserved, %d past the caps, %d dying outside the writable pods (node %d, root %d)",
		d.InUse, d.Budget, d.Reserved, past, max(d.Node.DyingDescendants-d.DyingInPods, 0), d.Node.DyingDescendants, node.DyingDescendants)
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
