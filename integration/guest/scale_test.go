//go:build integration_guest

package guest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/bench"
	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// The scale checks in the suite: no growth over a churn, and a restart at
// size changes nothing, at a smaller N than
// `make bench-node`, sized to run in a few minutes under TCG; the bench
// shares their fleet, their restart and their footprint.
const (
	// churnWaves waves of churnPerWave pods each are created and removed;
	// the first is the warm-up, the last churnRSSReadings are judged.
	// Under TCG on a 2-core machine a wave of 10 takes 20 to 35 s (200
	// pods in waves of 20 took over 5 minutes): 50 pods keep the scenario
	// within about 2.5 minutes. The leak checks at full size are
	// TestChurnThousandPods (in process) and make bench-node.
	churnWaves   = 5
	churnPerWave = 10
	// churnRSSReadings is how many of the readings after the last waves
	// the RSS at the end is the lowest of (bench.WithLowestRSS).
	churnRSSReadings = 3
	// churnMinRSSTolerance is the least the plugin's RSS may stay above its
	// value after the warm-up wave (churnRSSTolerance).
	churnMinRSSTolerance = 4 << 20
	// settleWithin bounds the wait for the plugin's goroutines and fds to
	// come back after the last removal (an update batch or a retry may
	// still be under way).
	settleWithin = 30 * time.Second
	// restartFleet node-shared containers, fleetPerPod to a pod, run beside
	// the pinned pods when ScaleRestart kills the plugin.
	// 30 keep the scenario (whose start and removal of the fleet are most
	// of it) within about 2 minutes; the bench restarts at 100 and 250.
	restartFleet = 30
)

// churnRSSTolerance is how far the plugin's RSS may end a churn above its
// value after the warm-up wave: a quarter of that value, at least
// churnMinRSSTolerance. The plugin is a Go process of about 20 MiB RSS, a
// few MiB of it heap; Go lets the heap grow to twice what is live before it
// collects (GOGC=100) and gives freed pages back to the kernel only
// gradually, so two readings of the same idle process can differ by about
// one heap, and nothing outside the process can force a collection. A leak
// must pass that to show: at about 20 MiB, one of about 130 KiB per churned
// pod (5 MiB over the 40 after the warm-up). The RSS judged is the lowest
// of the readings after the last waves and at the end: a leak raises them
// all, a collection not yet run only some. Smaller leaks of the pinning
// state show in the allocation table, which must be the same as after the
// warm-up, and leaked goroutines and fds are counted exactly.
func churnRSSTolerance(warm bench.Footprint) int64 {
	return max(churnMinRSSTolerance, warm.RSS/4)
}

// measuredPlugin prepares a scenario that measures the plugin's process
// (it reads its /proc, kills it, restarts it): it fails unless the plugin
// pins CPUs and runs as the suite's own external process, restarts it at
// log level info (atInfoLevel) and checks its log at the end, where
// expected (nil: none) accepts the failed updates it causes on purpose
// (pluginLogExcept).
func (e *guestEnv) measuredPlugin(ctx context.Context, t *testing.T, expected func(line string) bool) {
	t.Helper()
	e.requirePinning(t)
	if e.variant.Plugin != variant.PluginExternal || e.plugin == nil {
		t.Fatalf("variant %s: the scenario measures the external plugin's process, not %s", e.variant.Name, e.variant.Plugin)
	}
	e.atInfoLevel(ctx, t)
	logFrom := fileSize(e.paths.PluginLog)
	t.Cleanup(func() { e.pluginLogExcept(t, logFrom, expected) })
}

