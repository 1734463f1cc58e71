//go:build integration_guest

package guest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/bench"
	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// The kubelet anchor of `make bench-node`: the same fleet and
// pinned pods as benchNode's, as the kubelet's static pods, with the
// kubelet's static CPU manager and PodLevelResourceManagers pinning (the
// oracle's kubelet configuration, CPU 0 reserved) and cgdelegate stopped.
// The kubelet narrows the fleet only on its reconcile loop
// (cpuManagerReconcilePeriod, left at its default of 10 s, as users run
// it).

// nodeFleetWait bounds the wait for the kubelet to run a size's new fleet
// pods (up to 50 containers at once under TCG).
const nodeFleetWait = 10 * time.Minute

// benchAnchor is the kubelet's fleet: its static pods, and the poller's
// fleet of their containers' cgroups.
type benchAnchor struct {
	f    *nodeFleet
	k    *kubeletEnv
	pods int // fleet pods written
}

// benchKubelet hands the node to the kubelet (benchKubeletStart) and, at
// each size, grows the fleet of static pods and measures benchSamples
// pinned static pods as benchNode does, reported as bench.MetricKubeletSize.
func (e *guestEnv) benchKubelet(ctx context.Context, t *testing.T, sizes []int, all cpuset.CPUSet) {
	t.Helper()
	a := &benchAnchor{f: &nodeFleet{e: e, all: all, by: bench.ByKubelet}, k: e.benchKubeletStart(ctx, t)}
	for _, n := range sizes {
		if n > bench.KubeletMaxSize {
			t.Logf("kubelet: N=%d not measured (the anchor stops at %d)", n, bench.KubeletMaxSize)
			break
		}
		values := map[string]float64{bench.KeyN: float64(n), bench.KeySamples: benchSamples}
		start := time.Now()
		if added := a.grow(ctx, t, n); added > 0 {
			t.Logf("kubelet, N=%d: %d containers added in %s", n, added, time.Since(start).Round(time.Second))
		}
		a.f.measure(t, values, func(i int) benchSample { return a.sample(ctx, t, i) })
		clusterMetric(t, string(variant.BenchNode), bench.MetricKubeletSize, values)
	}
}

// benchKubeletStart stops cgdelegate (the anchor measures the kubelet
// alone), removes every pod sandbox (the kubelet kills the pods it did not
// make, on its own schedule) and starts the kubelet with the oracle's
// static configuration; at cleanup the kubelet stops.
func (e *guestEnv) benchKubeletStart(ctx context.Context, t *testing.T) *kubeletEnv {
	t.Helper()
	start := time.Now()
	if err := e.plugin.Stop(20 * time.Second); err != nil {
		t.Fatalf("stop cgdelegate: %v", err)
	}
	if err := e.removeSandboxes(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.stopKubelet(t) })
	e.stopKubelet(t)
	cfg := e.oracleKubeletConfig(true)
	if err := e.startKubelet(cfg); err != nil {
		e.kubeletErr = err
		t.Fatalf("kubelet: %v", err)
	}
	t.Logf("kubelet: cgdelegate stopped, the node emptied and the kubelet started (cpuManagerPolicy=%s, reserved CPUs %s, feature gates %v) in %s",
		cfg.CPUManagerPolicy, cfg.ReservedSystemCPUs, cfg.FeatureGates, time.Since(start).Round(100*time.Millisecond))
	return e.kubelet
}

// removeSandboxes stops and removes every pod sandbox containerd has, with
// its containers.
func (e *guestEnv) removeSandboxes(ctx context.Context) error {
	resp, err := e.cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("cri: ListPodSandbox: %w", err)
	}
	for _, sb := range resp.GetItems() {
		if err := e.cri.Adopt(sb.GetId(), sb.GetMetadata().GetName()).Remove(); err != nil {
			return err
		}
	}
	return nil
}

