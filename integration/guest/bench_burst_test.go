//go:build integration_guest

package guest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cgdelegate/cgdelegate/integration/internal/bench"
	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
)

// The writable pod burst.
const (
	// burstPods pods are created at once in a burst.
	burstPods = 50
	// burstRounds rounds each run one burst with cgdelegate and one
	// without it, in the order bench.BurstOrder gives, after one burst
	// with cgdelegate that is not counted (the node's first pods meet
	// cold caches). Under emulation two bursts of the same kind differ by
	// up to a fifth: the ratio is of medians over four bursts each.
	burstRounds = 4
	// burstRemovers pods are removed at once after a burst: fifty
	// StopPodSandbox calls at once overrun their 60 s under emulation.
	burstRemovers = 5
	// hookExecs is how many times the hook's start is timed.
	hookExecs = 20
	// burstProfile is how long the plugin's CPU is profiled in the first
	// counted burst with it (a burst takes 35 to 50 s).
	burstProfile = 30 * time.Second
)

// hookExecCost times the start of the createRuntime hook binary
// (`cgdelegate-hook -version`: the Go runtime's start and the flag parse,
// no check) against /bin/true's, and a whole run of the hook as runc runs
// it at a writable container's start (hookRun), hookExecs times each, one
// after the other, and reports the mean wall and CPU time (the child's
// utime+stime) of each as bench.MetricHookExec: what every writable
// container's start pays for the hook, and how much of it is the start.
func (e *guestEnv) hookExecCost(ctx context.Context, t *testing.T) {
	t.Helper()
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatalf("true: %v", err)
	}
	run := e.hookRun(ctx, t)
	values := map[string]float64{bench.KeyHookExecs: hookExecs}
	for _, x := range []struct {
		cmd       func() *exec.Cmd
		wall, cpu string
	}{
		{func() *exec.Cmd { return exec.Command(e.paths.HookBinary, "-version") }, bench.KeyHookWallMS, bench.KeyHookCPUMS},
		{func() *exec.Cmd { return exec.Command(truePath) }, bench.KeyTrueWallMS, bench.KeyTrueCPUMS},
		{run, bench.KeyHookRunWallMS, bench.KeyHookRunCPUMS},
	} {
		var wall, cpu time.Duration
		for range hookExecs {
			cmd := x.cmd()
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", cmd.Args, err, out)
			}
			wall += time.Since(start)
			cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		values[x.wall], values[x.cpu] = ms(wall/hookExecs), ms(cpu/hookExecs)
	}
	t.Logf("the hook's start: %.1f ms wall, %.1f ms CPU; its whole run: %.1f ms, %.1f ms; /bin/true's: %.1f ms, %.1f ms (means of %d)",
		values[bench.KeyHookWallMS], values[bench.KeyHookCPUMS], values[bench.KeyHookRunWallMS], values[bench.KeyHookRunCPUMS],
		values[bench.KeyTrueWallMS], values[bench.KeyTrueCPUMS], hookExecs)
	clusterMetric(t, string(variant.BenchNode), bench.MetricHookExec, values)
}