// scaleCtx bounds a scale scenario: twice the five minutes of the others.
// ScaleChurn takes about 3 minutes with the machine to itself and 5 with a
// second TCG guest beside it (when a developer runs a bench), which the
// five minutes cut short at its last wave.
func scaleCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// scaleChurn is ScaleChurn: churnWaves waves of churnPerWave pods are
// started and removed through the CRI, many at once, as a kubelet syncing a
// busy node would, with cgdelegate pinning at log level info. Every wave
// has node-shared BestEffort and Burstable pods and two pinned pods whose
// budgets carve bubbles out of the node shared pool while those run, and
// return them (churn.specs, churn.wave). After the churn: the allocation table holds none of the
// churned pods and is the one after the warm-up wave, the plugin's
// goroutines are back to their number before the churn, its open fds at
// most their number after the warm-up and its RSS within
// churnRSSTolerance of it.
func scaleChurn(t *testing.T, e *guestEnv) {
	ctx := scaleCtx(t)
	c := &churn{e: e, live: map[string]*cri.Pod{}, churned: map[string]bool{}, removing: map[string]time.Time{}}
	e.measuredPlugin(ctx, t, c.updateOfRemoved)
	pid := e.plugin.Pid()
	t.Cleanup(c.removeLive(t))

	start := e.footprint(ctx, t)
	startDump := e.goroutineDump(ctx)
	var took time.Duration // the waves', without the waits between them
	var warm bench.Footprint
	var warmTable publishedStatus
	var readings []bench.Footprint
	for w := range churnWaves {
		took += c.wave(ctx, t, w)
		if w > 0 {
			readings = append(readings, e.footprint(ctx, t))
			t.Logf("plugin after wave %d: %s", w, readings[len(readings)-1])
		}
		if w == 0 {
			warmTable = e.statusAfter(ctx, t, time.Now(), pid)
			warm = e.footprint(ctx, t)
			c.noChurnedPod(t, "after the warm-up wave", warmTable.table)
		}
	}
	end := e.statusAfter(ctx, t, time.Now(), pid)
	c.noChurnedPod(t, "after the churn", end.table)
	for _, d := range bench.StatusDiff(warmTable.table, end.table) {
		t.Errorf("the allocation table after the churn is not the one after its warm-up wave: %s", d)
	}
	final := e.settledFootprint(ctx, t, start, warm)
	if final.Goroutines > start.Goroutines {
		t.Logf("the plugin's goroutines before the churn:\n%s", startDump)
	}
	final = bench.WithLowestRSS(final, readings[max(0, len(readings)-churnRSSReadings):]...)
	tol := churnRSSTolerance(warm)
	t.Logf("%d pods in %d waves (%d containers) created and removed in %s", len(c.churned), churnWaves, c.containers, took.Round(100*time.Millisecond))
	t.Logf("plugin before the churn: %s; after the warm-up wave: %s; after the churn: %s (the lowest RSS of the last readings; allowed up to %.1f MiB)",
		start, warm, final, float64((warm.RSS+tol)*10>>20)/10)
	t.Logf("allocation table after the churn: %d pods, node shared pool %s", len(end.table.Pods), end.table.NodeSharedPool)
	for _, l := range bench.Leaks(start, warm, final, tol) {
		t.Errorf("the plugin leaks: %s", l)
	}
	values := map[string]float64{
		bench.KeyPods: float64(len(c.churned)), bench.KeyWaves: churnWaves, bench.KeyChurnS: bench.Seconds(took),
		bench.KeyRSSToleranceMiB: float64(tol*10>>20) / 10,
	}
	start.Put(values, bench.SuffixStart)
	warm.Put(values, bench.SuffixWarm)
	final.Put(values, bench.SuffixEnd)
	clusterMetric(t, string(variant.ScaleChurn), bench.MetricChurn, values)
	if got := e.plugin.Pid(); got != pid {
		t.Errorf("the plugin process changed during the churn: %d, was %d", got, pid)
	}
}

// churn is ScaleChurn's pods: those not removed yet, and every one made.
type churn struct {
	e          *guestEnv
	mu         sync.Mutex
	live       map[string]*cri.Pod // by pod ID
	churned    map[string]bool     // pod IDs
	containers int
	// removing is when the churn began to remove each container's pod.
	removing map[string]time.Time
}

// churnSpec is one pod of a wave and its containers.
type churnSpec struct {
	pod  cri.PodSpec
	ctrs []cri.ContainerSpec
}

// churnPod is a started pod of a wave: the containers that started, and
// the error that stopped it.
type churnPod struct {
	pod  *cri.Pod
	ctrs []*cri.Container
	err  error
}

