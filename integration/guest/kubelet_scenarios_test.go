//go:build integration_guest

package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/inspect"
	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// kubeletWritable: the annotated pod of testdata/pods/writable.yaml runs
// under the kubelet; its container sees a writable cgroup namespace root
// and delegates (child cgroups with limits), cannot raise the limit the
// kubelet gave it, and the bounds are on the pod cgroup the kubelet made,
// kubepods/burstable/pod<uid>, with the container's cgroup below it.
func kubeletWritable(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	k := e.requireKubelet(t)
	ctx := scenarioCtx(t)
	sp := k.run(t, e, loadPod(t, "writable.yaml"))
	p := k.waitRunning(ctx, t, sp, "work")
	c := e.kubeletContainer(ctx, t, p, "work")

	if p.Status.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("qosClass %q, want Burstable (a memory limit only)", p.Status.QOSClass)
	}
	podCg := e.kubeletPodCgroup(t, k, p)
	// Where each driver puts a Burstable pod and its containers, written
	// out rather than derived (kubelet.PodCgroup is what is being checked).
	want := filepath.Join(e.paths.CgroupRoot, "kubepods", "burstable", "pod"+string(p.UID))
	ctrCg := filepath.Join(podCg, c.ID)
	if e.variant.Systemd {
		want = filepath.Join(e.paths.CgroupRoot, "kubepods.slice", "kubepods-burstable.slice",
			"kubepods-burstable-pod"+strings.ReplaceAll(string(p.UID), "-", "_")+".slice")
		ctrCg = filepath.Join(podCg, "cri-containerd-"+c.ID+".scope")
	}
	if podCg != want {
		t.Errorf("pod cgroup %s, want %s", podCg, want)
	}
	if got := readCgroupFile(t, ctrCg, "memory.max"); got != strconv.Itoa(64*mib) {
		t.Errorf("container cgroup %s: memory.max %s, want the kubelet's 64Mi", ctrCg, got)
	}
	t.Logf("pod cgroup %s: max.descendants=%s max.depth=%s", podCg,
		readCgroupFile(t, podCg, "cgroup.max.descendants"), readCgroupFile(t, podCg, "cgroup.max.depth"))

	assertWritableMount(ctx, t, c)
	assertDelegates(ctx, t, c)
	r := sh(ctx, t, c, `if err=$( (echo max > /sys/fs/cgroup/memory.max) 2>&1 ); then echo RAISE=written; else echo "RAISE=$err"; fi`)
	if got := inspect.Markers(r.Stdout)["RAISE"]; !strings.Contains(got, "Operation not permitted") {
		t.Errorf("raising its own memory.max: %q, want EPERM", got)
	}
	assertBoundsHold(ctx, t, c, podCg)
}

// kubeletRefusedWithoutNSDelegate: the same pod on a host without
// nsdelegate never runs: the kubelet keeps its container waiting with
// CreateContainerError, and the message it shows is cgdelegate's error,
// naming nsdelegate; containerd has no container of it. A plain pod runs
// under the same kubelet.
func kubeletRefusedWithoutNSDelegate(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	if e.variant.NSDelegate {
		t.Fatalf("variant %s has nsdelegate; this scenario needs a host without it", e.variant.Name)
	}
	k := e.requireKubelet(t)
	ctx := scenarioCtx(t)
	plain := k.run(t, e, loadPod(t, "plain.yaml"))
	sp := k.run(t, e, loadPod(t, "writable.yaml"))

	k.waitRunning(ctx, t, plain, "work")
	p := k.waitWaiting(ctx, t, sp, "work", "CreateContainerError")
	w := kubelet.ContainerStatus(p, "work").State.Waiting
	t.Logf("kubelet /pods: %s", kubelet.Describe(p))
	for _, word := range []string{"cgdelegate", "nsdelegate"} {
		if !strings.Contains(w.Message, word) {
			t.Errorf("waiting message does not name %s: %q", word, w.Message)
		}
	}

	// The kubelet retries with a back-off; the container never runs.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		p, err := k.client.Pod(ctx, staticNamespace, sp.Full)
		if err != nil {
			t.Fatal(err)
		}
		if cs := kubelet.ContainerStatus(p, "work"); cs == nil || cs.State.Waiting == nil || cs.RestartCount != 0 {
			t.Fatalf("the refused container left the waiting state: %s", kubelet.Describe(p))
		}
		if cs, err := e.runningContainers(ctx, sp.Full); err != nil || len(cs) != 0 {
			t.Fatalf("containerd runs containers of the refused pod: %v (%v)", cs, err)
		}
		time.Sleep(time.Second)
	}
	if all := e.describeContainers(ctx, sp.Full); all != "[]" {
		t.Errorf("containerd has containers of the refused pod: %s", all)
	}
}

