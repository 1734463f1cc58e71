//go:build integration_guest

package guest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/bench"
	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// The bench's knobs. The guest's test binary runs for at most 70 minutes
// in this boot (init.sh); the scenario stops before it.
const (
	benchTimeout = 65 * time.Minute
	// benchSamples pinned pods are started (and removed) at every size.
	benchSamples = 3
	// benchPerPod node-shared containers share a pod: N=100 is 20 pods,
	// 20 shims (containerd 2.x runs one per pod).
	benchPerPod = 5
	// benchPause is the pause between two polling rounds; a round reads
	// every node-shared container's cpuset.cpus.effective.
	benchPause = 5 * time.Millisecond
	// benchClear bounds the wait for an overlap to clear or a pool to widen.
	benchClear = 3 * time.Minute
	// benchFleetMilliCPU is the CPU request of a Burstable fleet container:
	// small, so that the kubelet anchor admits 50 of them beside a pinned
	// pod of 2 CPUs on the 3 CPUs it allocates (CPU 0 is reserved).
	benchFleetMilliCPU = 10
)

// benchNode is `make bench-node` (issue 23): it grows a fleet of node-shared
// containers (busybox sleep, BestEffort and Burstable pods of benchPerPod
// containers) to each size of the cgdbench.sizes kernel parameter, and at
// each size starts benchSamples pinned pods (a 2-CPU budget, a Guaranteed
// 1-CPU container, then a Burstable one) while it polls the fleet's
// cpuset.cpus.effective from the node. It reports, as CGD-METRIC lines
// (integration/internal/bench names them), the lag until no fleet container
// overlaps the pod's bubble (from RunPodSandbox) and the exclusive CPU
// (from CreateContainer), the pinned pod's start, the widening after its
// removal and the plugin's CPU time, RSS, fds and goroutines; then it kills
// the plugin at the largest size and times its restart. Last comes the
// kubelet anchor (benchKubelet): the same sizes and pinned pods with the
// kubelet's static CPU manager pinning instead. It fails when an overlap
// never clears, a pinned container is not pinned, or the restart moves a
// cpuset; it never fails on a number.
func benchNode(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	if e.variant.Plugin != variant.PluginExternal || e.plugin == nil {
		t.Fatalf("variant %s: the bench restarts an external plugin, not %s", e.variant.Name, e.variant.Plugin)
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	sizes, err := bench.SizesFromCmdline(string(cmdline))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	e.benchLogLevel(ctx, t)
	logFrom := fileSize(e.paths.PluginLog)
	t.Cleanup(func() { e.pluginLog(t, logFrom) })
	f := &benchFleet{e: e, all: unionOf(nodeCPUs(t)), by: bench.ByCgdelegate}
	t.Logf("sizes %v, %d pinned pods each, %d node-shared containers a pod, CPUs %s", sizes, benchSamples, benchPerPod, f.all)
	for _, n := range sizes {
		values := map[string]float64{bench.KeyN: float64(n), bench.KeySamples: benchSamples}
		start, cpu0 := time.Now(), e.pluginCPU(t)
		if added := f.grow(ctx, t, n); added > 0 {
			values[bench.KeyCPUPerCreateMS] = ms((e.pluginCPU(t) - cpu0) / time.Duration(added))
			t.Logf("N=%d: %d containers added in %s", n, added, time.Since(start).Round(time.Second))
		}
		f.measure(t, values, func(i int) benchSample { return f.sample(ctx, t, i) })
		e.pluginFootprint(ctx, t, values)
		clusterMetric(t, string(variant.BenchNode), bench.MetricSize, values)
	}
	f.restart(ctx, t)
	e.benchKubelet(ctx, t, sizes, f.all)
}

// benchLogLevel runs the plugin at its default log level (info) for the
// scenario, as a node would: the suite's debug lines are a cost of their own.
func (e *guestEnv) benchLogLevel(ctx context.Context, t *testing.T) {
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

// benchFleet is the node-shared containers: their pods and the host cgroup
// directory of every container.
type benchFleet struct {
	e   *guestEnv
	all cpuset.CPUSet
	// by pins the pinned pods: bench.ByCgdelegate or bench.ByKubelet.
	by string
	// pods and inLast are the CRI's pods (cgdelegate's fleet); the
	// kubelet's fleet is static pods (benchAnchor).
	pods   []*cri.Pod
	inLast int // containers in the last pod
	dirs   []string
}

// grow adds node-shared containers until there are n and returns how many
// it added. Even pods are BestEffort, odd ones Burstable (a 10m request
// and a memory limit).
func (f *benchFleet) grow(ctx context.Context, t *testing.T, n int) int {
	t.Helper()
	added := 0
	for len(f.dirs) < n {
		i := len(f.pods)
		if i == 0 || f.inLast == benchPerPod {
			spec := cri.PodSpec{Name: fmt.Sprintf("fleet-%d", i)}
			if i%2 == 0 {
				spec.UID = fmt.Sprintf("%s-%d", spec.Name, time.Now().UnixNano())
				spec.CgroupParent = cri.PodCgroupParent(f.e.variant.Systemd, "besteffort", spec.UID)
			}
			f.pods = append(f.pods, f.e.runPod(ctx, t, spec))
			f.inLast, i = 0, i+1
		}
		pod := f.pods[i-1]
		spec := sleeper(fmt.Sprintf("c%d", len(f.dirs)), 0)
		if (i-1)%2 == 1 {
			spec.Resources = &runtimeapi.LinuxContainerResources{CpuShares: benchFleetMilliCPU * 1024 / 1000, MemoryLimitInBytes: 32 * mib}
		}
		c := runContainer(ctx, t, pod, spec)
		f.dirs = append(f.dirs, f.e.containerCgroup(t, pod, c))
		f.inLast++
		added++
	}
	return added
}

// fleetPoller polls the fleet in rounds, in its own goroutine, until stop.
// It holds every file open and reads it with pread: one system call a
// container and round, on an emulated machine where each one is dear.
type fleetPoller struct {
	mu   sync.Mutex
	tr   bench.Trace
	err  error
	done chan struct{}
	out  chan struct{}
}

// poll starts polling the fleet as it is now. After a round it pauses
// benchPause or as long as the round took, whichever is longer, so that it
// takes at most about half of one CPU from the node it measures.
func (f *benchFleet) poll() (*fleetPoller, error) {
	files := make([]*os.File, 0, len(f.dirs))
	for _, d := range f.dirs {
		fl, err := os.Open(filepath.Join(d, "cpuset.cpus.effective"))
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("fleet container: %w", err)
		}
		files = append(files, fl)
	}
	p := &fleetPoller{done: make(chan struct{}), out: make(chan struct{})}
	go func() {
		defer close(p.out)
		defer closeAll(files)
		buf := make([]byte, 256)
		for {
			start := time.Now()
			s, err := f.snapshot(files, buf)
			took := time.Since(start)
			p.mu.Lock()
			if err == nil {
				p.tr.Add(s, took)
			}
			p.err = err
			p.mu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(max(benchPause, took)):
			}
		}
	}()
	return p, nil
}