// specs are the pods of wave w: two pinned pods whose budgets take the
// three CPUs the node shared pool can give (it keeps one of the four): 2
// CPUs with an exclusive and a pod-shared container, 1 CPU with a
// pod-shared one; then node-shared pods of one container each, BestEffort
// and Burstable in turn (nodeSharedPod).
func (c *churn) specs(t *testing.T, w int) []churnSpec {
	out := []churnSpec{
		{pod: cri.PodSpec{Name: podName(t, fmt.Sprintf("w%d-pinned2", w)), Resources: podResources(2)}, ctrs: []cri.ContainerSpec{guaranteed("exclusive"), burstable("shared")}},
		{pod: cri.PodSpec{Name: podName(t, fmt.Sprintf("w%d-pinned1", w)), Resources: podResources(1)}, ctrs: []cri.ContainerSpec{burstable("shared")}},
	}
	for i := len(out); i < churnPerWave; i++ {
		out = append(out, churnSpec{
			pod:  nodeSharedPod(c.e.variant.Systemd, podName(t, fmt.Sprintf("w%d-%d", w, i)), i),
			ctrs: []cri.ContainerSpec{nodeSharedContainer("c", i)},
		})
	}
	for i := range out {
		out[i].pod.SystemdCgroup = c.e.variant.Systemd
	}
	return out
}

// wave runs wave w and returns how long it took: its node-shared pods
// start at once, then its two pinned pods at once, which carve their
// bubbles out of a node with those containers running (the plugin narrows
// them); the pinned pods are checked and removed at once (it widens the
// node-shared ones again), then the node-shared pods. So every wave, the
// warm-up first, takes the same paths through the plugin.
func (c *churn) wave(ctx context.Context, t *testing.T, w int) time.Duration {
	t.Helper()
	specs := c.specs(t, w)
	t0 := time.Now()
	shared := c.startAll(ctx, specs[2:])
	pinned := c.startAll(ctx, specs[:2])
	up := time.Since(t0)
	var errs []error
	for _, p := range slices.Concat(pinned, shared) {
		errs = append(errs, p.err)
	}
	if errors.Join(errs...) == nil {
		c.checkPinned(t, w, pinned[0], pinned[1])
	}
	t1 := time.Now()
	c.markRemoving(slices.Concat(pinned, shared))
	errs = append(errs, c.removeAll(pinned)...)
	errs = append(errs, c.removeAll(shared)...)
	t.Logf("wave %d: %d pods up in %s, removed in %s", w, len(specs), up.Round(100*time.Millisecond), time.Since(t1).Round(100*time.Millisecond))
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("wave %d: %v", w, err)
	}
	return time.Since(t0)
}

// startAll starts the pods of specs at once.
func (c *churn) startAll(ctx context.Context, specs []churnSpec) []churnPod {
	pods := make([]churnPod, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() { pods[i] = c.start(ctx, s) })
	}
	wg.Wait()
	return pods
}

// markRemoving notes that the pods' containers are being removed from now.
func (c *churn) markRemoving(pods []churnPod) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range pods {
		for _, ct := range p.ctrs {
			c.removing[ct.ID] = now
		}
	}
}

// updateOfRemoved reports whether a plugin warning about container updates
// that failed again names only containers whose pods the churn had begun
// to remove before the line was logged. A wave removes its pinned pods, whose
// bubbles widen the node shared pool, while it removes the node-shared
// containers that widening updates: the runtime can not update a
// container it is removing, and the plugin drops it once it is gone. A
// failed update of any other container fails the scenario.
func (c *churn) updateOfRemoved(line string) bool {
	at, ids, ok := bench.FailedUpdate(line)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		from, known := c.removing[id]
		if !known || at.Before(from) {
			return false
		}
	}
	return true
}

// removeAll removes the started pods of pods at once.
func (c *churn) removeAll(pods []churnPod) []error {
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		if p.pod != nil {
			wg.Go(func() { errs[i] = c.remove(p.pod) })
		}
	}
	wg.Wait()
	return errs
}

