//go:build integration_guest

package guest

// The cluster harness and its scenarios (variant.Variant.Cluster): the
// control plane runs on the host (integration/vm), the guest's kubelet
// registers with it as Node cgd-vm, and the scenarios drive it with
// kubectl and helm on the host as an operator would from a workstation
// (workstation_test.go), reading cgroups from the node as before.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/integration/internal/workstation"
)

const (
	// clusterNamespace holds the scenarios' pods.
	clusterNamespace = "default"
	// resizeWithin bounds one in-place resize, from the patch to the pod
	// reporting it done.
	resizeWithin = 2 * time.Minute
)

// clusterEnv is the registered kubelet and when it became a Ready Node.
type clusterEnv struct {
	k                  *kubeletEnv
	registered, ready  time.Duration // after the kubelet's start
	serviceAccountWait time.Duration
}

// requireCluster starts the kubelet registered with the host's API server
// (first use only) and waits until its Node is Ready and the default
// service account exists (the controller manager makes it; the API server
// admits no pod before). It fails the scenario when the variant has no
// cluster.
func (e *guestEnv) requireCluster(t *testing.T) *clusterEnv {
	t.Helper()
	// A chart's plugin needs the cluster to be installed into.
	if e.variant.Plugin != variant.PluginHelm {
		e.requirePlugin(t)
	}
	if !e.variant.Cluster {
		t.Fatalf("scenario needs a cluster but variant %s has none", e.variant.Name)
	}
	if e.cluster == nil && e.kubeletErr == nil {
		e.cluster, e.kubeletErr = e.startClusterKubelet()
		if e.cluster != nil {
			t.Logf("kubelet registered as Node %s after %s, Ready after %s; default service account after %s",
				e.nodeName(), e.cluster.registered.Round(100*time.Millisecond), e.cluster.ready.Round(100*time.Millisecond),
				e.cluster.serviceAccountWait.Round(100*time.Millisecond))
		}
	}
	if e.kubeletErr != nil {
		t.Fatalf("cluster kubelet: %v", e.kubeletErr)
	}
	if !e.kubelet.daemon.Running() {
		t.Fatalf("the kubelet has exited; log tail:\n%s", fileTail(e.paths.KubeletLog, 40))
	}
	return e.cluster
}