// kubeletUserns: the hostUsers: false pod of testdata/pods/userns.yaml
// runs in a user namespace the kubelet chose, and its root can delegate.
func kubeletUserns(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	k := e.requireKubelet(t)
	ctx := scenarioCtx(t)
	sp := k.run(t, e, loadPod(t, "userns.yaml"))
	p := k.waitRunning(ctx, t, sp, "work")
	c := e.kubeletContainer(ctx, t, p, "work")

	m := strings.Fields(shOK(ctx, t, c, "cat /proc/self/uid_map"))
	if !kubeletUIDMap(m) {
		t.Errorf("uid_map = %q, want 0 <a multiple of 65536 chosen by the kubelet> 65536", m)
	}
	t.Logf("uid_map: %s", strings.Join(m, " "))
	assertWritableMount(ctx, t, c)
	assertUsernsDelegates(ctx, t, c)
	podCg := e.kubeletPodCgroup(t, k, p)
	e.assertBoundedDir(t, podCg)
}

// kubeletUIDMap reports whether a uid_map line maps root to a 65536-wide
// range at a non-zero multiple of 65536, as the kubelet allocates them.
func kubeletUIDMap(fields []string) bool {
	if len(fields) != 3 || fields[0] != "0" || fields[2] != "65536" {
		return false
	}
	base, err := strconv.Atoi(fields[1])
	return err == nil && base >= 65536 && base%65536 == 0
}

// assertBoundedDir checks that the pod cgroup at dir carries numeric
// bounds.
func (e *guestEnv) assertBoundedDir(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{"cgroup.max.descendants", "cgroup.max.depth"} {
		if v := readCgroupFile(t, dir, f); v == "max" {
			t.Errorf("pod cgroup %s: %s = max, want a bound", dir, f)
		}
	}
}

// kubeletPodLevelPinning: the pod of testdata/pods/pod-level.yaml has a
// pod-level budget of two CPUs (spec.resources). With the kubelet's CPU
// manager off and cgdelegate pinning, the kubelet gives the pod cgroup the
// budget and cgdelegate a bubble of two CPUs on one NUMA node: the
// Guaranteed 1-CPU container gets one of them exclusively (quota off), the
// container without resources and the Burstable one share the other.
func kubeletPodLevelPinning(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	k := e.requireKubelet(t)
	ctx := scenarioCtx(t)
	logFrom := fileSize(e.paths.PluginLog)
	t.Cleanup(func() { e.pluginLog(t, logFrom) })
	nodes := nodeCPUs(t)

	sp := k.run(t, e, loadPod(t, "pod-level.yaml"))
	p := k.waitRunning(ctx, t, sp, "exclusive", "shared", "burstable")
	if p.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("qosClass %q, want Guaranteed (pod-level requests = limits)", p.Status.QOSClass)
	}
	podCg := e.kubeletPodCgroup(t, k, p)
	if got, want := readCgroupFile(t, podCg, "cpu.max"), fmt.Sprintf("%d %d", 2*cfsPeriod, cfsPeriod); got != want {
		t.Errorf("pod cgroup %s: cpu.max %q, want the pod budget %q", podCg, got, want)
	}
	if got := readCgroupFile(t, podCg, "memory.max"); got != strconv.Itoa(256*mib) {
		t.Errorf("pod cgroup %s: memory.max %s, want 256Mi", podCg, got)
	}

	var views []cpuView
	var pod *cri.Pod
	for _, name := range kubeletPodNames(p) {
		c := e.kubeletContainer(ctx, t, p, name)
		pod = c.Pod
		v := viewOf(ctx, t, c)
		t.Logf("%s", v)
		views = append(views, v)
	}
	v := byName(views...)
	ex, shared, burst := v["exclusive"], v["shared"], v["burstable"]
	if ex.CPUs.Size() != 1 || !ex.exclusive() {
		t.Errorf("exclusive: %s, want one CPU with the quota off", ex)
	}
	if shared.CPUs.Size() != 1 || !shared.CPUs.Equals(burst.CPUs) {
		t.Errorf("shared %s and burstable %s: want the same one CPU, the pod shared pool", shared, burst)
	}
	if shared.exclusive() || burst.exclusive() {
		t.Errorf("shared or burstable lost its quota: %s; %s", shared, burst)
	}
	assertExclusiveDisjoint(t, views)
	assertOneNode(t, nodes, views...)
	bubble := ex.CPUs.Union(shared.CPUs).Union(burst.CPUs)
	if bubble.Size() != 2 {
		t.Errorf("bubble %s, want two CPUs", bubble)
	}
	row := e.waitStatusPod(ctx, t, pod, v)
	if b, err := cpuset.Parse(row.Bubble); err != nil || !b.Equals(bubble) {
		t.Errorf("status bubble %q, want the union of the containers' cpus %s", row.Bubble, bubble)
	}
}