// start runs one pod of a wave and its containers, one after the other.
func (c *churn) start(ctx context.Context, s churnSpec) churnPod {
	pod, err := c.e.cri.RunPod(ctx, s.pod)
	if err != nil {
		return churnPod{err: err}
	}
	c.mu.Lock()
	c.live[pod.ID], c.churned[pod.ID] = pod, true
	c.mu.Unlock()
	p := churnPod{pod: pod}
	for _, cs := range s.ctrs {
		ct, err := pod.RunContainer(ctx, cs)
		if err != nil {
			p.err = err
			return p
		}
		p.ctrs = append(p.ctrs, ct)
	}
	c.mu.Lock()
	c.containers += len(p.ctrs)
	c.mu.Unlock()
	return p
}

// remove removes a pod of the churn.
func (c *churn) remove(pod *cri.Pod) error {
	if err := pod.Remove(); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.live, pod.ID)
	c.mu.Unlock()
	return nil
}

// removeLive is the scenario's cleanup: it removes the pods a failed wave
// left.
func (c *churn) removeLive(t *testing.T) func() {
	return func() {
		c.mu.Lock()
		pods := slices.Collect(maps.Values(c.live))
		c.mu.Unlock()
		for _, p := range pods {
			if err := c.remove(p); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
	}
}

// checkPinned checks, from the node, that the wave's pinned pods got their
// bubbles: the exclusive container one CPU with its quota off, every
// container of the two pods one CPU, no CPU twice.
func (c *churn) checkPinned(t *testing.T, w int, two, one churnPod) {
	t.Helper()
	e := c.e
	seen := cpuset.New()
	for _, p := range []churnPod{two, one} {
		for _, ct := range p.ctrs {
			cpus := e.cgroupCPUs(t, p.pod, ct)
			if cpus.Size() != 1 || !cpus.Intersection(seen).IsEmpty() {
				t.Errorf("wave %d: %s/%s runs on %s; want one CPU of its bubble, none of the other pinned containers' %s", w, p.pod.Spec.Name, ct.Name, cpus, seen)
			}
			seen = seen.Union(cpus)
		}
	}
	ex := two.ctrs[0]
	if q := readCgroupFile(t, e.containerCgroup(t, two.pod, ex), "cpu.max"); !strings.HasPrefix(q, "max ") {
		t.Errorf("wave %d: exclusive container cpu.max %q, want the quota off", w, q)
	}
}

// noChurnedPod fails the test for every churned pod still in the table.
func (c *churn) noChurnedPod(t *testing.T, when string, table policy.Status) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range table.Pods {
		if c.churned[p.ID] {
			t.Errorf("%s the allocation table still holds removed pod %s (%s) with %d containers", when, p.Name, p.ID, len(p.Containers))
		}
	}
}

