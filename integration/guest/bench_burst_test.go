//go:build integration_guest

package guest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/bench"
	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// The writable pod burst (issue 23, item 3).
const (
	// burstPods pods are created at once in a burst.
	burstPods = 50
	// burstRounds rounds each run one burst with cgdelegate and one
	// without it, in the order bench.BurstOrder gives, after one burst
	// with cgdelegate that is not counted (the node's first pods meet
	// cold caches).
	burstRounds = 2
	// burstRemovers pods are removed at once after a burst: fifty
	// StopPodSandbox calls at once overrun their 60 s under emulation.
	burstRemovers = 5
	// hookExecs is how many times the hook's start is timed.
	hookExecs = 20
)

// hookExecCost times the start of the createRuntime hook binary
// (`cgdelegate-hook -version`: the Go runtime's start and the flag parse,
// no check) against /bin/true's, hookExecs times each, one after the
// other, and reports the mean wall and CPU time (the child's utime+stime)
// of each as bench.MetricHookExec: what every writable container's start
// pays for the hook at least.
func (e *guestEnv) hookExecCost(t *testing.T) {
	t.Helper()
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatalf("true: %v", err)
	}
	values := map[string]float64{bench.KeyHookExecs: hookExecs}
	for _, x := range []struct {
		argv      []string
		wall, cpu string
	}{
		{[]string{e.paths.HookBinary, "-version"}, bench.KeyHookWallMS, bench.KeyHookCPUMS},
		{[]string{truePath}, bench.KeyTrueWallMS, bench.KeyTrueCPUMS},
	} {
		var wall, cpu time.Duration
		for range hookExecs {
			cmd := exec.Command(x.argv[0], x.argv[1:]...)
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", x.argv, err, out)
			}
			wall += time.Since(start)
			cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		values[x.wall], values[x.cpu] = ms(wall/hookExecs), ms(cpu/hookExecs)
	}
	t.Logf("the hook's start: %.1f ms wall, %.1f ms CPU; /bin/true's: %.1f ms, %.1f ms (means of %d)",
		values[bench.KeyHookWallMS], values[bench.KeyHookCPUMS], values[bench.KeyTrueWallMS], values[bench.KeyTrueCPUMS], hookExecs)
	clusterMetric(t, string(variant.BenchNode), bench.MetricHookExec, values)
}

// benchBurst creates burstPods pods annotated for writable cgroups at once
// through the CRI (each: RunPodSandbox, then a busybox sleep container
// created and started), with cgdelegate running and with it stopped
// (containerd then runs them without any NRI plugin), burstRounds rounds of
// both, interleaved, on a node with no other pod, after an uncounted
// warm-up burst. It reports each burst's
// p50 and p99 from its start until a pod's container runs, as a
// bench.MetricBurst line, and checks one container of each burst: a
// writable cgroup mount with cgdelegate, a read-only one without.
func (e *guestEnv) benchBurst(ctx context.Context, t *testing.T) {
	t.Helper()
	e.hookExecCost(t)
	warm := e.burst(ctx, t, "burst-warmup", true)
	t.Logf("warm-up burst with cgdelegate, not counted: %d pods, to running p50 %s", len(warm), bench.Percentile(warm, 0.5).Round(time.Millisecond))
	for r := range burstRounds {
		for _, with := range bench.BurstOrder(r) {
			if !with {
				e.stopPluginFor(ctx, t, bench.BurstName(r, with))
			}
			ds := e.burst(ctx, t, fmt.Sprintf("burst%d-%t", r, with), with)
			if !with {
				if err := e.startPlugin(ctx, fileSize(e.paths.ContainerdLog)); err != nil {
					t.Fatalf("start cgdelegate after %s: %v", bench.BurstName(r, with), err)
				}
			}
			p50, p99 := bench.Percentile(ds, 0.5), bench.Percentile(ds, 0.99)
			t.Logf("%s: %d pods, to running p50 %s, p99 %s", bench.BurstName(r, with), len(ds), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
			w := 0.0
			if with {
				w = 1
			}
			clusterMetric(t, string(variant.BenchNode), bench.MetricBurst, map[string]float64{
				bench.KeyBurstRound: float64(r), bench.KeyBurstWith: w, bench.KeyBurstPods: float64(len(ds)),
				bench.KeyBurstP50: bench.Seconds(p50), bench.KeyBurstP99: bench.Seconds(p99),
			})
		}
	}
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

// burst starts burstPods writable pods at once and returns, for each, the
// time from the burst's start until its container ran; then it checks one
// container's cgroup mount and removes every pod.
func (e *guestEnv) burst(ctx context.Context, t *testing.T, name string, with bool) []time.Duration {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ds   []time.Duration
		pods []*cri.Pod
		ctrs []*cri.Container
		errs []error
	)
	start := time.Now()
	for i := range burstPods {
		wg.Go(func() {
			spec := cri.PodSpec{Name: podName(t, fmt.Sprintf("%s-%d", name, i)), Annotations: writable(), SystemdCgroup: e.variant.Systemd}
			pod, err := e.cri.RunPod(ctx, spec)
			var c *cri.Container
			if err == nil {
				c, err = pod.RunContainer(ctx, sleeper("app", 0))
			}
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if pod != nil {
				pods = append(pods, pod)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("pod %d: %w", i, err))
				return
			}
			ds, ctrs = append(ds, d), append(ctrs, c)
		})
	}
	wg.Wait()
	defer removePods(t, pods)
	if len(errs) > 0 {
		t.Fatalf("%s: %d of %d pods failed: %v", name, len(errs), burstPods, errs)
	}
	m, _ := cgroupMount(ctx, t, ctrs[0])
	if m.ReadOnly() == with {
		t.Fatalf("%s: /sys/fs/cgroup = %s, want it writable exactly when cgdelegate runs (%t)", name, m, with)
	}
	return ds
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