// hookRun starts a writable pod (cgdelegate running) and returns a maker
// of the command runc runs at its container's start: the path, arguments
// and environment of the cgdelegate hook in the container's OCI spec, the
// container's state on stdin. Its checks then look at the running
// container. The pod is removed when the test ends.
func (e *guestEnv) hookRun(ctx context.Context, t *testing.T) func() *exec.Cmd {
	t.Helper()
	pod, err := e.cri.RunPod(ctx, cri.PodSpec{Name: podName(t, "hook-run"), Annotations: writable(), SystemdCgroup: e.variant.Systemd})
	if err != nil {
		t.Fatalf("hook run: %v", err)
	}
	t.Cleanup(func() {
		if err := pod.Remove(); err != nil {
			t.Errorf("remove pod %s: %v", pod.Spec.Name, err)
		}
	})
	c, err := pod.RunContainer(ctx, sleeper("app", 0))
	if err != nil {
		t.Fatalf("hook run: %v", err)
	}
	bundle := filepath.Join("/run/containerd/io.containerd.runtime.v2.task/k8s.io", c.ID)
	raw, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatalf("hook run: %v", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("hook run: %s: %v", bundle, err)
	}
	var hook *specs.Hook
	if spec.Hooks != nil {
		for i, h := range spec.Hooks.CreateRuntime {
			if filepath.Base(h.Path) == filepath.Base(e.paths.HookBinary) {
				hook = &spec.Hooks.CreateRuntime[i]
			}
		}
	}
	if hook == nil {
		t.Fatalf("hook run: container %s has no createRuntime hook %s: %+v", c.ID, e.paths.HookBinary, spec.Hooks)
	}
	pidText, err := os.ReadFile(filepath.Join(bundle, "init.pid"))
	if err != nil {
		t.Fatalf("hook run: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatalf("hook run: %s/init.pid: %v", bundle, err)
	}
	state, err := json.Marshal(specs.State{Version: spec.Version, ID: c.ID, Status: specs.StateCreating, Pid: pid, Bundle: bundle, Annotations: spec.Annotations})
	if err != nil {
		t.Fatal(err)
	}
	return func() *exec.Cmd {
		return &exec.Cmd{Path: hook.Path, Args: hook.Args, Env: hook.Env, Stdin: bytes.NewReader(state)}
	}
}

// benchBurst creates burstPods pods annotated for writable cgroups at once
// through the CRI (each: RunPodSandbox, then a busybox sleep container
// created and started), with cgdelegate running and with it stopped
// (containerd then runs them without any NRI plugin), burstRounds rounds of
// both, interleaved, on a node with no other pod, after an uncounted
// warm-up burst. A round that starts cgdelegate again before its burst
// with it first runs one more burst, right after the restart, reported on
// its own (the ratio compares a running plugin with none). It reports
// each burst (burstResult) as a bench.MetricBurst line, and checks one
// container of each burst: a writable cgroup mount with cgdelegate, a
// read-only one without.
func (e *guestEnv) benchBurst(ctx context.Context, t *testing.T) {
	t.Helper()
	e.hookExecCost(ctx, t)
	warm := e.burst(ctx, t, "burst-warmup", true)
	t.Logf("warm-up burst with cgdelegate, not counted: %d pods, to running p50 %s", len(warm.toRunning), bench.Percentile(warm.toRunning, 0.5).Round(time.Millisecond))
	restarted := false
	for r := range burstRounds {
		for _, with := range bench.BurstOrder(r) {
			if !with {
				e.stopPluginFor(ctx, t, bench.BurstName(r, with))
			}
			if with && restarted {
				// The first burst of the new process: its own number.
				e.reportBurst(t, r, with, true, e.burst(ctx, t, fmt.Sprintf("burst%d-restarted", r), with))
				restarted = false
			}
			var prof <-chan profileResult
			if r == 0 && with {
				// Where the plugin's CPU in a burst goes.
				prof = e.cpuProfile(ctx, burstProfile)
			}
			res := e.burst(ctx, t, fmt.Sprintf("burst%d-%t", r, with), with)
			if prof != nil {
				logProfile(t, fmt.Sprintf("in the first %s of %s", burstProfile, bench.BurstName(r, with)), <-prof)
			}
			if !with {
				if err := e.startPlugin(ctx, fileSize(e.paths.ContainerdLog)); err != nil {
					t.Fatalf("start cgdelegate after %s: %v", bench.BurstName(r, with), err)
				}
				restarted = true
			}
			e.reportBurst(t, r, with, false, res)
		}
	}
}

// reportBurst logs a burst and writes its bench.MetricBurst line.
func (e *guestEnv) reportBurst(t *testing.T, r int, with, afterRestart bool, res burstResult) {
	t.Helper()
	name := bench.BurstName(r, with)
	values := map[string]float64{bench.KeyBurstRound: float64(r), bench.KeyBurstPods: float64(len(res.toRunning))}
	if with {
		values[bench.KeyBurstWith] = 1
		values[bench.KeyBurstPluginCPUMS], values[bench.KeyBurstHandlersMS] = ms(res.pluginCPU), ms(res.handlers)
	}
	if afterRestart {
		name += ", right after its restart (not counted)"
		values[bench.KeyBurstAfterRestart] = 1
	}
	p50 := func(ds []time.Duration) time.Duration { return bench.Percentile(ds, 0.5) }
	values[bench.KeyBurstP50], values[bench.KeyBurstP99] = bench.Seconds(p50(res.toRunning)), bench.Seconds(bench.Percentile(res.toRunning, 0.99))
	values[bench.KeyBurstRunPodP50], values[bench.KeyBurstCreateP50], values[bench.KeyBurstStartP50] = bench.Seconds(p50(res.runPod)), bench.Seconds(p50(res.create)), bench.Seconds(p50(res.start))
	t.Logf("%s: %d pods, to running p50 %.3f s, p99 %.3f s; calls p50: RunPodSandbox %.3f s, CreateContainer %.3f s, StartContainer %.3f s; plugin CPU %s, its handlers %s (%s)",
		name, len(res.toRunning), values[bench.KeyBurstP50], values[bench.KeyBurstP99],
		values[bench.KeyBurstRunPodP50], values[bench.KeyBurstCreateP50], values[bench.KeyBurstStartP50], res.pluginCPU, res.handlers.Round(time.Millisecond), res.byEvent)
	clusterMetric(t, string(variant.BenchNode), bench.MetricBurst, values)
}

// stopPluginFor stops cgdelegate (SIGTERM) and waits until containerd
// logged its connection closed, so that the next pods meet no plugin.
func (e *guestEnv) stopPluginFor(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	from := fileSize(e.paths.ContainerdLog)
	if err := e.plugin.Stop(20 * time.Second); err != nil {
		t.Fatalf("stop cgdelegate for %s: %v", what, err)
	}
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 30*time.Second, func(l string) bool {
		return strings.Contains(l, "cgdelegate") && strings.Contains(l, "closed")
	}, func() error { return nil }); err != nil {
		t.Fatalf("containerd did not notice cgdelegate stopped: %v", err)
	}
}