// scaleRestart is ScaleRestart: two pinned pods (2 CPUs with an exclusive
// and a pod-shared container, 1 CPU with two pod-shared ones: the three
// CPUs the node shared pool can give) and a fleet of restartFleet
// node-shared containers run when the plugin is killed (restartUnchanged);
// the allocation table and every container's cpusets and quota must be
// the same after the restart, and the table before the kill must show the
// bubbles, the slice and the fleet it is to keep.
func scaleRestart(t *testing.T, e *guestEnv) {
	ctx := scaleCtx(t)
	e.measuredPlugin(ctx, t, nil)
	// The pinned pods first: the fleet starts beside their bubbles, and no
	// update batch of a carving has to reach it.
	two := e.runPod(ctx, t, cri.PodSpec{Name: "pinned2", Resources: podResources(2)})
	one := e.runPod(ctx, t, cri.PodSpec{Name: "pinned1", Resources: podResources(1)})
	pinned := []*cri.Container{
		runContainer(ctx, t, two, guaranteed("exclusive")), runContainer(ctx, t, two, burstable("shared")),
		runContainer(ctx, t, one, burstable("shared")), runContainer(ctx, t, one, memoryOnly("shared-mem")),
	}
	f := &nodeFleet{e: e, all: unionOf(nodeCPUs(t))}
	t0 := time.Now()
	f.grow(ctx, t, restartFleet)
	t.Logf("%d node-shared containers in %d pods started in %s", len(f.dirs), len(f.pods), time.Since(t0).Round(100*time.Millisecond))

	r := f.restartUnchanged(ctx, t, pinned...)
	checkRestartTable(t, r.table, f, map[string]podWant{
		two.ID: {cpus: 2, pools: map[string]policy.Pool{"exclusive": policy.PoolExclusive, "shared": policy.PoolPodShared}},
		one.ID: {cpus: 1, pools: map[string]policy.Pool{"shared": policy.PoolPodShared, "shared-mem": policy.PoolPodShared}},
	})
	after := e.footprint(ctx, t)
	t.Logf("restart with %d containers in %d pods running: synchronized %s after the new process started (%s of its CPU), a CreateContainer answered at %s; state unchanged: %v; plugin after it: %s",
		len(f.dirs)+len(pinned), len(f.pods)+2, r.synced.Round(time.Millisecond), r.syncCPU, r.answered.Round(time.Millisecond), r.unchanged, after)
	values := map[string]float64{
		bench.KeyN: float64(len(f.dirs) + len(pinned)), bench.KeyPods: float64(len(f.pods) + 2),
		bench.KeySyncS: bench.Seconds(r.synced), bench.KeySyncCPUMS: ms(r.syncCPU), bench.KeyAnswerS: bench.Seconds(r.answered),
		bench.KeyUnchanged: 0,
	}
	if r.unchanged {
		values[bench.KeyUnchanged] = 1
	}
	after.Put(values, "")
	clusterMetric(t, string(variant.ScaleRestart), bench.MetricScaleRestart, values)
}

// podWant is what a pinned pod's row must show: its bubble's size and the
// pool of each container, by name.
type podWant struct {
	cpus  int
	pools map[string]policy.Pool
}

// checkRestartTable checks that the table the restart kept is worth
// keeping: the pinned pods with their bubbles and pools, and every fleet
// container in the node shared pool.
func checkRestartTable(t *testing.T, table policy.Status, f *nodeFleet, pinned map[string]podWant) {
	t.Helper()
	fleet := map[string]bool{}
	for _, p := range f.pods {
		fleet[p.ID] = true
	}
	nodeShared, seen := 0, map[string]bool{}
	for _, row := range table.Pods {
		seen[row.ID] = true
		if fleet[row.ID] {
			for _, c := range row.Containers {
				if c.Pool != policy.PoolNodeShared || c.CPUs != table.NodeSharedPool {
					t.Errorf("fleet container %s/%s: pool %s cpus %s, want the node shared pool %s", row.Name, c.Name, c.Pool, c.CPUs, table.NodeSharedPool)
				}
			}
			nodeShared += len(row.Containers)
			continue
		}
		want, ok := pinned[row.ID]
		if !ok {
			continue
		}
		bubble, err := cpuset.Parse(row.Bubble)
		if err != nil || bubble.Size() != want.cpus || len(row.Containers) != len(want.pools) {
			t.Errorf("pinned pod %s: bubble %q with %d containers, want %d CPUs and %d containers", row.Name, row.Bubble, len(row.Containers), want.cpus, len(want.pools))
		}
		for _, c := range row.Containers {
			if c.Pool != want.pools[c.Name] {
				t.Errorf("pinned pod %s: container %s in pool %s, want %s", row.Name, c.Name, c.Pool, want.pools[c.Name])
			}
		}
	}
	for id := range pinned {
		if !seen[id] {
			t.Errorf("pinned pod %s is not in the allocation table", id)
		}
	}
	if nodeShared != len(f.dirs) {
		t.Errorf("%d fleet containers in the allocation table, want %d", nodeShared, len(f.dirs))
	}
}

// restartResult is what restartUnchanged measured.
type restartResult struct {
	// synced: from the new process's start until containerd logged it
	// connected and synchronized; answered: until a CreateContainer
	// through it returned.
	synced, answered time.Duration
	// syncCPU is the new process's CPU time just after it synchronized.
	syncCPU time.Duration
	// table is the allocation table before the kill.
	table policy.Status
	// unchanged: the cgroup files and the table were the same after it.
	unchanged bool
}