// grow writes fleet pods until they hold n containers, waits until the
// kubelet runs them all and adds their containers' cgroups to the fleet;
// it returns how many containers it added. Pods hold fleetPerPod
// containers (the last one fewer when n is not a multiple), even pods
// BestEffort, odd ones Burstable, as in nodeFleet.grow.
func (a *benchAnchor) grow(ctx context.Context, t *testing.T, n int) int {
	t.Helper()
	var written []*staticPod
	for have := len(a.f.dirs); have < n; {
		c := min(fleetPerPod, n-have)
		sp, err := a.k.write(nodeFleetPod(a.pods, c))
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, sp)
		a.pods++
		have += c
	}
	added := 0
	ctx, cancel := context.WithTimeout(ctx, nodeFleetWait)
	defer cancel()
	for _, sp := range written {
		p, err := a.k.client.WaitPod(ctx, staticNamespace, sp.Full, time.Second, runningOrRefused)
		if err != nil {
			t.Fatalf("kubelet fleet: %v", err)
		}
		podDir := a.f.e.kubeletPodCgroup(t, a.k, p)
		for _, cs := range p.Status.ContainerStatuses {
			id, err := kubelet.ContainerID(&cs)
			if err != nil {
				t.Fatalf("kubelet fleet: %v", err)
			}
			a.f.dirs = append(a.f.dirs, containerCgroupIn(t, podDir, id))
			added++
		}
	}
	return added
}

// runningOrRefused is a kubelet.Client.WaitPod condition: every container
// of the pod runs; an error when the kubelet refused the pod or a
// container.
func runningOrRefused(p *corev1.Pod) (bool, error) {
	if p == nil {
		return false, nil
	}
	if reason, refused := refusal(p); refused {
		return false, fmt.Errorf("the kubelet refused %s: %s", p.Name, reason)
	}
	return admitted(p), nil
}

// nodeFleetPod is the manifest of fleet pod i with containers busybox
// sleeps: BestEffort when i is even, else Burstable (a 10m request and a
// 32 MiB limit a container, as nodeFleet.grow's CRI containers).
func nodeFleetPod(i, containers int) *corev1.Pod {
	p := benchPod(fmt.Sprintf("bench-fleet-%d", i))
	for c := range containers {
		ctr := benchContainer(fmt.Sprintf("c%d", c))
		if i%2 == 1 {
			ctr.Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(fleetMilliCPU, resource.DecimalSI)},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
			}
		}
		p.Spec.Containers = append(p.Spec.Containers, ctr)
	}
	return p
}

// benchPinnedPod is the manifest of a pinned pod, the shape of
// nodeFleet.sample's: a pod-level budget of 2 CPUs and 512 MiB, a
// Guaranteed container of one CPU (exclusive) and a Burstable one (500m
// request, 1 CPU limit: the pod's shared CPU).
func benchPinnedPod(name string) *corev1.Pod {
	p := benchPod(name)
	res := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	p.Spec.Resources = &corev1.ResourceRequirements{Requests: res("2", "512Mi"), Limits: res("2", "512Mi")}
	ex, sh := benchContainer("exclusive"), benchContainer("shared")
	ex.Resources = corev1.ResourceRequirements{Requests: res("1", "64Mi"), Limits: res("1", "64Mi")}
	sh.Resources = corev1.ResourceRequirements{Requests: res("500m", "64Mi"), Limits: res("1", "64Mi")}
	p.Spec.Containers = []corev1.Container{ex, sh}
	return p
}

// benchPod is an empty host-network pod that dies at once when removed.
func benchPod(name string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &grace},
	}
}

// benchContainer is a busybox container that sleeps for a day (longer than
// the bench: a fleet container that ended would take its cgroup along).
func benchContainer(name string) corev1.Container {
	return corev1.Container{Name: name, Image: busyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "86400"}}
}