func closeAll(files []*os.File) {
	for _, fl := range files {
		_ = fl.Close()
	}
}

// snapshot reads every fleet container's cpuset.cpus.effective once.
func (f *benchFleet) snapshot(files []*os.File, buf []byte) (bench.Snapshot, error) {
	union, common := cpuset.New(), f.all
	for _, fl := range files {
		n, err := fl.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return bench.Snapshot{}, fmt.Errorf("read %s: %w", fl.Name(), err)
		}
		set, err := cpuset.Parse(strings.TrimSpace(string(buf[:n])))
		if err != nil {
			return bench.Snapshot{}, fmt.Errorf("%s %q: %w", fl.Name(), buf[:n], err)
		}
		union, common = union.Union(set), common.Intersection(set)
	}
	return bench.Snapshot{At: time.Now(), Union: union, Common: common}, nil
}

// waitFor waits until the last snapshot satisfies ok, then stops polling
// and returns the trace.
func (p *fleetPoller) waitFor(ctx context.Context, what string, ok func(bench.Snapshot) bool) (bench.Trace, error) {
	ctx, cancel := context.WithTimeout(ctx, benchClear)
	defer cancel()
	for {
		p.mu.Lock()
		n, err := len(p.tr.Snapshots), p.err
		met := n > 0 && ok(p.tr.Snapshots[n-1])
		p.mu.Unlock()
		if met || err != nil || ctx.Err() != nil {
			tr, perr := p.stop()
			switch {
			case perr != nil:
				return tr, perr
			case !met:
				last := "no round"
				if n > 0 {
					last = fmt.Sprintf("union %s, common %s", tr.Snapshots[n-1].Union, tr.Snapshots[n-1].Common)
				}
				return tr, fmt.Errorf("%s: not within %s: %w (last round: %s)", what, benchClear, ctx.Err(), last)
			}
			return tr, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the polling and returns the trace.
func (p *fleetPoller) stop() (bench.Trace, error) {
	close(p.done)
	<-p.out
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tr, p.err
}

// measure starts and removes benchSamples pinned pods with sample and puts
// the p50 and max of their lags and starts into values.
func (f *benchFleet) measure(t *testing.T, values map[string]float64, sample func(i int) benchSample) {
	t.Helper()
	var podLags, ctrLags, starts, widens []time.Duration
	var cpu, period time.Duration
	for i := range benchSamples {
		s := sample(i)
		podLags, ctrLags = append(podLags, s.podLag), append(ctrLags, s.ctrLag)
		starts, widens = append(starts, s.start), append(widens, s.widen)
		cpu += s.cpu
		period += s.trace.Period()
		t.Logf("%s, N=%d sample %d: bubble %s exclusive %s; lag %s from the pod's start, %s from the exclusive container's; start %s; widened %s after removal; plugin CPU %s; %d rounds, each %s of reading every %s",
			f.by, len(f.dirs), i, s.bubble, s.exclusive, s.podLag, s.ctrLag, s.start, s.widen, s.cpu, s.trace.Rounds, s.trace.MeanRound(), s.trace.Period())
	}
	values[bench.KeyPodLag], values[bench.KeyPodLagMax] = bench.Seconds(bench.Median(podLags)), bench.Seconds(slices.Max(podLags))
	values[bench.KeyCtrLag], values[bench.KeyCtrLagMax] = bench.Seconds(bench.Median(ctrLags)), bench.Seconds(slices.Max(ctrLags))
	values[bench.KeyStart], values[bench.KeyStartMax] = bench.Seconds(bench.Median(starts)), bench.Seconds(slices.Max(starts))
	values[bench.KeyWiden] = bench.Seconds(bench.Median(widens))
	values[bench.KeyPollMS] = ms(period / benchSamples)
	if n := len(f.dirs); n > 0 && f.by == bench.ByCgdelegate {
		values[bench.KeyCPUPerUpdateMS] = ms(cpu / time.Duration(benchSamples*n))
	}
}

// benchSample is one pinned pod's measurement.
type benchSample struct {
	bubble, exclusive            cpuset.CPUSet
	podLag, ctrLag, start, widen time.Duration
	cpu                          time.Duration // the plugin's, until the bubble was clear
	trace                        bench.Trace
}

// sample starts one pinned pod, as a kubelet would (RunPodSandbox, then
// its containers at once), times it while polling the fleet, and removes it.
func (f *benchFleet) sample(ctx context.Context, t *testing.T, i int) benchSample {
	t.Helper()
	e := f.e
	var s benchSample
	p, err := f.poll()
	if err != nil {
		t.Fatal(err)
	}
	cpu0 := e.pluginCPU(t)
	t0 := time.Now()
	spec := cri.PodSpec{Name: podName(t, fmt.Sprintf("pinned-%d-%d", len(f.dirs), i)), Resources: podResources(2), SystemdCgroup: e.variant.Systemd}
	pod, err := e.cri.RunPod(ctx, spec)
	if err != nil {
		_, _ = p.stop()
		t.Fatalf("N=%d: pinned pod: %v", len(f.dirs), err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			if err := pod.Remove(); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
	})
	tc := time.Now()
	ex, err := pod.RunContainer(ctx, guaranteed("exclusive"))
	s.start = time.Since(t0)
	if err != nil {
		_, _ = p.stop()
		t.Fatalf("N=%d: exclusive container: %v", len(f.dirs), err)
	}
	sh, err := pod.RunContainer(ctx, burstable("shared"))
	if err != nil {
		_, _ = p.stop()
		t.Fatalf("N=%d: shared container of the pinned pod: %v", len(f.dirs), err)
	}
	if err := s.pinned(f.cgroupCPUs(t, pod, ex), f.cgroupCPUs(t, pod, sh)); err != nil {
		_, _ = p.stop()
		t.Fatalf("N=%d: %v", len(f.dirs), err)
	}
	err = f.clear(ctx, p, &s, t0, tc)
	s.cpu = e.pluginCPU(t) - cpu0
	if err != nil {
		t.Fatalf("N=%d: %v", len(f.dirs), err)
	}
	removed = true
	if s.widen, err = f.widen(ctx, pod.Remove); err != nil {
		t.Fatalf("N=%d: %v", len(f.dirs), err)
	}
	return s
}

// pinned records the pinned pod's CPUs: its exclusive container's, and
// with its shared container's, the bubble. Each must be one CPU, the two
// disjoint.
func (s *benchSample) pinned(exclusive, shared cpuset.CPUSet) error {
	s.exclusive, s.bubble = exclusive, exclusive.Union(shared)
	if exclusive.Size() != 1 || shared.Size() != 1 || !exclusive.Intersection(shared).IsEmpty() {
		return fmt.Errorf("pinned pod: exclusive %s, shared %s; want one CPU each, disjoint", exclusive, shared)
	}
	return nil
}

// clear waits until no fleet container overlaps the sample's bubble, stops
// p, and reads the lags from its trace: from podFrom (the pinned pod's
// start) and from ctrFrom (its exclusive container's creation).
func (f *benchFleet) clear(ctx context.Context, p *fleetPoller, s *benchSample, podFrom, ctrFrom time.Time) error {
	tr, err := p.waitFor(ctx, "the fleet off the pinned pod's bubble "+s.bubble.String(), func(sn bench.Snapshot) bool {
		return sn.Union.Intersection(s.bubble).IsEmpty()
	})
	if err != nil {
		return err
	}
	s.trace = tr
	var ok1, ok2 bool
	s.podLag, ok1 = tr.DisjointAfter(s.bubble, podFrom)
	s.ctrLag, ok2 = tr.DisjointAfter(s.exclusive, ctrFrom)
	if !ok1 || !ok2 {
		return fmt.Errorf("the trace does not end clear of %s", s.bubble)
	}
	return nil
}

// widen removes the pinned pod with remove while it polls the fleet, and
// returns the time from the removal until every fleet container may run
// on every CPU again.
func (f *benchFleet) widen(ctx context.Context, remove func() error) (time.Duration, error) {
	p, err := f.poll()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := remove(); err != nil {
		_, _ = p.stop()
		return 0, err
	}
	tr, err := p.waitFor(ctx, "the fleet widened to "+f.all.String(), func(sn bench.Snapshot) bool { return f.all.IsSubsetOf(sn.Common) })
	if err != nil {
		return 0, err
	}
	d, _ := tr.WidenedAfter(f.all, t0)
	return d, nil
}

// cgroupCPUs is cpuset.cpus of a container's cgroup, read on the node.
func (f *benchFleet) cgroupCPUs(t *testing.T, pod *cri.Pod, c *cri.Container) cpuset.CPUSet {
	t.Helper()
	return cgroupCPUsOf(t, f.e.containerCgroup(t, pod, c))
}

// cgroupCPUsOf is cpuset.cpus of the cgroup directory dir.
func cgroupCPUsOf(t *testing.T, dir string) cpuset.CPUSet {
	t.Helper()
	raw := readCgroupFile(t, dir, "cpuset.cpus")
	set, err := cpuset.Parse(raw)
	if err != nil {
		t.Fatalf("%s: cpuset.cpus %q: %v", dir, raw, err)
	}
	return set
}

// restart kills the plugin with a pinned pod and the whole fleet running,
// starts it again and times it: until containerd logs it connected and
// synchronized, and until a CreateContainer through it returns. The
// cpuset.cpus and cpu.max of every container must be what they were.
func (f *benchFleet) restart(ctx context.Context, t *testing.T) {
	t.Helper()
	e := f.e
	pod := e.runPod(ctx, t, cri.PodSpec{Name: "restart-pinned", Resources: podResources(2)})
	pinned := []*cri.Container{runContainer(ctx, t, pod, guaranteed("exclusive")), runContainer(ctx, t, pod, burstable("shared"))}
	bubble := f.cgroupCPUs(t, pod, pinned[0]).Union(f.cgroupCPUs(t, pod, pinned[1]))
	p, err := f.poll()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.waitFor(ctx, "the fleet off the bubble "+bubble.String(), func(sn bench.Snapshot) bool {
		return sn.Union.Intersection(bubble).IsEmpty()
	}); err != nil {
		t.Fatal(err)
	}
	dirs := slices.Clone(f.dirs)
	for _, c := range pinned {
		dirs = append(dirs, e.containerCgroup(t, pod, c))
	}
	before := cgroupState(t, dirs)

	restart := e.killPlugin(ctx, t)
	from := fileSize(e.paths.ContainerdLog)
	t0 := time.Now()
	restart()
	synced, err := logTime(e.paths.ContainerdLog, from, "connected and synchronized")
	if err != nil {
		t.Logf("the sync time is when the suite saw the log line (polled every 200 ms): %v", err)
		synced = time.Now()
	}
	values := map[string]float64{
		bench.KeyN: float64(len(f.dirs)), bench.KeySyncS: bench.Seconds(synced.Sub(t0)),
		bench.KeySyncCPUMS: ms(e.pluginCPU(t)),
	}
	// A node-shared container in the fleet's last pod (a sixth in a full
	// one is fine): its CreateContainer is an NRI request to the new process.
	c, err := f.pods[len(f.pods)-1].CreateContainer(ctx, sleeper("after-restart", 0))
	if err != nil {
		t.Fatalf("CreateContainer after the restart: %v", err)
	}
	values[bench.KeyAnswerS] = bench.Seconds(time.Since(t0))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}

	after := cgroupState(t, dirs)
	values[bench.KeyUnchanged] = 1
	for i, d := range dirs {
		if before[i] != after[i] {
			values[bench.KeyUnchanged] = 0
			t.Errorf("the restart at N=%d changed %s: %s, was %s", len(f.dirs), d, after[i], before[i])
		}
	}
	e.pluginFootprint(ctx, t, values)
	t.Logf("restart at N=%d: synchronized %.3fs, answered %.3fs after the new process started", len(f.dirs), values[bench.KeySyncS], values[bench.KeyAnswerS])
	clusterMetric(t, string(variant.BenchNode), bench.MetricRestart, values)
}

// cgroupState is "cpuset.cpus cpu.max" of every cgroup directory.
func cgroupState(t *testing.T, dirs []string) []string {
	t.Helper()
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = readCgroupFile(t, d, "cpuset.cpus") + " " + readCgroupFile(t, d, "cpu.max")
	}
	return out
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

// pluginFootprint puts the plugin's RSS, open fds and goroutines (its
// /metrics) into values.
func (e *guestEnv) pluginFootprint(ctx context.Context, t *testing.T, values map[string]float64) {
	t.Helper()
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
	values[bench.KeyRSSMiB] = float64(rss*10>>20) / 10
	values[bench.KeyFDs] = float64(len(fds))
	if g, ok := e.scrape(ctx, t)["go_goroutines"]; ok {
		values[bench.KeyGoroutines] = g
	} else {
		t.Errorf("the plugin's /metrics has no go_goroutines")
	}
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