// restartUnchanged kills the plugin (SIGKILL) with the fleet and the pinned
// containers running, once no fleet container overlaps their CPUs, starts
// it again and checks that the restart moved nothing: the cpuset.cpus,
// cpuset.mems and cpu.max of every container (cgroupState) and the
// allocation table the new process publishes after it synchronized are
// what they were. A node-shared container created after the restart (in
// the fleet's last pod, or without a fleet in the first pinned one's) is
// the NRI request that times the answer; the table's comparison leaves it
// out.
func (f *nodeFleet) restartUnchanged(ctx context.Context, t *testing.T, pinned ...*cri.Container) restartResult {
	t.Helper()
	e := f.e
	dirs, bubbles := slices.Clone(f.dirs), cpuset.New()
	for _, c := range pinned {
		dirs = append(dirs, e.containerCgroup(t, c.Pod, c))
		bubbles = bubbles.Union(e.cgroupCPUs(t, c.Pod, c))
	}
	p, err := f.poll()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.waitFor(ctx, "the fleet off the pinned CPUs "+bubbles.String(), func(sn bench.Snapshot) bool {
		return sn.Union.Intersection(bubbles).IsEmpty()
	}); err != nil {
		t.Fatal(err)
	}
	before := e.statusAfter(ctx, t, time.Now(), e.plugin.Pid())
	cgBefore := cgroupState(t, dirs)

	restart := e.killPlugin(ctx, t)
	from := fileSize(e.paths.ContainerdLog)
	t0 := time.Now()
	restart()
	synced, err := logTime(e.paths.ContainerdLog, from, "connected and synchronized")
	if err != nil {
		t.Logf("the sync time is when the suite saw the log line (polled every 200 ms): %v", err)
		synced = time.Now()
	}
	r := restartResult{synced: synced.Sub(t0), syncCPU: e.pluginCPU(t), table: before.table, unchanged: true}
	probe := pinned[0].Pod
	if len(f.pods) > 0 {
		// A sixth container in a full pod is fine.
		probe = f.pods[len(f.pods)-1]
	}
	c, err := probe.CreateContainer(ctx, sleeper("after-restart", 0))
	if err != nil {
		t.Fatalf("CreateContainer after the restart: %v", err)
	}
	r.answered = time.Since(t0)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}

	for i, now := range cgroupState(t, dirs) {
		if now != cgBefore[i] {
			r.unchanged = false
			t.Errorf("the restart changed %s: %s, was %s", dirs[i], now, cgBefore[i])
		}
	}
	after := e.statusAfter(ctx, t, synced, e.plugin.Pid())
	for _, d := range bench.StatusDiff(before.table, bench.WithoutContainers(after.table, c.ID)) {
		r.unchanged = false
		t.Errorf("the restart changed the allocation table: %s", d)
	}
	return r
}

// statusAfter polls `cgdelegate status` until plugin process pid has
// published a report built after since, and returns it. The plugin
// rebuilds its report every 10 s and writes it when it changed, and at
// least every advert.StatusRefresh when it did not.
func (e *guestEnv) statusAfter(ctx context.Context, t *testing.T, since time.Time, pid int) publishedStatus {
	t.Helper()
	within := advert.StatusRefresh + 20*time.Second
	deadline := time.Now().Add(within)
	for {
		p := e.published(ctx, t)
		if p.pid == pid && p.at.After(since) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status of plugin process %d built after %s within %s; the last is of process %d at %s",
				pid, since.Format(time.RFC3339Nano), within, p.pid, p.at.Format(time.RFC3339Nano))
		}
		time.Sleep(time.Second)
	}
}