// sample starts one pinned static pod while polling the fleet, times it
// from what containerd logged and recorded, and removes it:
//   - the pod's start: containerd logged the kubelet's RunPodSandbox;
//   - the exclusive container's creation: containerd logged its
//     CreateContainer;
//   - it runs: its StartedAt in the CRI (containerd's time after the task
//     started);
//   - the removal: the manifest is deleted.
func (a *benchAnchor) sample(ctx context.Context, t *testing.T, i int) benchSample {
	t.Helper()
	e, f, k := a.f.e, a.f, a.k
	n := len(f.dirs)
	var s benchSample
	logFrom := fileSize(e.paths.ContainerdLog)
	p, err := f.poll()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := k.write(benchPinnedPod(fmt.Sprintf("bench-pinned-%d-%d", n, i)))
	if err != nil {
		_, _ = p.stop()
		t.Fatal(err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			if err := k.pods.Remove(sp.Name); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
	})
	wctx, cancel := context.WithTimeout(ctx, pollClear)
	kp, err := k.client.WaitPod(wctx, staticNamespace, sp.Full, 500*time.Millisecond, runningOrRefused)
	cancel()
	if err != nil {
		_, _ = p.stop()
		t.Fatalf("kubelet, N=%d: pinned pod: %v; containerd: %s", n, err, e.describeContainers(ctx, sp.Full))
	}
	ex, sh := e.kubeletContainer(ctx, t, kp, "exclusive"), e.kubeletContainer(ctx, t, kp, "shared")
	podStart, created, started := e.kubeletPodTimes(ctx, t, logFrom, sp.Full, ex)
	s.start = started.Sub(podStart)
	podDir := e.kubeletPodCgroup(t, k, kp)
	if err := s.pinned(cgroupCPUsOf(t, containerCgroupIn(t, podDir, ex.ID)), cgroupCPUsOf(t, containerCgroupIn(t, podDir, sh.ID))); err != nil {
		_, _ = p.stop()
		t.Fatalf("kubelet, N=%d: %v", n, err)
	}
	if err := f.clear(ctx, p, &s, podStart, created); err != nil {
		t.Fatalf("kubelet, N=%d: %v", n, err)
	}
	removed = true
	if s.widen, err = f.widen(ctx, func() error { return k.pods.Remove(sp.Name) }); err != nil {
		t.Fatalf("kubelet, N=%d: %v", n, err)
	}
	// The next sample starts on a node without this pod.
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer rcancel()
	if err := k.remove(rctx, e, sp); err != nil {
		t.Fatal(err)
	}
	if err := e.waitSandboxStopped(rctx, sp.Full); err != nil {
		t.Fatal(err)
	}
	return s
}

// kubeletPodTimes are the times containerd logged the RunPodSandbox of the
// kubelet pod full and the CreateContainer of its exclusive container ex
// (the first such lines after byte offset from of its log: the calls, not
// their returns), and ex's CRI StartedAt. The words to find have no
// quotes: containerd's log escapes them.
func (e *guestEnv) kubeletPodTimes(ctx context.Context, t *testing.T, from int64, full string, ex *cri.Container) (podStart, created, started time.Time) {
	t.Helper()
	podStart, err := containerdLogTime(e.paths.ContainerdLog, from, "RunPodSandbox for", full)
	if err != nil {
		t.Fatal(err)
	}
	created, err = containerdLogTime(e.paths.ContainerdLog, from, "CreateContainer within sandbox", ex.Pod.ID, ex.Name)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.cri.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ex.ID})
	if err != nil {
		t.Fatalf("cri: ContainerStatus %s: %v", ex.ID, err)
	}
	return podStart, created, time.Unix(0, resp.GetStatus().GetStartedAt())
}

// containerCgroupIn is the cgroup directory of the container id below the
// pod cgroup podDir: the one whose name holds the ID (<id> with the
// cgroupfs driver, cri-containerd-<id>.scope with systemd's).
func containerCgroupIn(t *testing.T, podDir, id string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(podDir, "*"+id+"*"))
	if len(matches) != 1 {
		t.Fatalf("cgroup of container %s under %s: found %v", id, podDir, matches)
	}
	return matches[0]
}
