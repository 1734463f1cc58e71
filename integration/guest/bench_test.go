//go:build integration_guest

package guest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/bench"
	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
)

// The bench's knobs. The guest's test binary runs for at most 90 minutes
// in this boot (init.sh); the scenario stops before it.
const (
	benchTimeout = 85 * time.Minute
	// benchProfile is how long the plugin's CPU is profiled while the
	// fleet grows to the largest size (150 containers take about 150 s);
	// benchProfileTop functions are logged.
	benchProfile    = 90 * time.Second
	benchProfileTop = 25
	// benchSamples pinned pods are started (and removed) at every size.
	benchSamples = 3
)

// benchNode is `make bench-node`: it grows a fleet of node-shared
// containers (busybox sleep, BestEffort and Burstable pods of fleetPerPod
// containers) to each size of the cgdbench.sizes kernel parameter, and at
// each size starts benchSamples pinned pods (a 2-CPU budget, a Guaranteed
// 1-CPU container, then a Burstable one) while it polls the fleet's
// cpuset.cpus.effective from the node. It reports, as CGD-METRIC lines
// (integration/internal/bench names them), the lag until no fleet container
// overlaps the pod's bubble (from RunPodSandbox) and the exclusive CPU
// (from CreateContainer), the pinned pod's start, the widening after its
// removal and the plugin's CPU time, RSS, fds and goroutines; then, with
// cgdelegate stopped, the start of the same pods (unpinned: the runtime's
// own cost of a start at that size); after the sizes it kills
// the plugin at the largest size and times its restart. First, on the
// empty node, it times bursts of writable pods with and without
// cgdelegate (benchBurst); last comes the kubelet anchor (benchKubelet):
// the same sizes and pinned pods with the kubelet's static CPU manager
// pinning instead. It fails when an overlap never clears, a pinned
// container is not pinned, or the restart moves a cpuset; it never fails
// on a number.
func benchNode(t *testing.T, e *guestEnv) {
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
	e.measuredPlugin(ctx, t, nil)
	e.benchBurst(ctx, t)
	f := &nodeFleet{e: e, all: unionOf(nodeCPUs(t)), by: bench.ByCgdelegate}
	t.Logf("sizes %v, %d pinned pods each, %d node-shared containers a pod, CPUs %s", sizes, benchSamples, fleetPerPod, f.all)
	for i, n := range sizes {
		values := map[string]float64{bench.KeyN: float64(n), bench.KeySamples: benchSamples}
		var prof <-chan profileResult
		if i == len(sizes)-1 && n > len(f.dirs) {
			prof = e.cpuProfile(ctx, benchProfile)
		}
		start, cpu0 := time.Now(), e.pluginCPU(t)
		if added := f.grow(ctx, t, n); added > 0 {
			values[bench.KeyCPUPerCreateMS] = ms((e.pluginCPU(t) - cpu0) / time.Duration(added))
			t.Logf("N=%d: %d containers added in %s", n, added, time.Since(start).Round(time.Second))
		}
		if prof != nil {
			logProfile(t, fmt.Sprintf("while the fleet grew to N=%d", n), <-prof)
		}
		f.measure(t, values, func(i int) benchSample { return f.sample(ctx, t, i) })
		e.footprint(ctx, t).Put(values, "")
		clusterMetric(t, string(variant.BenchNode), bench.MetricSize, values)
		f.unpinned(ctx, t)
	}
	f.restart(ctx, t)
	e.benchKubelet(ctx, t, sizes, f.all)
}

// profileResult is a CPU profile of the plugin, or why there is none.
type profileResult struct {
	data []byte
	err  error
}

// cpuProfile takes a CPU profile of the plugin over d in the background
// (its /debug/pprof/profile, served with profiling: true).
func (e *guestEnv) cpuProfile(ctx context.Context, d time.Duration) <-chan profileResult {
	out := make(chan profileResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
		defer cancel()
		data, err := pluginGet(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())))
		out <- profileResult{data: data, err: err}
	}()
	return out
}