// footprint reads the external plugin's goroutines (go_goroutines of its
// /metrics), then its RSS and open fds from /proc: after the scrape, so
// that its kept-alive connection is always counted.
func (e *guestEnv) footprint(ctx context.Context, t *testing.T) bench.Footprint {
	t.Helper()
	g, ok := e.scrape(ctx, t)["go_goroutines"]
	if !ok {
		t.Fatalf("the plugin's /metrics has no go_goroutines")
	}
	proc := fmt.Sprintf("/proc/%d", e.plugin.Pid())
	st, err := os.Open(proc + "/status")
	if err != nil {
		t.Fatalf("plugin RSS: %v", err)
	}
	defer st.Close()
	rss, err := bench.RSSBytes(st)
	if err != nil {
		t.Fatalf("plugin RSS: %v", err)
	}
	fds, err := os.ReadDir(proc + "/fd")
	if err != nil {
		t.Fatalf("plugin fds: %v", err)
	}
	return bench.Footprint{RSS: rss, FDs: len(fds), Goroutines: int(g)}
}

// settledFootprint polls the plugin's footprint until its goroutines are
// back to start's and its fds at most warm's, for at most settleWithin,
// and returns the last.
func (e *guestEnv) settledFootprint(ctx context.Context, t *testing.T, start, warm bench.Footprint) bench.Footprint {
	t.Helper()
	deadline := time.Now().Add(settleWithin)
	for {
		f := e.footprint(ctx, t)
		if f.Goroutines <= start.Goroutines && f.FDs <= warm.FDs {
			return f
		}
		if time.Now().After(deadline) {
			t.Logf("the plugin's goroutines, not settled after %s:\n%s", settleWithin, e.goroutineDump(ctx))
			return f
		}
		time.Sleep(time.Second)
	}
}

// goroutineDump is the plugin's /debug/pprof/goroutine?debug=1 (served with
// profiling: true), or why it could not be read.
func (e *guestEnv) goroutineDump(ctx context.Context) string {
	b, err := pluginGet(ctx, "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return err.Error()
	}
	return string(b[:min(len(b), 64<<10)])
}

// atInfoLevel runs the plugin at its default log level (info) for the
// scenario, as a node would: the suite's debug lines are a cost of their
// own. The scenario's end restarts it at the suite's level.
func (e *guestEnv) atInfoLevel(ctx context.Context, t *testing.T) {
	t.Helper()
	debug := e.plugin.args
	e.plugin.args = []string{"-log-level", "info", "-config", e.paths.PluginYAML}
	t.Cleanup(func() {
		e.plugin.args = debug
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer rcancel()
		if err := e.restartPlugin(rctx); err != nil {
			t.Errorf("cleanup: restart cgdelegate at the suite's log level: %v", err)
		}
	})
	if err := e.restartPlugin(ctx); err != nil {
		t.Fatalf("restart cgdelegate at log level info: %v", err)
	}
}

// containerdTime is the time= field of a containerd (logrus) log line.
var containerdTime = regexp.MustCompile(`time="([^"]+)"`)

// logTime is the time containerd logged the first line after byte offset
// from that names cgdelegate and contains what.
func logTime(path string, from int64, what string) (time.Time, error) {
	return containerdLogTime(path, from, "cgdelegate", what)
}

// containerdLogTime is the time containerd logged the first line after
// byte offset from that contains every one of words.
func containerdLogTime(path string, from int64, words ...string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, fmt.Errorf("containerd log: %w", err)
	}
	if int64(len(b)) < from {
		return time.Time{}, fmt.Errorf("containerd log shorter than offset %d", from)
	}
	sc := bufio.NewScanner(bytes.NewReader(b[from:]))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !containsAll(l, words) {
			continue
		}
		m := containerdTime.FindStringSubmatch(l)
		if m == nil {
			return time.Time{}, fmt.Errorf("containerd log line without a time: %q", l)
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return time.Time{}, fmt.Errorf("containerd log line %q: %w", l, err)
		}
		return at, nil
	}
	return time.Time{}, fmt.Errorf("no line with %q in the containerd log: %w", words, sc.Err())
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// pluginCPU is the external plugin's utime+stime so far.
func (e *guestEnv) pluginCPU(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", e.plugin.Pid()))
	if err != nil {
		t.Fatalf("plugin CPU time: %v", err)
	}
	d, err := bench.CPUTime(string(b))
	if err != nil {
		t.Fatalf("plugin CPU time: %v", err)
	}
	return d
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