func (e *guestEnv) startClusterKubelet() (*clusterEnv, error) {
	if e.podnet == nil {
		return nil, errors.New("the node's pod network was not set up")
	}
	start := time.Now()
	if err := e.startKubelet(e.kubeletConfig(), "--kubeconfig="+e.kubeletKubeconfig(), "--node-ip="+e.clusterNodeIP()); err != nil {
		return nil, err
	}
	c := &clusterEnv{k: e.kubelet}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var node *corev1.Node
	err := poll(ctx, time.Second, func() (bool, error) {
		var err error
		node, err = getNode(ctx, e.nodeName())
		if err != nil {
			if !e.kubelet.daemon.Running() {
				return false, fmt.Errorf("the kubelet exited:\n%s", fileTail(e.paths.KubeletLog, 40))
			}
			return false, nil // not registered yet
		}
		if c.registered == 0 {
			c.registered = time.Since(start)
		}
		return nodeReady(node) != nil && nodeReady(node).Status == corev1.ConditionTrue, nil
	})
	if err != nil {
		return nil, fmt.Errorf("node %s Ready: %w; node conditions: %s\n--- kubelet log ---\n%s",
			e.nodeName(), err, describeNode(node), fileTail(e.paths.KubeletLog, 40))
	}
	c.ready = time.Since(start)
	saStart := time.Now()
	if err := poll(ctx, time.Second, func() (bool, error) {
		_, err := kubectl(ctx, nil, "-n", clusterNamespace, "get", "serviceaccount", "default", "-o", "name")
		return err == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("service account %s/default never appeared (is kube-controller-manager running?): %w", clusterNamespace, err)
	}
	c.serviceAccountWait = time.Since(saStart)
	if err := e.startKubeProxy(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// kubectl runs kubectl on the workstation with the admin's kubeconfig,
// stdin as its input, and returns its stdout.
func kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	res, err := onWorkstation(ctx, workstation.Request{Tool: "kubectl", Args: append([]string{"--request-timeout=30s"}, args...), Stdin: stdin})
	return res.Stdout, err
}

// getJSON decodes `kubectl get <kind> <name> -o json` into v, reading
// pods and nodes from the API server directly (apiPath).
func getJSON(ctx context.Context, v any, args ...string) error {
	var out []byte
	var err error
	if path, ok := apiPath(args); ok {
		var a *apiClient
		if a, err = theAPI(); err == nil {
			out, err = a.get(ctx, path)
		}
	} else {
		out, err = kubectl(ctx, nil, append(append([]string{"get"}, args...), "-o", "json")...)
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("kubectl get %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func getNode(ctx context.Context, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	if err := getJSON(ctx, n, "node", name); err != nil {
		return nil, err
	}
	return n, nil
}

func getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	if err := getJSON(ctx, p, "-n", clusterNamespace, "pod", name); err != nil {
		return nil, err
	}
	return p, nil
}

func nodeReady(n *corev1.Node) *corev1.NodeCondition {
	if n == nil {
		return nil
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func describeNode(n *corev1.Node) string {
	if n == nil {
		return "(not registered)"
	}
	var out []string
	for _, c := range n.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}

// describePod is the pod's phase, conditions and container states with
// their reasons and messages, for failures.
func describePod(p *corev1.Pod) string {
	if p == nil {
		return "(no pod)"
	}
	out := []string{fmt.Sprintf("phase %s node %q", p.Status.Phase, p.Spec.NodeName)}
	for _, c := range p.Status.Conditions {
		out = append(out, fmt.Sprintf("condition %s=%s reason %q message %q", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ") + "; " + kubelet.Describe(p)
}

// errPollTimeout is returned by poll when ctx ends first.
var errPollTimeout = errors.New("timed out")

// poll calls done every interval until it reports true or an error, or
// ctx ends.
func poll(ctx context.Context, interval time.Duration, done func() (bool, error)) error {
	for {
		ok, err := done()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errPollTimeout, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// applyPod applies the manifest testdata/pods/<file> with kubectl and
// deletes the pod when the test ends. It returns the pod's name and when
// it was applied.
func applyPod(ctx context.Context, t *testing.T, file string) (string, time.Time) {
	t.Helper()
	raw, err := podManifests.ReadFile("testdata/pods/" + file)
	if err != nil {
		t.Fatal(err)
	}
	p := loadPod(t, file)
	applied := time.Now()
	if _, err := kubectl(ctx, raw, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if _, err := kubectl(ctx, nil, "-n", clusterNamespace, "delete", "pod", p.Name, "--wait=true", "--timeout=200s"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return p.Name, applied
}

// waitClusterPod polls the pod until done accepts it, failing with the
// pod's conditions and messages after within.
func waitClusterPod(ctx context.Context, t *testing.T, name, what string, within time.Duration, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last *corev1.Pod
	var lastErr error
	err := poll(ctx, 500*time.Millisecond, func() (bool, error) {
		p, err := getPod(ctx, name)
		if err != nil {
			if ctx.Err() == nil { // not kubectl killed by the deadline
				lastErr = err
			}
			return false, nil
		}
		last = p
		return done(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s: %s: not within %s (%v; last kubectl error %v): %s", name, what, within, err, lastErr, describePod(last))
	}
	return last
}

// clusterContainerCgroup is the host cgroup of a container of p:
// kubepods/<qos>/pod<uid>/<container id> with the cgroupfs driver,
// kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
// cri-containerd-<container id>.scope with systemd's.
func (e *guestEnv) clusterContainerCgroup(t *testing.T, p *corev1.Pod, container string) string {
	t.Helper()
	driver := e.kubeletConfig().CgroupDriver
	rel, err := kubelet.PodCgroup(driver, p)
	if err != nil {
		t.Fatal(err)
	}
	id, err := kubelet.ContainerID(kubelet.ContainerStatus(p, container))
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	if driver == kubelet.Systemd {
		id = "cri-containerd-" + id + ".scope"
	}
	return filepath.Join(e.paths.CgroupRoot, rel, id)
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// clusterMetric prints one CGD-METRIC line of a Cluster scenario.
func clusterMetric(t *testing.T, scenario, name string, values map[string]float64) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"scenario": scenario, "name": name, "values": values})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", markMetric, b)
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(10*time.Millisecond)) / float64(time.Second)
}

// clusterNodeReady: the guest's kubelet registers as Node cgd-vm and
// becomes Ready; the pod of cluster-plain.yaml, which names no node, is
// applied with kubectl, placed on the Node by the scheduler and runs.
func clusterNodeReady(t *testing.T, e *guestEnv) {
	c := e.requireCluster(t)
	ctx := scenarioCtx(t)
	node, err := getNode(ctx, e.nodeName())
	if err != nil {
		t.Fatal(err)
	}
	if r := nodeReady(node); r == nil || r.Status != corev1.ConditionTrue {
		t.Fatalf("node %s not Ready: %s", e.nodeName(), describeNode(node))
	}
	if got := node.Status.Capacity.Cpu().Value(); got != int64(e.variant.SMP) {
		t.Errorf("node %s: cpu capacity %d, want the VM's %d", e.nodeName(), got, e.variant.SMP)
	}
	var internal []string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = append(internal, a.Address)
		}
	}
	if want := e.podnet.node.IP.String(); len(internal) != 1 || internal[0] != want {
		t.Errorf("node %s: internal IPs %v, want [%s]", e.nodeName(), internal, want)
	}

	name, applied := applyPod(ctx, t, "cluster-plain.yaml")
	p := waitClusterPod(ctx, t, name, "scheduled", 2*time.Minute, func(p *corev1.Pod) bool {
		c := podCondition(p, corev1.PodScheduled)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	scheduled := time.Since(applied)
	if p.Spec.NodeName != e.nodeName() {
		t.Errorf("pod %s scheduled to %q, want %s", name, p.Spec.NodeName, e.nodeName())
	}
	p = waitClusterPod(ctx, t, name, "running", 3*time.Minute, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && kubelet.Running(p, "work")
	})
	running := time.Since(applied)
	t.Logf("pod %s: scheduled after %s, running after %s: %s", name, scheduled.Round(100*time.Millisecond), running.Round(100*time.Millisecond), describePod(p))
	clusterMetric(t, "ClusterNodeReady", "cluster_node_ready", map[string]float64{
		"registered_seconds": seconds(c.registered), "ready_seconds": seconds(c.ready),
		"pod_scheduled_seconds": seconds(scheduled), "pod_running_seconds": seconds(running),
	})
}

// resizeStep is one in-place resize of container b of cluster-resize.yaml.
type resizeStep struct {
	name string
	// resource and limit: the limit of b the resize sets.
	resource corev1.ResourceName
	limit    string
	// file and want: the cgroup file of the container and its value after
	// the resize.
	file, want string
}

// resizeSteps: CPU limit up, CPU limit down, memory limit up.
var resizeSteps = []resizeStep{
	{name: "cpu_up", resource: corev1.ResourceCPU, limit: "750m", file: "cpu.max", want: "75000 100000"},
	{name: "cpu_down", resource: corev1.ResourceCPU, limit: "400m", file: "cpu.max", want: "40000 100000"},
	{name: "memory_up", resource: corev1.ResourceMemory, limit: "96Mi", file: "memory.max", want: strconv.Itoa(96 * mib)},
}

// clusterResizeUnpinned: with cgdelegate pinning, the ordinary
// Burstable pod of cluster-resize.yaml is resized in place beside the
// Guaranteed pod of cluster-pinned.yaml, whose container has an exclusive
// CPU. Each resize (resizeSteps, with kubectl patch --subresource resize)
// must complete within resizeWithin: no PodResizePending or
// PodResizeInProgress condition left and the container status showing the
// new limit; the container's cgroup file shows it, and the exclusive CPU
// never appears in the resized container's cpuset.cpus.effective. Last,
// clusterResizePinnedRefused: a resize cgdelegate refuses reaches the pod.
func clusterResizeUnpinned(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	e.requireCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	t.Cleanup(e.pluginLogFrom(t))

	pinnedName, _ := applyPod(ctx, t, "cluster-pinned.yaml")
	resizeName, _ := applyPod(ctx, t, "cluster-resize.yaml")
	pinned := waitClusterPod(ctx, t, pinnedName, "running", 3*time.Minute, func(p *corev1.Pod) bool { return kubelet.Running(p, "exclusive") })
	p := waitClusterPod(ctx, t, resizeName, "running", 3*time.Minute, func(p *corev1.Pod) bool { return kubelet.Running(p, "b") })
	if pinned.Status.QOSClass != corev1.PodQOSGuaranteed || p.Status.QOSClass != corev1.PodQOSBurstable {
		t.Fatalf("qos classes: %s %s, %s %s; want Guaranteed and Burstable", pinnedName, pinned.Status.QOSClass, resizeName, p.Status.QOSClass)
	}

	// The pinned container's exclusive CPU, once cgdelegate has set it.
	pinnedCg := e.clusterContainerCgroup(t, pinned, "exclusive")
	var exclusive cpuset.CPUSet
	if err := poll(ctx, 250*time.Millisecond, func() (bool, error) {
		s, err := cpuset.Parse(readCgroupFile(t, pinnedCg, "cpuset.cpus.effective"))
		exclusive = s
		return err == nil && s.Size() == 1, nil
	}); err != nil {
		t.Fatalf("pinned container %s: cpuset.cpus.effective %q, want one exclusive CPU: %v", pinnedCg, exclusive, err)
	}
	if exclusive.Contains(0) {
		t.Errorf("the pinned container has CPU 0, which cgdelegate reserves (reservedCPUs: \"0\")")
	}
	t.Logf("pinned container: exclusive CPU %s, cpu.max %q", exclusive, readCgroupFile(t, pinnedCg, "cpu.max"))

	cg := e.clusterContainerCgroup(t, p, "b")
	id := kubelet.ContainerStatus(p, "b").ContainerID
	checkCPUs := func(when string) {
		t.Helper()
		got, err := cpuset.Parse(readCgroupFile(t, cg, "cpuset.cpus.effective"))
		if err != nil {
			t.Fatalf("%s: %s cpuset.cpus.effective: %v", when, cg, err)
		}
		if !got.Intersection(exclusive).IsEmpty() {
			t.Errorf("%s: the resized container's cpuset.cpus.effective %s holds the pinned container's exclusive CPU %s", when, got, exclusive)
		}
		t.Logf("%s: resized container cpus %s, cpu.max %q, memory.max %s", when, got, readCgroupFile(t, cg, "cpu.max"), readCgroupFile(t, cg, "memory.max"))
	}
	if got := readCgroupFile(t, cg, "cpu.max"); got != "50000 100000" {
		t.Errorf("before the resizes: cpu.max %q, want the 500m limit %q", got, "50000 100000")
	}
	checkCPUs("before the resizes")

	timings := map[string]float64{}
	for _, step := range resizeSteps {
		patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"b","resources":{"limits":{%q:%q}}}]}}`, step.resource, step.limit)
		start := time.Now()
		if _, err := kubectl(ctx, nil, "-n", clusterNamespace, "patch", "pod", resizeName, "--subresource", "resize", "-p", patch); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		want := resource.MustParse(step.limit)
		p = waitClusterPod(ctx, t, resizeName, "resize "+step.name+" to "+step.limit, resizeWithin, func(p *corev1.Pod) bool {
			for _, c := range []corev1.PodConditionType{corev1.PodResizePending, corev1.PodResizeInProgress} {
				if podCondition(p, c) != nil {
					return false
				}
			}
			cs := kubelet.ContainerStatus(p, "b")
			if cs == nil || cs.Resources == nil {
				return false
			}
			got, ok := cs.Resources.Limits[step.resource]
			return ok && got.Cmp(want) == 0
		})
		done := time.Since(start)
		if cs := kubelet.ContainerStatus(p, "b"); cs.ContainerID != id || cs.RestartCount != 0 {
			t.Errorf("%s: container b is now %s (restarts %d), want %s unrestarted (NotRequired)", step.name, cs.ContainerID, cs.RestartCount, id)
		}
		// The kubelet reports the resize once it has written it; allow
		// the cgroup a moment in case it is written after the status.
		var got string
		if err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
			got = readCgroupFile(t, cg, step.file)
			return got == step.want || time.Since(start) > done+10*time.Second, nil
		}); err != nil || got != step.want {
			t.Errorf("%s: %s/%s = %q, want %q (%v)", step.name, cg, step.file, got, step.want, err)
		}
		checkCPUs("after " + step.name)
		t.Logf("%s: resize to %s %s done after %s", step.name, step.resource, step.limit, done.Round(10*time.Millisecond))
		timings[step.name+"_seconds"] = seconds(done)
	}
	if got, err := cpuset.Parse(readCgroupFile(t, pinnedCg, "cpuset.cpus.effective")); err != nil || !got.Equals(exclusive) {
		t.Errorf("after the resizes the pinned container has cpus %s (%v), want its exclusive %s", got, err, exclusive)
	}
	timings["pinned_refused_seconds"] = seconds(e.clusterResizePinnedRefused(ctx, t, pinnedName, pinnedCg, exclusive))
	clusterMetric(t, "ClusterResizeUnpinned", "cluster_resize", timings)
}

// clusterResizePinnedRefused: the in-place resize of the
// pinned pod (its exclusive container from 1 CPU to 2) is one cgdelegate
// refuses, as the kubelet's static CPU manager refuses it for a Guaranteed
// pod. The refusal reaches the pod, not only the plugin's log: the kubelet
// sets PodResizeInProgress with reason Error and cgdelegate's message, and
// records a ResizeError event; the container keeps its CPU. The resize is
// then undone, so the kubelet stops retrying. It returns how long the
// refusal took to show.
func (e *guestEnv) clusterResizePinnedRefused(ctx context.Context, t *testing.T, name, cg string, exclusive cpuset.CPUSet) time.Duration {
	t.Helper()
	patch := func(cpu string) {
		t.Helper()
		p := fmt.Sprintf(`{"spec":{"containers":[{"name":"exclusive","resources":{"requests":{"cpu":%q},"limits":{"cpu":%q}}}]}}`, cpu, cpu)
		if _, err := kubectl(ctx, nil, "-n", clusterNamespace, "patch", "pod", name, "--subresource", "resize", "-p", p); err != nil {
			t.Fatalf("resize of the pinned pod to %s: %v", cpu, err)
		}
	}
	start := time.Now()
	patch("2")
	var msg string
	waitClusterPod(ctx, t, name, "the refused resize in its status", resizeWithin, func(p *corev1.Pod) bool {
		c := podCondition(p, corev1.PodResizeInProgress)
		if c == nil || c.Reason != corev1.PodReasonError {
			return false
		}
		msg = c.Message
		return true
	})
	took := time.Since(start)
	t.Logf("the pinned pod's resize was refused after %s: PodResizeInProgress reason Error: %s", took.Round(10*time.Millisecond), msg)
	for _, want := range []string{"in-place resize refused", `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy`} {
		if !strings.Contains(msg, want) {
			t.Errorf("PodResizeInProgress message %q lacks %q", msg, want)
		}
	}
	events, err := kubectl(ctx, nil, "-n", clusterNamespace, "get", "events", "--field-selector",
		"involvedObject.name="+name+",reason=ResizeError", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	if err != nil || !strings.Contains(string(events), "in-place resize refused") {
		t.Errorf("no ResizeError event with cgdelegate's message for %s (%v): %q", name, err, events)
	}
	if got, err := cpuset.Parse(readCgroupFile(t, cg, "cpuset.cpus.effective")); err != nil || !got.Equals(exclusive) {
		t.Errorf("after the refused resize the pinned container has cpus %s (%v), want its exclusive %s", got, err, exclusive)
	}
	patch("1")
	waitClusterPod(ctx, t, name, "the undone resize settled", resizeWithin, func(p *corev1.Pod) bool {
		return podCondition(p, corev1.PodResizeInProgress) == nil && podCondition(p, corev1.PodResizePending) == nil
	})
	return took
}

// kubernetesService is the ClusterIP and port of the default namespace's
// kubernetes Service (integration/vm: the API server's
// --service-cluster-ip-range and its serving certificate's SAN), which the
// kubelet gives every pod as KUBERNETES_SERVICE_HOST and _PORT; kube-proxy
// forwards it to the API server on the host's bridge.
const kubernetesService = "10.96.0.1:443"
