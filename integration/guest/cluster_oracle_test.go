//go:build integration_guest

package guest

// The dynamic containers a real cluster has: kubectl
// debug adds an ephemeral container to a running pod, and kubectl patch
// --subresource resize changes a running pod's resources. Both run twice
// on the cluster node: under cgdelegate's pinning (ClusterEphemeralContainers,
// ClusterResizeBubble) and, once cgdelegate is uninstalled, under the
// kubelet's own pod-level resource managers (ClusterPinningOracle), which
// compares the two with integration/internal/oracle as KubeletPinningOracle
// does for pods.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/oracle"
)

const (
	// debugger is the ephemeral container kubectl debug adds.
	debugger = "debugger"
	// debugNamespace holds the writable pods kubectl debug goes into; it
	// is labelled to allow writable cgroups (admissionNamespace).
	debugNamespace = "debug"
	// markClusterOracle precedes one observation's two views on the
	// console.
	markClusterOracle = "CGD-CLUSTER-ORACLE "
)

// clusterAllowed are the differences from the kubelet that cgdelegate has
// on purpose in these steps; docs/cpu-pinning.md says the same.
var clusterAllowed = []oracle.Allowance{
	// The kubelet's pod-level CPU manager assigns CPUs only to the
	// containers of the pod's spec; an ephemeral container gets the
	// default cpuset, the node shared pool. NRI cannot tell it from a
	// regular container without CPUs of its own, which goes to the pod's
	// shared CPUs, so cgdelegate runs it there when the bubble has any.
	{Manifest: "debug-shared", Container: debugger, Field: "*", Why: whyDebugger},
	// The kubelet admits a pod-level resize of a pinned pod and changes
	// its quota without moving its CPUs; cgdelegate refuses it.
	{Manifest: "resize-bubble/pod-cpu", Field: "admitted", Kubelet: "true", Cgdelegate: "false", Why: whyPodResize},
	{Manifest: "resize-bubble/pod-cpu", Container: "*", Field: "class", Cgdelegate: string(oracle.Refused), Why: whyPodResize},
}

const whyPodResize = "the kubelet admits a pod-level resize of a pinned pod but leaves its bubble as it was, so the quota no longer matches the CPUs; cgdelegate places a pod from its budget (a restart would place it anew), so it refuses with the kubelet's reason"

const whyDebugger = "the kubelet runs an ephemeral container in the node shared pool; NRI cannot tell it from a regular container without CPUs, so cgdelegate runs it in its pod's shared CPUs when the bubble has some (in the node shared pool otherwise)"

// clusterObservations is what ClusterEphemeralContainers and
// ClusterResizeBubble saw under cgdelegate, by observation name, for
// ClusterPinningOracle.
type clusterObservations map[string]oracle.Observation