// Start latency (KubeletStartLatency).
const (
	// latencyBlock is the number of pods written at once in one block;
	// four blocks (on, off, off, on) give 2*latencyBlock pods per condition:
	// six, enough for a p50 that fails only at latencyGrossRatio (the
	// whole scenario about 75 s under TCG; ten pods took 122 s).
	latencyBlock = 3
	// latencyGrossRatio fails the scenario. The goal is 1.05 at p50, but
	// under TCG on a shared 2-CPU host one pod start varies by tens of
	// percent from run to run, so only a ratio no noise explains fails:
	// that would be cgdelegate blocking the start (a timeout, a retry).
	latencyGrossRatio = 2.0
)

// kubeletStartLatency measures static pod start: from the manifest's
// rename into the static pod directory to containerd reporting the pod's
// container running (polled every 100 ms), for the annotated pod of
// writable.yaml, with cgdelegate loaded and stopped, in the same boot.
// After one unmeasured warm-up pod the conditions alternate in four
// blocks (on, off, off, on), so drift over the run is shared; each block
// writes latencyBlock manifests at once (a node starting several pods, and
// a bounded run time under TCG) and removes them before the next block.
// It reports p50 and p90 of both and their ratio as a CGD-METRIC line.
func kubeletStartLatency(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	if e.variant.Plugin != variant.PluginExternal {
		t.Fatalf("variant %s: this scenario stops and starts an external plugin", e.variant.Name)
	}
	k := e.requireKubelet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tmpl := loadPod(t, "writable.yaml")

	loaded := true
	setLoaded := func(on bool) {
		if on == loaded {
			return
		}
		if on {
			if err := e.startPlugin(ctx, fileSize(e.paths.ContainerdLog)); err != nil {
				t.Fatalf("start cgdelegate: %v", err)
			}
		} else if err := e.plugin.Stop(20 * time.Second); err != nil {
			t.Fatal(err)
		}
		loaded = on
	}
	// A failed scenario never leaves the next one without the plugin.
	t.Cleanup(func() {
		if !loaded {
			if err := e.startPlugin(context.Background(), fileSize(e.paths.ContainerdLog)); err != nil {
				t.Errorf("cleanup: start cgdelegate: %v", err)
			}
		}
	})

	warm := e.startBlock(ctx, t, k, tmpl, "latency-warmup", 1)
	t.Logf("warm-up pod: %s", warm[0].Round(time.Millisecond))
	samples := map[bool][]time.Duration{}
	for i, on := range []bool{true, false, false, true} {
		setLoaded(on)
		ds := e.startBlock(ctx, t, k, tmpl, fmt.Sprintf("latency-%d-%s", i, onOff(on)), latencyBlock)
		t.Logf("block %d, cgdelegate %s: %v", i, map[bool]string{true: "loaded", false: "not loaded"}[on], roundAll(ds))
		samples[on] = append(samples[on], ds...)
	}
	setLoaded(true)

	on, off := summarize(samples[true]), summarize(samples[false])
	ratio := on.p50 / off.p50
	t.Logf("static pod start, cgdelegate loaded:     n=%d p50=%.3fs p90=%.3fs", on.n, on.p50, on.p90)
	t.Logf("static pod start, cgdelegate not loaded: n=%d p50=%.3fs p90=%.3fs", off.n, off.p50, off.p90)
	t.Logf("p50 ratio loaded/not loaded: %.3f (goal <= 1.05; TCG noise allowed)", ratio)
	b, err := json.Marshal(map[string]any{
		"scenario": variant.KubeletStartLatency, "name": "static_pod_start_seconds",
		"values": map[string]float64{
			"n_loaded": float64(on.n), "p50_loaded": on.p50, "p90_loaded": on.p90,
			"n_unloaded": float64(off.n), "p50_unloaded": off.p50, "p90_unloaded": off.p90,
			"p50_ratio": math.Round(ratio*1000) / 1000,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", markMetric, b)
	if ratio > latencyGrossRatio {
		t.Errorf("p50 with cgdelegate is %.2fx without it: more than %.1fx is not TCG noise", ratio, latencyGrossRatio)
	}
}

// startBlock writes n copies of the pod (named prefix-<i>) at once, waits
// until containerd runs each one's container, returns each pod's time from
// its manifest to running, and removes them all again.
func (e *guestEnv) startBlock(ctx context.Context, t *testing.T, k *kubeletEnv, tmpl *corev1.Pod, prefix string, n int) []time.Duration {
	t.Helper()
	sps := make([]*staticPod, n)
	for i := range sps {
		p := tmpl.DeepCopy()
		p.Name = fmt.Sprintf("%s-%d", prefix, i)
		sp, err := k.write(p)
		if err != nil {
			t.Fatal(err)
		}
		sps[i] = sp
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Minute)
		defer rcancel()
		for _, sp := range sps {
			if err := k.pods.Remove(sp.Name); err != nil {
				t.Error(err)
			}
		}
		for _, sp := range sps {
			if err := k.remove(rctx, e, sp); err != nil {
				t.Error(err)
			}
		}
	}()
	out := make([]time.Duration, n)
	for left := n; left > 0; {
		running, err := e.runningByPod(ctx)
		now := time.Now()
		for i, sp := range sps {
			if out[i] == 0 && err == nil && running[sp.Full] {
				out[i] = now.Sub(sp.Written)
				left--
			}
		}
		if left == 0 {
			break
		}
		if ctx.Err() != nil || time.Since(sps[0].Written) > 4*time.Minute {
			for i, sp := range sps {
				if out[i] == 0 {
					p, _ := k.client.Pod(ctx, staticNamespace, sp.Full)
					t.Errorf("pod %s not running 4 min after its manifest: %s; containerd: %s", sp.Full, kubelet.Describe(p), e.describeContainers(ctx, sp.Full))
				}
			}
			t.FailNow()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return out
}

// runningByPod is the set of kubelet pods (by full name, in
// staticNamespace) with a running container, in one CRI call.
func (e *guestEnv) runningByPod(ctx context.Context) (map[string]bool, error) {
	resp, err := e.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{labelPodNamespace: staticNamespace},
	}})
	if err != nil {
		return nil, fmt.Errorf("cri: ListContainers: %w", err)
	}
	out := map[string]bool{}
	for _, c := range resp.GetContainers() {
		out[c.GetLabels()[labelPodName]] = true
	}
	return out, nil
}

// markMetric precedes a measurement the host prints (integration/vm).
const markMetric = "CGD-METRIC "

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

type latencySummary struct {
	n        int
	p50, p90 float64 // seconds
}

// summarize returns the count and the nearest-rank p50 and p90.
func summarize(ds []time.Duration) latencySummary {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) float64 {
		if len(s) == 0 {
			return math.NaN()
		}
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(i, 0)].Seconds()
	}
	return latencySummary{n: len(s), p50: rank(0.5), p90: rank(0.9)}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}