// logProfile logs the functions the plugin spent the most CPU in. It fails
// the test when there is no profile: the bench variant serves one.
func logProfile(t *testing.T, during string, r profileResult) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("CPU profile of the plugin %s: %v", during, r.err)
	}
	total, flat, cum, err := bench.TopFunctions(bytes.NewReader(r.data), benchProfileTop)
	if err != nil {
		t.Fatalf("CPU profile of the plugin %s: %v", during, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CPU profile of the plugin %s: %s of CPU sampled", during, total)
	for _, x := range []struct {
		title  string
		shares []bench.FuncShare
	}{{"flat (on top of the stack)", flat}, {"cumulative (anywhere on the stack)", cum}} {
		fmt.Fprintf(&b, "\n  %s:", x.title)
		for _, s := range x.shares {
			fmt.Fprintf(&b, "\n    %6.1f%% flat %8s cum %8s  %s", 100*s.Flat.Seconds()/max(total.Seconds(), 1e-9),
				s.Flat.Round(time.Millisecond), s.Cum.Round(time.Millisecond), s.Name)
		}
	}
	t.Log(b.String())
}

// measure starts and removes benchSamples pinned pods with sample and puts
// the p50 and max of their lags and starts into values.
func (f *nodeFleet) measure(t *testing.T, values map[string]float64, sample func(i int) benchSample) {
	t.Helper()
	var podLags, ctrLags, starts, widens, runPods, handlers, drains []time.Duration
	var cpu, period time.Duration
	for i := range benchSamples {
		s := sample(i)
		podLags, ctrLags, runPods = append(podLags, s.podLag), append(ctrLags, s.ctrLag), append(runPods, s.runPod)
		handlers, drains = append(handlers, s.handler), append(drains, s.drain)
		starts, widens = append(starts, s.start), append(widens, s.widen)
		cpu += s.cpu
		period += s.trace.Period()
		t.Logf("%s, N=%d sample %d: bubble %s exclusive %s; updates of the sample before drained in %s; lag %s from the pod's start (its RunPodSandbox took %s, cgdelegate's answer to it %s), %s from the exclusive container's; start %s; widened %s after removal; plugin CPU %s; %d rounds, each %s of reading every %s",
			f.by, len(f.dirs), i, s.bubble, s.exclusive, s.drain, s.podLag, s.runPod, s.handler, s.ctrLag, s.start, s.widen, s.cpu, s.trace.Rounds, s.trace.MeanRound(), s.trace.Period())
	}
	values[bench.KeyPodLag], values[bench.KeyPodLagMax] = bench.Seconds(bench.Median(podLags)), bench.Seconds(slices.Max(podLags))
	values[bench.KeyCtrLag], values[bench.KeyCtrLagMax] = bench.Seconds(bench.Median(ctrLags)), bench.Seconds(slices.Max(ctrLags))
	values[bench.KeyStart], values[bench.KeyStartMax] = bench.Seconds(bench.Median(starts)), bench.Seconds(slices.Max(starts))
	values[bench.KeyWiden] = bench.Seconds(bench.Median(widens))
	values[bench.KeyPollMS] = ms(period / benchSamples)
	if f.by == bench.ByCgdelegate {
		values[bench.KeyRunPodS] = bench.Seconds(bench.Median(runPods))
		values[bench.KeyRunPodHandlerMS] = ms(bench.Median(handlers))
		values[bench.KeyDrainS] = bench.Seconds(bench.Median(drains))
	}
	if n := len(f.dirs); n > 0 && f.by == bench.ByCgdelegate {
		values[bench.KeyCPUPerUpdateMS] = ms(cpu / time.Duration(benchSamples*n))
	}
}

// benchSample is one pinned pod's measurement.
type benchSample struct {
	bubble, exclusive            cpuset.CPUSet
	podLag, ctrLag, start, widen time.Duration
	runPod                       time.Duration // the RunPodSandbox call (cgdelegate's samples only)
	handler                      time.Duration // cgdelegate's answer to its NRI RunPodSandbox
	drain                        time.Duration // the runtime updates of the sample before, still going when it began
	cpu                          time.Duration // the plugin's, until the bubble was clear
	trace                        bench.Trace
}

// sample starts one pinned pod, as a kubelet would (RunPodSandbox, then
// its containers at once), times it while polling the fleet, and removes it.
func (f *nodeFleet) sample(ctx context.Context, t *testing.T, i int) benchSample {
	t.Helper()
	e := f.e
	var s benchSample
	s.drain = e.updatesSettled(ctx, t)
	p, err := f.poll()
	if err != nil {
		t.Fatal(err)
	}
	before := e.scrape(ctx, t)
	cpu0 := e.pluginCPU(t)
	t0 := time.Now()
	pp, err := f.startPinned(ctx, t, fmt.Sprintf("pinned-%d-%d", len(f.dirs), i))
	if err != nil {
		_, _ = p.stop()
		t.Fatalf("N=%d: %v", len(f.dirs), err)
	}
	s.runPod, s.start = pp.runPod, pp.start
	if err := s.pinned(e.cgroupCPUs(t, pp.pod, pp.ex), e.cgroupCPUs(t, pp.pod, pp.sh)); err != nil {
		_, _ = p.stop()
		t.Fatalf("N=%d: %v", len(f.dirs), err)
	}
	err = f.clear(ctx, p, &s, t0, t0.Add(pp.runPod))
	s.cpu = e.pluginCPU(t) - cpu0
	if err != nil {
		t.Fatalf("N=%d: %v", len(f.dirs), err)
	}
	if s.handler, err = eventTime(before, e.scrape(ctx, t), "RunPodSandbox", 1); err != nil {
		t.Fatalf("N=%d: %v", len(f.dirs), err)
	}
	pp.removed = true
	if s.widen, err = f.widen(ctx, pp.pod.Remove); err != nil {
		t.Fatalf("N=%d: %v", len(f.dirs), err)
	}
	return s
}

// pinnedPod is a started pinned pod: its containers, how long its
// RunPodSandbox took, and its start (RunPodSandbox until the exclusive
// container ran). Unless removed is set, cleanup removes it.
type pinnedPod struct {
	pod           *cri.Pod
	ex, sh        *cri.Container
	runPod, start time.Duration
	removed       bool
}

// startPinned starts the pinned pod of a sample, as a kubelet would
// (RunPodSandbox, then its containers): a 2-CPU budget, a Guaranteed
// 1-CPU container, then a Burstable one.
func (f *nodeFleet) startPinned(ctx context.Context, t *testing.T, name string) (*pinnedPod, error) {
	t.Helper()
	t0 := time.Now()
	spec := cri.PodSpec{Name: podName(t, name), Resources: podResources(2), SystemdCgroup: f.e.variant.Systemd}
	pod, err := f.e.cri.RunPod(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("pinned pod: %w", err)
	}
	pp := &pinnedPod{pod: pod, runPod: time.Since(t0)}
	t.Cleanup(func() {
		if !pp.removed {
			if err := pod.Remove(); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
	})
	if pp.ex, err = pod.RunContainer(ctx, guaranteed("exclusive")); err != nil {
		return nil, fmt.Errorf("exclusive container: %w", err)
	}
	pp.start = time.Since(t0)
	if pp.sh, err = pod.RunContainer(ctx, burstable("shared")); err != nil {
		return nil, fmt.Errorf("shared container of the pinned pod: %w", err)
	}
	return pp, nil
}

// unpinned stops cgdelegate, starts and removes benchSamples pods of the
// pinned pods' shape (nothing pins them), and starts cgdelegate again: the
// runtime's own start at this size, the baseline the start ratio is read
// against (bench.MetricUnpinnedSize).
func (f *nodeFleet) unpinned(ctx context.Context, t *testing.T) {
	t.Helper()
	e, n := f.e, len(f.dirs)
	e.stopPluginFor(ctx, t, fmt.Sprintf("the runtime alone at N=%d", n))
	var starts, runPods []time.Duration
	for i := range benchSamples {
		pp, err := f.startPinned(ctx, t, fmt.Sprintf("unpinned-%d-%d", n, i))
		if err != nil {
			t.Fatalf("N=%d, cgdelegate stopped: %v", n, err)
		}
		pp.removed = true
		if err := pp.pod.Remove(); err != nil {
			t.Fatalf("N=%d, cgdelegate stopped: %v", n, err)
		}
		t.Logf("nobody, N=%d sample %d: start %s (its RunPodSandbox took %s)", n, i, pp.start, pp.runPod)
		starts, runPods = append(starts, pp.start), append(runPods, pp.runPod)
	}
	if err := e.startPlugin(ctx, fileSize(e.paths.ContainerdLog)); err != nil {
		t.Fatalf("start cgdelegate after the runtime alone at N=%d: %v", n, err)
	}
	clusterMetric(t, string(variant.BenchNode), bench.MetricUnpinnedSize, map[string]float64{
		bench.KeyN: float64(n), bench.KeySamples: benchSamples,
		bench.KeyStart: bench.Seconds(bench.Median(starts)), bench.KeyStartMax: bench.Seconds(slices.Max(starts)),
		bench.KeyRunPodS: bench.Seconds(bench.Median(runPods)),
	})
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
func (f *nodeFleet) clear(ctx context.Context, p *fleetPoller, s *benchSample, podFrom, ctrFrom time.Time) error {
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
func (f *nodeFleet) widen(ctx context.Context, remove func() error) (time.Duration, error) {
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

// restart kills the plugin at the largest size, with a pinned pod (a 2-CPU
// budget, an exclusive and a pod-shared container) beside the whole fleet
// (restartUnchanged), and reports the times.
func (f *nodeFleet) restart(ctx context.Context, t *testing.T) {
	t.Helper()
	pod := f.e.runPod(ctx, t, cri.PodSpec{Name: "restart-pinned", Resources: podResources(2)})
	r := f.restartUnchanged(ctx, t, runContainer(ctx, t, pod, guaranteed("exclusive")), runContainer(ctx, t, pod, burstable("shared")))
	values := map[string]float64{
		bench.KeyN: float64(len(f.dirs)), bench.KeySyncS: bench.Seconds(r.synced), bench.KeySyncCPUMS: ms(r.syncCPU),
		bench.KeyAnswerS: bench.Seconds(r.answered), bench.KeyUnchanged: 0,
	}
	if r.unchanged {
		values[bench.KeyUnchanged] = 1
	}
	f.e.footprint(ctx, t).Put(values, "")
	t.Logf("restart at N=%d: synchronized %.3fs, answered %.3fs after the new process started", len(f.dirs), values[bench.KeySyncS], values[bench.KeyAnswerS])
	clusterMetric(t, string(variant.BenchNode), bench.MetricRestart, values)
}

// updatesSettled waits until the plugin has sent no container update
// (cgdelegate_container_updates_total, sent or failed) for settleQuiet, so
// that a sample does not start while the runtime still applies the updates
// of the one before (a pinned pod's removal widens every fleet container:
// a `runc update` each, under the runtime's NRI lock, which the new pod's
// events wait for). It returns how long the updates went on after the
// call; it fails the test when they do not settle within settleMax.
func (e *guestEnv) updatesSettled(ctx context.Context, t *testing.T) time.Duration {
	t.Helper()
	const settleQuiet, settleMax = 3 * time.Second, 3 * time.Minute
	sent := func() float64 {
		m := e.scrape(ctx, t)
		return m[metrics.ContainerUpdatesTotal+`{result="`+metrics.UpdateSent+`"}`] + m[metrics.ContainerUpdatesTotal+`{result="`+metrics.UpdateFailed+`"}`]
	}
	start := time.Now()
	last, lastChange := sent(), start
	for time.Since(lastChange) < settleQuiet {
		if time.Since(start) > settleMax {
			t.Fatalf("the plugin was still sending container updates %s after the sample before (%v sent so far)", settleMax, last)
		}
		time.Sleep(250 * time.Millisecond)
		if v := sent(); v != last {
			last, lastChange = v, time.Now()
		}
	}
	return lastChange.Sub(start)
}

// eventTime is the mean time the plugin took to answer event between two
// scrapes of its /metrics (cgdelegate_nri_event_duration_seconds), which
// must have seen exactly n of them.
func eventTime(before, after map[string]float64, event string, n int) (time.Duration, error) {
	count, d := eventDelta(before, after, event)
	if int(count) != n {
		return 0, fmt.Errorf("the plugin's /metrics counted %v %s events between two scrapes, want %d", count, event, n)
	}
	return d / time.Duration(count), nil
}

// eventDelta is how many event requests the plugin answered between two
// scrapes, and how long its answers took in all
// (cgdelegate_nri_event_duration_seconds).
func eventDelta(before, after map[string]float64, event string) (float64, time.Duration) {
	key := func(part string) string { return fmt.Sprintf("%s_%s{event=%q}", metrics.EventDuration, part, event) }
	return after[key("count")] - before[key("count")], time.Duration((after[key("sum")] - before[key("sum")]) * float64(time.Second))
}