// clusterEphemeralContainers: kubectl debug into a writable
// pod gives the debugger the writable cgroup the pod-wide annotation asks
// for, and a read-only one where the annotation names another container;
// kubectl debug into two pinned pods, one whose bubble has a shared CPU and
// one whose bubble is all exclusive, is never refused. The pinned pods'
// views are kept for ClusterPinningOracle.
func clusterEphemeralContainers(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	e.requireHelmPlugin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	t.Cleanup(e.pluginLogFrom(t))

	ns := admissionNamespace(t, ctx, debugNamespace)
	wPod := applyPodFile(ctx, t, "cluster-debug-writable.yaml")
	oPod := applyPodFile(ctx, t, "cluster-debug-one-writable.yaml")
	start := time.Now()
	for _, name := range []string{wPod.Name, oPod.Name} {
		waitNamespacedPod(ctx, t, ns, name, "work", 4*time.Minute)
		if err := kubectlDebug(ctx, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	w := e.debuggerContainer(ctx, t, waitDebugger(ctx, t, ns, wPod.Name))
	assertWritableMount(ctx, t, w)
	assertDelegates(ctx, t, w)
	o := e.debuggerContainer(ctx, t, waitDebugger(ctx, t, ns, oPod.Name))
	if m, _ := cgroupMount(ctx, t, o); !m.ReadOnly() {
		t.Errorf("pod %s asks for a writable cgroup for container work only, but its debugger's /sys/fs/cgroup is %s", oPod.Name, m)
	}
	writableTook := time.Since(start)

	start = time.Now()
	obs := e.observeDebug(ctx, t)
	pinnedTook := time.Since(start)
	for _, o := range obs {
		if !o.Admitted {
			t.Errorf("%s: the debugger was refused under cgdelegate: %s", o.Manifest, o.Reason)
		}
	}
	e.keepClusterObservations(obs)
	clusterMetric(t, "ClusterEphemeralContainers", "cluster_ephemeral", map[string]float64{
		"writable_seconds": seconds(writableTook), "pinned_seconds": seconds(pinnedTook),
	})
}

// clusterResizeBubble: the resize steps of resizeObserve
// under cgdelegate; a step cgdelegate refuses must be refused with the
// kubelet's reason. The views are kept for ClusterPinningOracle.
func clusterResizeBubble(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	e.requireHelmPlugin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Cleanup(e.pluginLogFrom(t))
	start := time.Now()
	obs := e.observeResize(ctx, t)
	// cgdelegate refuses what the kubelet's static CPU manager refuses (a
	// CPU request of a Guaranteed pod's container) and a pinned pod's
	// pod-level resize (docs/cpu-pinning.md); it makes the others.
	refuses := map[string]bool{"resize-bubble/cpu-request": true, "resize-bubble/pod-cpu": true}
	for _, o := range obs {
		switch {
		case o.Admitted && refuses[o.Manifest]:
			t.Errorf("%s: made under cgdelegate, want it refused with the kubelet's reason", o.Manifest)
		case !o.Admitted && !refuses[o.Manifest]:
			t.Errorf("%s: refused under cgdelegate, want it made as the kubelet makes it: %s", o.Manifest, o.Reason)
		case !o.Admitted && oracle.ClassifyRejection(o.Reason) != oracle.ResizeInfeasible:
			t.Errorf("%s: refused without the kubelet's reason: %s", o.Manifest, o.Reason)
		}
	}
	e.keepClusterObservations(obs)
	clusterMetric(t, "ClusterResizeBubble", "cluster_resize_bubble", map[string]float64{"seconds": seconds(time.Since(start))})
}

// clusterPinningOracle: with cgdelegate uninstalled
// (ClusterHelmUninstall ran), the kubelet restarts with the static CPU
// manager, the Static memory manager and PodLevelResourceManagers, as
// KubeletPinningOracle's kubelet pass; the debug and resize steps run
// again, and every difference from cgdelegate's views that
// clusterAllowed does not explain fails the scenario.
func clusterPinningOracle(t *testing.T, e *guestEnv) {
	e.requireCluster(t)
	if e.helm != nil || e.pluginErr == nil {
		t.Fatal("cgdelegate is still installed: ClusterHelmUninstall must run before this scenario")
	}
	if len(e.clusterObs) == 0 {
		t.Fatal("no views under cgdelegate: ClusterEphemeralContainers and ClusterResizeBubble must run before this scenario")
	}
	if err := oracle.Validate(clusterAllowed); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	reserved, err := cpuset.Parse(oracleReserved)
	if err != nil {
		t.Fatal(err)
	}
	topo := oracle.Topology{Nodes: nodeCPUs(t), Reserved: reserved}

	start := time.Now()
	e.stopKubelet(t)
	if err := e.startKubelet(e.oracleKubeletConfig(true), "--kubeconfig="+e.kubeletKubeconfig(), "--node-ip="+e.clusterNodeIP()); err != nil {
		e.kubeletErr = err
		t.Fatalf("kubelet with its pod-level resource managers: %v", err)
	}
	t.Logf("kubelet restarted with cpuManagerPolicy=static, memoryManagerPolicy=Static, PodLevelResourceManagers in %s", time.Since(start).Round(100*time.Millisecond))

	kubeletObs := append(e.observeDebug(ctx, t), e.observeResize(ctx, t)...)
	var failed []oracle.Difference
	explained := 0
	for _, k := range kubeletObs {
		c, ok := e.clusterObs[k.Manifest]
		if !ok {
			t.Errorf("%s: observed under the kubelet only", k.Manifest)
			continue
		}
		ks, err := oracle.Normalise(k, topo)
		if err != nil {
			t.Fatalf("kubelet pass: %v", err)
		}
		cs, err := oracle.Normalise(c, topo)
		if err != nil {
			t.Fatalf("cgdelegate pass: %v", err)
		}
		un, ex := oracle.Explain(oracle.Compare(ks, cs), clusterAllowed)
		failed, explained = append(failed, un...), explained+len(ex)
		for _, x := range ex {
			t.Logf("differs on purpose: %s (%s)", x.Difference, x.Why)
		}
		line, err := json.Marshal(map[string]any{
			"observation": k.Manifest, "kubelet": k, "cgdelegate": c,
			"differences": strs(un), "explained": explainedStrs(ex),
		})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%s%s\n", markClusterOracle, line)
	}
	for _, d := range failed {
		t.Errorf("cgdelegate differs from the kubelet: %s", d)
	}
	clusterMetric(t, "ClusterPinningOracle", "cluster_pinning_oracle", map[string]float64{
		"observations": float64(len(kubeletObs)), "unexplained": float64(len(failed)), "explained": float64(explained),
		"seconds": seconds(time.Since(start)),
	})
}

// keepClusterObservations records cgdelegate's views for
// ClusterPinningOracle.
func (e *guestEnv) keepClusterObservations(obs []oracle.Observation) {
	if e.clusterObs == nil {
		e.clusterObs = clusterObservations{}
	}
	for _, o := range obs {
		e.clusterObs[o.Manifest] = o
	}
}

// observeDebug runs the pinned pods of cluster-debug-shared.yaml and
// cluster-debug-full.yaml one after the other, adds a debugger to each and
// returns what every container of each saw, or the debugger's refusal. It
// deletes each pod before the next.
func (e *guestEnv) observeDebug(ctx context.Context, t *testing.T) []oracle.Observation {
	t.Helper()
	var out []oracle.Observation
	for _, c := range []struct{ name, file string }{
		{"debug-shared", "cluster-debug-shared.yaml"},
		{"debug-full", "cluster-debug-full.yaml"},
	} {
		pod := applyPodFile(ctx, t, c.file)
		waitRunningAll(ctx, t, pod)
		o := e.debugOnce(ctx, t, c.name, pod)
		t.Logf("%s: %s", c.name, describeObservation(o))
		out = append(out, o)
		deletePodsNow(t, pod)
	}
	return out
}

// debugOnce adds the debugger to the running pod and observes it.
func (e *guestEnv) debugOnce(ctx context.Context, t *testing.T, name string, pod *corev1.Pod) oracle.Observation {
	t.Helper()
	if err := kubectlDebug(ctx, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	o := oracle.Observation{Manifest: name}
	p, reason := waitDebuggerOrRefusal(ctx, t, pod.Namespace, pod.Name)
	if reason != "" {
		o.Reason = reason
		return o
	}
	// Updates of shared pools are sent after the event that changed
	// them; let them land.
	time.Sleep(2 * time.Second)
	o.Admitted = true
	for _, ctr := range pod.Spec.Containers {
		o.Containers = append(o.Containers, e.clusterView(ctx, t, p, ctr.Name, oracle.RoleApp))
	}
	o.Containers = append(o.Containers, e.clusterView(ctx, t, p, debugger, oracle.RoleEphemeral))
	return o
}

// oracleResize is one in-place resize of observeResize.
type oracleResize struct {
	name string
	// patch is the resize subresource's patch, undo the one that puts
	// the pod back when the resize is refused.
	patch, undo string
	// done says the pod's status shows the resize made.
	done func(*corev1.Pod) bool
}

// resized is the container the resize steps resize, in either pod.
const resized = "b"

// containerPatch is a resize patch of the resized container's resources.
func containerPatch(kind, res, v string) string {
	return fmt.Sprintf(`{"spec":{"containers":[{"name":%q,"resources":{%q:{%q:%q}}}]}}`, resized, kind, res, v)
}

// podPatch is a resize patch of the pod-level CPU (requests = limits).
func podPatch(cpu string) string {
	return fmt.Sprintf(`{"spec":{"resources":{"requests":{"cpu":%q},"limits":{"cpu":%q}}}}`, cpu, cpu)
}

// statusIs says the resized container's status shows res of kind at v.
func statusIs(kind string, res corev1.ResourceName, v string) func(*corev1.Pod) bool {
	want := resource.MustParse(v)
	return func(p *corev1.Pod) bool {
		cs := kubelet.ContainerStatus(p, resized)
		if cs == nil || cs.Resources == nil {
			return false
		}
		list := cs.Resources.Limits
		if kind == "requests" {
			list = cs.Resources.Requests
		}
		got, ok := list[res]
		return ok && got.Cmp(want) == 0
	}
}

// bubbleResizeSteps resize cluster-resize-bubble.yaml: a CPU limit and a
// memory limit of its Burstable container (the kubelet makes those in a
// Guaranteed pod), its CPU request (the kubelet's static CPU manager
// refuses that in a Guaranteed pod) and the pod-level CPU.
func bubbleResizeSteps() []oracleResize {
	return []oracleResize{
		{
			name: "resize-bubble/cpu-limit", patch: containerPatch("limits", "cpu", "1"), undo: containerPatch("limits", "cpu", "500m"),
			done: statusIs("limits", corev1.ResourceCPU, "1"),
		},
		{
			name: "resize-bubble/cpu-request", patch: containerPatch("requests", "cpu", "400m"), undo: containerPatch("requests", "cpu", "250m"),
			done: statusIs("requests", corev1.ResourceCPU, "400m"),
		},
		{
			name: "resize-bubble/memory-limit", patch: containerPatch("limits", "memory", "96Mi"), undo: containerPatch("limits", "memory", "64Mi"),
			done: statusIs("limits", corev1.ResourceMemory, "96Mi"),
		},
		{name: "resize-bubble/pod-cpu", patch: podPatch("2500m"), undo: podPatch("2"), done: func(p *corev1.Pod) bool {
			if p.Status.Resources == nil {
				return false
			}
			got, ok := p.Status.Resources.Limits[corev1.ResourceCPU]
			return ok && got.Cmp(resource.MustParse("2500m")) == 0
		}},
	}
}

// nodeSharedResizeSteps resize cluster-resize.yaml's container, which runs
// in the node shared pool: its CPU request and limit together.
func nodeSharedResizeSteps() []oracleResize {
	both := `{"spec":{"containers":[{"name":"b","resources":{"requests":{"cpu":"400m"},"limits":{"cpu":"750m"}}}]}}`
	undo := `{"spec":{"containers":[{"name":"b","resources":{"requests":{"cpu":"250m"},"limits":{"cpu":"500m"}}}]}}`
	return []oracleResize{{name: "resize-node-shared/cpu", patch: both, undo: undo, done: statusIs("limits", corev1.ResourceCPU, "750m")}}
}

// observeResize runs cluster-resize-bubble.yaml, then cluster-resize.yaml,
// makes every step of bubbleResizeSteps and nodeSharedResizeSteps, and
// returns, per step, whether it was made or the refusal and what the
// pod's containers saw after it (a refused step is undone before the
// next). It deletes the pods.
func (e *guestEnv) observeResize(ctx context.Context, t *testing.T) []oracle.Observation {
	t.Helper()
	bubble := applyPodFile(ctx, t, "cluster-resize-bubble.yaml")
	waitRunningAll(ctx, t, bubble)
	shared := applyPodFile(ctx, t, "cluster-resize.yaml")
	waitRunningAll(ctx, t, shared)
	defer deletePodsNow(t, bubble, shared)
	var out []oracle.Observation
	for _, c := range []struct {
		pod   *corev1.Pod
		steps []oracleResize
	}{{bubble, bubbleResizeSteps()}, {shared, nodeSharedResizeSteps()}} {
		for _, step := range c.steps {
			o := e.resizeOnce(ctx, t, c.pod, step)
			t.Logf("%s: %s", step.name, describeObservation(o))
			out = append(out, o)
		}
	}
	return out
}

// resizeOnce makes one resize step of pod p and observes the result.
func (e *guestEnv) resizeOnce(ctx context.Context, t *testing.T, p *corev1.Pod, step oracleResize) oracle.Observation {
	t.Helper()
	o := oracle.Observation{Manifest: step.name}
	start := time.Now()
	if _, err := kubectl(ctx, nil, "-n", p.Namespace, "patch", "pod", p.Name, "--subresource", "resize", "-p", step.patch); err != nil {
		// The API server's refusal is the same under either pinning.
		o.Reason = err.Error()
		return o
	}
	var refusal string
	last := waitClusterPod(ctx, t, p.Name, step.name+" made or refused", resizeWithin, func(q *corev1.Pod) bool {
		if c := podCondition(q, corev1.PodResizePending); c != nil {
			if c.Reason == corev1.PodReasonInfeasible {
				refusal = c.Reason + ": " + c.Message
				return true
			}
			return false // Deferred: the kubelet retries
		}
		if c := podCondition(q, corev1.PodResizeInProgress); c != nil {
			if c.Reason == corev1.PodReasonError {
				refusal = c.Reason + ": " + c.Message
				return true
			}
			return false
		}
		return step.done(q)
	})
	t.Logf("%s: %s after %s", step.name, map[bool]string{true: "refused", false: "made"}[refusal != ""], time.Since(start).Round(10*time.Millisecond))
	if refusal != "" {
		o.Reason = refusal
		if _, err := kubectl(ctx, nil, "-n", p.Namespace, "patch", "pod", p.Name, "--subresource", "resize", "-p", step.undo); err != nil {
			t.Fatalf("%s: undo: %v", step.name, err)
		}
		waitClusterPod(ctx, t, p.Name, step.name+" undone", resizeWithin, func(q *corev1.Pod) bool {
			return podCondition(q, corev1.PodResizePending) == nil && podCondition(q, corev1.PodResizeInProgress) == nil
		})
		return o
	}
	time.Sleep(2 * time.Second) // as observeDebug
	o.Admitted = true
	for _, c := range p.Spec.Containers {
		o.Containers = append(o.Containers, e.clusterView(ctx, t, last, c.Name, oracle.RoleApp))
	}
	return o
}

// clusterView reads what container name of p (an ephemeral one too) sees
// of its cgroup, from inside it.
func (e *guestEnv) clusterView(ctx context.Context, t *testing.T, p *corev1.Pod, name string, role oracle.Role) oracle.Container {
	t.Helper()
	cs := kubelet.ContainerStatus(p, name)
	if cs == nil {
		cs = ephemeralStatus(p, name)
	}
	if cs == nil {
		t.Fatalf("pod %s: no status of container %s", p.Name, name)
	}
	v := viewOf(ctx, t, e.kubeletContainer(ctx, t, withStatus(p, cs), name))
	return oracle.Container{Name: name, Role: role, CPUs: v.CPUs.String(), Mems: v.Mems.String(), CPUMax: v.CPUMax}
}

func ephemeralStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	if p == nil {
		return nil
	}
	i := slices.IndexFunc(p.Status.EphemeralContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == name })
	if i < 0 {
		return nil
	}
	return &p.Status.EphemeralContainerStatuses[i]
}

// kubectlDebug adds the debugger to pod namespace/name as a user would
// (without attaching: the API server can not reach the guest's kubelet).
func kubectlDebug(ctx context.Context, namespace, name string) error {
	_, err := kubectl(ctx, nil, "-n", namespace, "debug", name, "--container="+debugger,
		"--image=cgd.local/busybox:1", "--image-pull-policy=Never", "--profile=general", "--", "sleep", "3600")
	return err
}

// waitDebugger waits until the debugger of pod namespace/name runs.
func waitDebugger(ctx context.Context, t *testing.T, namespace, name string) *corev1.Pod {
	t.Helper()
	p, reason := waitDebuggerOrRefusal(ctx, t, namespace, name)
	if reason != "" {
		t.Fatalf("pod %s/%s: the debugger was refused: %s", namespace, name, reason)
	}
	return p
}

// debuggerWithin bounds the start of a debugger. A refused one waits in
// CreateContainerError (the kubelet retries); refusedAfter is how long it
// must wait so to count as refused.
const (
	debuggerWithin = 3 * time.Minute
	refusedAfter   = 20 * time.Second
)

// waitDebuggerOrRefusal waits until the debugger of pod namespace/name
// runs, or has waited refusedAfter with the runtime's refusal, and returns
// the pod and the refusal ("" when it runs).
func waitDebuggerOrRefusal(ctx context.Context, t *testing.T, namespace, name string) (*corev1.Pod, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, debuggerWithin)
	defer cancel()
	var last *corev1.Pod
	var reason string
	var refusedSince time.Time
	err := poll(ctx, 500*time.Millisecond, func() (bool, error) {
		p := &corev1.Pod{}
		if err := getJSON(ctx, p, "-n", namespace, "pod", name); err != nil {
			return false, nil
		}
		last = p
		cs := ephemeralStatus(p, debugger)
		switch {
		case cs == nil:
			return false, nil
		case cs.State.Running != nil:
			reason = ""
			return true, nil
		case cs.State.Waiting != nil && strings.HasSuffix(cs.State.Waiting.Reason, "Error"):
			reason = cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			return time.Since(refusedSince) > refusedAfter, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: debugger neither running nor refused within %s (%v): %s", namespace, name, debuggerWithin, err, describePod(last))
	}
	return last, reason
}

// debuggerContainer is the CRI handle of the running debugger of p.
func (e *guestEnv) debuggerContainer(ctx context.Context, t *testing.T, p *corev1.Pod) *cri.Container {
	t.Helper()
	return e.kubeletContainer(ctx, t, withStatus(p, ephemeralStatus(p, debugger)), debugger)
}

// applyPodFile applies testdata/pods/<file> with kubectl and returns the
// pod as the manifest states it. The caller deletes it (deletePodsNow).
func applyPodFile(ctx context.Context, t *testing.T, file string) *corev1.Pod {
	t.Helper()
	raw, err := podManifests.ReadFile("testdata/pods/" + file)
	if err != nil {
		t.Fatal(err)
	}
	p := loadPod(t, file)
	if _, err := kubectl(ctx, raw, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePodsNow(t, p) })
	return p
}

// waitRunningAll waits until every container of p runs.
func waitRunningAll(ctx context.Context, t *testing.T, p *corev1.Pod) {
	t.Helper()
	for _, c := range p.Spec.Containers {
		waitNamespacedPod(ctx, t, p.Namespace, p.Name, c.Name, 4*time.Minute)
	}
}

// deletePodsNow deletes pods and waits until they are gone (their CPUs
// are free again); pods already gone are no error.
func deletePodsNow(t *testing.T, pods ...*corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, p := range pods {
		if _, err := kubectl(ctx, nil, "-n", p.Namespace, "delete", "pod", p.Name, "--ignore-not-found", "--wait=true", "--timeout=200s"); err != nil {
			t.Errorf("delete pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
}