// burstResult is what a burst measured: for each pod, the time from the
// burst's start until its container ran and the duration of each of its
// three calls; with cgdelegate, the plugin's CPU time and the time of its
// NRI handlers from the burst's start until the last pod ran.
type burstResult struct {
	toRunning, runPod, create, start []time.Duration
	pluginCPU, handlers              time.Duration
	// byEvent says, per NRI event, how many the plugin answered and how
	// long its answers took in all: "CreateContainer 50 in 2.1s, …".
	byEvent string
}

// burst starts burstPods writable pods at once and measures them
// (burstResult); then it checks one container's cgroup mount and removes
// every pod.
func (e *guestEnv) burst(ctx context.Context, t *testing.T, name string, with bool) burstResult {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		res  burstResult
		pods []*cri.Pod
		ctrs []*cri.Container
		errs []error
	)
	var before map[string]float64
	var cpu0 time.Duration
	if with {
		before, cpu0 = e.scrape(ctx, t), e.pluginCPU(t)
	}
	start := time.Now()
	for i := range burstPods {
		wg.Go(func() {
			spec := cri.PodSpec{Name: podName(t, fmt.Sprintf("%s-%d", name, i)), Annotations: writable(), SystemdCgroup: e.variant.Systemd}
			t0 := time.Now()
			pod, err := e.cri.RunPod(ctx, spec)
			t1 := time.Now()
			var c *cri.Container
			var t2 time.Time
			if err == nil {
				c, err = pod.CreateContainer(ctx, sleeper("app", 0))
				t2 = time.Now()
			}
			if err == nil {
				err = c.Start(ctx)
			}
			t3 := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if pod != nil {
				pods = append(pods, pod)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("pod %d: %w", i, err))
				return
			}
			res.toRunning = append(res.toRunning, t3.Sub(start))
			res.runPod, res.create, res.start = append(res.runPod, t1.Sub(t0)), append(res.create, t2.Sub(t1)), append(res.start, t3.Sub(t2))
			ctrs = append(ctrs, c)
		})
	}
	wg.Wait()
	if with {
		res.pluginCPU = e.pluginCPU(t) - cpu0
		res.handlers, res.byEvent = handlerTimes(before, e.scrape(ctx, t))
	}
	defer removePods(t, pods)
	if len(errs) > 0 {
		t.Fatalf("%s: %d of %d pods failed: %v", name, len(errs), burstPods, errs)
	}
	m, _ := cgroupMount(ctx, t, ctrs[0])
	if m.ReadOnly() == with {
		t.Fatalf("%s: /sys/fs/cgroup = %s, want it writable exactly when cgdelegate runs (%t)", name, m, with)
	}
	return res
}

// handlerTimes is the time the plugin's NRI handlers took between two
// scrapes (cgdelegate_nri_event_duration_seconds), in all and per event
// with the count, most first.
func handlerTimes(before, after map[string]float64) (time.Duration, string) {
	type ev struct {
		name  string
		count float64
		d     time.Duration
	}
	var evs []ev
	var total time.Duration
	for k := range after {
		name, ok := strings.CutPrefix(k, metrics.EventDuration+`_sum{event="`)
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, `"}`)
		if count, d := eventDelta(before, after, name); count > 0 {
			evs = append(evs, ev{name, count, d})
			total += d
		}
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Compare(b.d, a.d) })
	parts := make([]string, len(evs))
	for i, e := range evs {
		parts[i] = fmt.Sprintf("%s %v in %s", e.name, e.count, e.d.Round(time.Millisecond))
	}
	return total, strings.Join(parts, ", ")
}

// removePods removes pods, burstRemovers at a time, and waits for all.
func removePods(t *testing.T, pods []*cri.Pod) {
	t.Helper()
	var wg sync.WaitGroup
	slots := make(chan struct{}, burstRemovers)
	for _, p := range pods {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			if err := p.Remove(); err != nil {
				t.Errorf("remove pod %s: %v", p.Spec.Name, err)
			}
		})
	}
	wg.Wait()
}
