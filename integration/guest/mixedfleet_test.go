//go:build integration_guest

package guest

// A mixed fleet: the cluster boot's second node (variant.MixedFleetNode,
// Node cgd-vm2: one CPU, cgroup2 without nsdelegate) joins for
// ClusterMixedFleet and leaves after it. The two guests share no files;
// they signal each other through the API server, each with an object the
// other may read. The first node's scenario (as the admin) makes a
// headless Service, which the second node's kubelet identity may read
// (the Node authorizer lets a node read Services, for their environment
// variables, but since selector authorization no Node but its own, which
// does not exist before it registers); the second answers on its own
// Node, which NodeRestriction lets it write. Until the first asks, the
// second runs only containerd: no kubelet, no kube-proxy, one read of the
// Service every few seconds.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
)

const (
	// fleetSignal is the annotation the two nodes talk through: on the
	// Service fleetService, fleetJoin then fleetDone (ClusterMixedFleet);
	// on the second node's Node, fleetLeft once its kubelet has stopped.
	fleetSignal = "cgdelegate.test/mixed-fleet"
	// fleetService is the headless Service (no cluster IP: kube-proxy
	// programs nothing for it) in clusterNamespace that carries the first
	// node's signal.
	fleetService = "cgd-mixed-fleet"
	// The signal's values.
	fleetJoin = "join"
	fleetDone = "done"
	fleetLeft = "left"
	// fleetPoll is how often the idle second node reads the signal.
	fleetPoll = 5 * time.Second
	// fleetNamespace holds ClusterMixedFleet's Deployment, allowed
	// writable cgroups by the label the chart's policy reads.
	fleetNamespace = "mixed-fleet"
	// fleetDeployment is its annotated Deployment selecting the label.
	fleetDeployment = "fleet-writable"
	// fleetPlaced is its annotated Deployment with no node selector of
	// its own: the chart's placement policy places it.
	fleetPlaced = "fleet-placed"
)

// fleetNodes are the first and the second node of the plan.
func (e *guestEnv) fleetNodes(t *testing.T) (first, second string) {
	t.Helper()
	if e.podnet == nil || len(e.podnet.plan.Nodes) < 2 {
		t.Fatalf("a mixed fleet needs a pod network plan of two nodes; this boot's: %+v", e.podnet)
	}
	return e.podnet.plan.Nodes[0].Name, e.podnet.plan.Nodes[1].Name
}

// signalOf reads the fleetSignal annotation of the object at path with
// client.
func signalOf(ctx context.Context, client *apiClient, path string) (string, error) {
	raw, err := client.get(ctx, path)
	if err != nil {
		return "", err
	}
	var m metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return m.Annotations[fleetSignal], nil
}

// fleetServicePath is the signal Service's API path.
const fleetServicePath = "/api/v1/namespaces/" + clusterNamespace + "/services/" + fleetService

// setFleetSignal makes or updates the signal Service with value, as the
// admin.
func setFleetSignal(ctx context.Context, value string) error {
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fleetService, Namespace: clusterNamespace,
			Annotations: map[string]string{fleetSignal: value},
		},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "none", Port: 1}}},
	}
	_, err := applyObject(ctx, svc)
	return err
}

// annotationPatch sets (or with value "" removes) fleetSignal.
func annotationPatch(value string) []byte {
	v := any(value)
	if value == "" {
		v = nil
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fleetSignal: v}}})
	return b
}

// kubeletClient is the API client with this node's kubelet identity
// (system:node:<name>).
func (e *guestEnv) kubeletClient() (*apiClient, error) {
	f, err := os.Open(e.kubeletKubeconfig())
	if err != nil {
		return nil, fmt.Errorf("kubelet identity: %w", err)
	}
	defer f.Close()
	return newAPIClient(f)
}

// waitSignal polls the first node's signal with client until it is one
// of want, and returns it.
func waitSignal(ctx context.Context, client *apiClient, want ...string) (string, error) {
	var got string
	var last error
	err := poll(ctx, fleetPoll, func() (bool, error) {
		v, err := signalOf(ctx, client, fleetServicePath)
		if err != nil {
			last = err
			return false, nil
		}
		got = v
		return slices.Contains(want, v), nil
	})
	if err != nil {
		return got, fmt.Errorf("service %s/%s never had %s in %v (last %q, %w): %w", clusterNamespace, fleetService, fleetSignal, want, got, last, err)
	}
	return got, nil
}

// clusterMixedFleetNode: see variant.ClusterMixedFleetNode. It runs on
// the second node only.
func clusterMixedFleetNode(t *testing.T, e *guestEnv) {
	first, second := e.fleetNodes(t)
	if e.nodeName() != second {
		t.Fatalf("this is node %s; %s is the second node's part", e.nodeName(), "ClusterMixedFleetNode")
	}
	client, err := e.kubeletClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 32*time.Minute)
	defer cancel()
	start := time.Now()
	got, err := waitSignal(ctx, client, fleetJoin, fleetDone)
	if err != nil {
		t.Fatal(err)
	}
	if got == fleetDone {
		t.Fatalf("node %s said %s before it asked this node to join", first, fleetDone)
	}
	idle := time.Since(start)
	t.Logf("asked to join after %s idle", idle.Round(time.Second))
	memIdle := memAvailableMiB()
	joined := time.Now()
	e.requireCluster(t) // kubelet, Ready, kube-proxy
	join := time.Since(joined)
	t.Logf("joined as Node %s in %s", second, join.Round(100*time.Millisecond))
	if _, err := waitSignal(ctx, client, fleetDone); err != nil {
		t.Fatal(err)
	}
	// What the node's memory must hold (followerMemoryMiB in
	// integration/vm): its files in the tmpfs, the release image and the
	// node's daemons and pods.
	clusterMetric(t, "ClusterMixedFleetNode", "mixed_fleet_node", map[string]float64{
		"idle_seconds": seconds(idle), "join_seconds": seconds(join),
		"mem_total_mib": memInfoMiB("MemTotal"), "mem_available_idle_mib": memIdle, "mem_available_joined_mib": memAvailableMiB(),
	})
	// Leave: no kubelet, no kube-proxy, then say so on the own Node.
	if pn := e.podnet; pn.proxy != nil {
		if err := pn.proxy.Stop(10 * time.Second); err != nil {
			t.Errorf("stopping kube-proxy: %v", err)
		}
	}
	if err := e.kubelet.daemon.Stop(20 * time.Second); err != nil {
		t.Errorf("stopping the kubelet: %v", err)
	}
	if err := client.mergePatch(ctx, "/api/v1/nodes/"+second, annotationPatch(fleetLeft)); err != nil {
		t.Fatalf("telling %s this node left: %v", first, err)
	}
	t.Logf("left after %s in the cluster", time.Since(joined).Round(time.Second))
}

// memInfoMiB is a /proc/meminfo field in MiB, -1 when unreadable.
func memInfoMiB(field string) float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			var kib float64
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kib); err == nil {
				return kib / 1024
			}
		}
	}
	return -1
}

// memAvailableMiB is the node's available memory in MiB.
func memAvailableMiB() float64 { return memInfoMiB("MemAvailable") }

// clusterMixedFleet: see variant.ClusterMixedFleet. It runs on the first
// node while the second idles until asked.
func clusterMixedFleet(t *testing.T, e *guestEnv) {
	e.requireHelmPlugin(t)
	first, second := e.fleetNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	start := time.Now()
	if err := setFleetSignal(ctx, fleetJoin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.fleetLeave(t, second) })

	// The second node registers and becomes Ready: its kubelet starts
	// within fleetPoll, and registers in well under a minute on one CPU.
	var node *corev1.Node
	rctx, rcancel := context.WithTimeout(ctx, 6*time.Minute)
	defer rcancel()
	if err := poll(rctx, time.Second, func() (bool, error) {
		n, err := getNode(rctx, second)
		if err != nil {
			return false, nil
		}
		node = n
		return nodeReady(n) != nil && nodeReady(n).Status == corev1.ConditionTrue, nil
	}); err != nil {
		t.Fatalf("node %s never Ready (%v): %s", second, err, describeNode(node))
	}
	ready := time.Since(start)

	// The DaemonSet wants both nodes and its pod runs on the second.
	// Pulling the release image and starting the init and plugin
	// containers on one CPU.
	var pod *corev1.Pod
	var ds appsv1.DaemonSet
	dctx, dcancel := context.WithTimeout(ctx, 8*time.Minute)
	defer dcancel()
	if err := poll(dctx, time.Second, func() (bool, error) {
		if err := getJSON(ctx, &ds, "-n", helmNamespace, "daemonset", helmRelease); err != nil {
			return false, nil
		}
		pods, err := dsPods(ctx)
		if err != nil {
			return false, nil
		}
		for i := range pods {
			if pods[i].Spec.NodeName == second {
				pod = &pods[i]
			}
		}
		return ds.Status.DesiredNumberScheduled == 2 && pod != nil && pod.Status.Phase == corev1.PodRunning &&
			kubelet.Running(pod, dsPluginContainer), nil
	}); err != nil {
		t.Fatalf("daemonset %s: desired %d (want 2), its pod on %s: %s (%v)\n%s", helmRelease, ds.Status.DesiredNumberScheduled,
			second, describePod(pod), err, e.describeDaemonSet(ctx))
	}
	podRunning := time.Since(start)

	// Its log says why the node cannot delegate, as a user reads it.
	var logs string
	lctx, lcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer lcancel()
	if err := poll(lctx, 2*time.Second, func() (bool, error) {
		out, err := kubectl(ctx, nil, "-n", helmNamespace, "logs", pod.Name, "-c", dsPluginContainer)
		logs = string(out)
		return err == nil && strings.Contains(logs, "nsdelegate"), nil
	}); err != nil {
		t.Fatalf("kubectl logs %s (on %s) never said why the node cannot delegate (no nsdelegate) (%v):\n%s", pod.Name, second, err, tail(logs, 30))
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "nsdelegate") {
			t.Logf("%s says: %s", pod.Name, l)
			break
		}
	}

	// No label on the second node, the first keeps its own.
	n2, err := getNode(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := n2.Labels[nodeLabel]; ok {
		t.Errorf("node %s (no nsdelegate) has %s=%q, want no such label", second, nodeLabel, v)
	}
	assertNodeUntouched(ctx, t, first, "true")

	// The second node says why, and `cgdelegate nodes` (the node's
	// binary, the admin's kubeconfig) prints both nodes with their
	// reasons (docs/troubleshooting.md, "The fleet at a glance").
	if err := poll(ctx, time.Second, func() (bool, error) {
		n, err := getNode(ctx, second)
		return err == nil && n.Annotations[reasonNote] == "no_nsdelegate", nil
	}); err != nil {
		t.Errorf("node %s (no nsdelegate) never got %s=no_nsdelegate (%v)", second, reasonNote, err)
	}
	if n1, err := getNode(ctx, first); err != nil {
		t.Error(err)
	} else if v, ok := n1.Annotations[reasonNote]; ok {
		t.Errorf("node %s (supported) has %s=%q, want none", first, reasonNote, v)
	}
	table, terr := exec.CommandContext(ctx, e.paths.PluginBinary, "nodes", "-kubeconfig", guestKubeconfig).CombinedOutput()
	t.Logf("cgdelegate nodes:\n%s", table)
	rows := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(table)), "\n") {
		if f := strings.Fields(l); len(f) == 5 {
			rows[f[0]] = f[1:]
		}
	}
	if terr != nil || len(rows[first]) != 4 || len(rows[second]) != 4 ||
		!slices.Equal(rows[first][:2], []string{"true", "-"}) || !slices.Equal(rows[second][:2], []string{"absent", "no_nsdelegate"}) ||
		rows[first][3] == "-" || rows[second][3] == "-" {
		t.Errorf("cgdelegate nodes (%v): want %s true with no reason and %s absent with no_nsdelegate, each with its plugin's version:\n%s", terr, first, second, table)
	}

	// An annotated Deployment selecting the label lands on the first
	// node only.
	deployed := time.Now()
	if err := applyFleetDeployment(ctx, fleetDeployment, true, ""); err != nil {
		t.Fatal(err)
	}
	pods := waitFleetPods(ctx, t, fleetDeployment, 2, 5*time.Minute)
	for i := range pods {
		if pods[i].Spec.NodeName != first {
			t.Errorf("pod %s of %s (selecting %s) runs on %q, want %s", pods[i].Name, fleetDeployment, nodeLabel, pods[i].Spec.NodeName, first)
		}
	}
	deploymentRunning := time.Since(deployed)

	// Placement: an annotated Deployment with no node selector of its own,
	// which even prefers the second node, lands on the first node only
	// too: the chart's placement policy (MutatingAdmissionPolicy,
	// Kubernetes 1.36+) gave its pods the required node affinity on the
	// label. Without it the scheduler follows the preference, and the
	// pods loop in CreateContainerError there.
	if err := applyFleetDeployment(ctx, fleetPlaced, false, second); err != nil {
		t.Fatal(err)
	}
	for _, p := range waitFleetPods(ctx, t, fleetPlaced, 2, 5*time.Minute) {
		if p.Spec.NodeName != first {
			t.Errorf("pod %s of %s (no node selector) runs on %q, want %s", p.Name, fleetPlaced, p.Spec.NodeName, first)
		}
		if !requiresNodeLabel(p.Spec.Affinity) {
			t.Errorf("pod %s of %s was admitted without the required node affinity on %s: %+v", p.Name, fleetPlaced, nodeLabel, p.Spec.Affinity)
		}
	}

	// A token bound to the second node's plugin pod cannot take the label
	// from the first node.
	token, err := kubectl(ctx, nil, "-n", helmNamespace, "create", "token", pod.Spec.ServiceAccountName,
		"--bound-object-kind", "Pod", "--bound-object-name", pod.Name, "--bound-object-uid", string(pod.UID), "--duration=10m")
	if err != nil {
		t.Fatal(err)
	}
	out, err := kubectlAs(ctx, string(token), "label", "node", first, nodeLabel+"-")
	switch {
	case err == nil:
		t.Errorf("the token of %s's plugin pod removed %s from %s: %s", second, nodeLabel, first, out)
		if _, err := kubectl(ctx, nil, "label", "node", first, nodeLabel+"=true", "--overwrite"); err != nil {
			t.Errorf("undo the attack on node %s: %v", first, err)
		}
	case !strings.Contains(err.Error(), "cgdelegate-node-label") || !strings.Contains(strings.ToLower(err.Error()), "forbidden"):
		t.Errorf("the token of %s's plugin pod was refused, but not by the chart's node-label policy (want a 403 naming cgdelegate-node-label): %v", second, err)
	default:
		t.Logf("refused as it should be: %s", strings.TrimSpace(string(out)))
	}
	assertNodeUntouched(ctx, t, first, "true")

	clusterMetric(t, "ClusterMixedFleet", "cluster_mixed_fleet", map[string]float64{
		"second_node_ready_seconds": seconds(ready), "second_plugin_running_seconds": seconds(podRunning),
		"deployment_running_seconds": seconds(deploymentRunning),
	})
}

// requiresNodeLabel says whether every term of a required node affinity
// requires the node label "true".
func requiresNodeLabel(a *corev1.Affinity) bool {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for _, term := range terms {
		if !slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == nodeLabel && r.Operator == corev1.NodeSelectorOpIn && slices.Equal(r.Values, []string{"true"})
		}) {
			return false
		}
	}
	return len(terms) != 0
}

// applyFleetDeployment applies an annotated Deployment name (two
// replicas; selecting the label when selectLabel; preferring the node
// prefer, if any, with the heaviest weight) in its namespace, which
// allows writable cgroups.
func applyFleetDeployment(ctx context.Context, name string, selectLabel bool, prefer string) error {
	ns := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: fleetNamespace, Labels: map[string]string{"cgdelegate.io/writable-cgroups": "allowed"}},
	}
	if _, err := applyObject(ctx, ns); err != nil {
		return err
	}
	tmpl := admissionPod("", fleetNamespace, true)
	if selectLabel {
		tmpl.Spec.NodeSelector = map[string]string{nodeLabel: "true"}
	}
	if prefer != "" {
		tmpl.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{prefer}}},
			}}},
		}}
	}
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fleetNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: tmpl.Annotations},
				Spec:       tmpl.Spec,
			},
		},
	}
	_, err := applyObject(ctx, d)
	return err
}

// waitFleetPods waits until n pods of the Deployment name run.
func waitFleetPods(ctx context.Context, t *testing.T, name string, n int, within time.Duration) []corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last []corev1.Pod
	err := poll(ctx, time.Second, func() (bool, error) {
		var l corev1.PodList
		if err := getJSON(ctx, &l, "-n", fleetNamespace, "pods", "-l", "app="+name); err != nil {
			return false, nil
		}
		last = l.Items
		running := 0
		for i := range l.Items {
			if kubelet.Running(&l.Items[i], "work") {
				running++
			}
		}
		return running == n && len(l.Items) == n, nil
	})
	if err != nil {
		var desc []string
		for i := range last {
			desc = append(desc, last[i].Name+" on "+last[i].Spec.NodeName+": "+describePod(&last[i]))
		}
		t.Fatalf("%s: not %d pods running within %s (%v): %s", name, n, within, err, strings.Join(desc, "; "))
	}
	return last
}

// fleetLeave ends the mixed fleet whatever the scenario's outcome: the
// Deployment goes, the second node is told to leave, and once it has (or
// after a bound) its Node and the pods bound to it are deleted, as an
// admin removes a node, so the later scenarios see one node again.
func (e *guestEnv) fleetLeave(t *testing.T, second string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kubectl(ctx, nil, "delete", "namespace", fleetNamespace, "--wait=false", "--ignore-not-found"); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if err := setFleetSignal(ctx, fleetDone); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	admin, err := theAPI()
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	start := time.Now()
	if err := poll(ctx, 2*time.Second, func() (bool, error) {
		v, err := signalOf(ctx, admin, "/api/v1/nodes/"+second)
		return err == nil && v == fleetLeft || errors.Is(err, errNotFound), nil
	}); err != nil {
		t.Errorf("node %s never said it left (%v); deleting it anyway", second, err)
	} else {
		t.Logf("node %s left %s after it was told", second, time.Since(start).Round(100*time.Millisecond))
	}
	if _, err := kubectl(ctx, nil, "delete", "node", second, "--ignore-not-found"); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	// Its pods stay bound to a Node that is gone until the pod garbage
	// collector's next pass; an admin deletes them at once.
	if _, err := kubectl(ctx, nil, "delete", "pods", "--all-namespaces", "--field-selector", "spec.nodeName="+second,
		"--force", "--grace-period=0", "--ignore-not-found"); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if _, err := kubectl(ctx, nil, "-n", clusterNamespace, "delete", "service", fleetService, "--ignore-not-found"); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	var ds appsv1.DaemonSet
	if err := poll(ctx, time.Second, func() (bool, error) {
		if err := getJSON(ctx, &ds, "-n", helmNamespace, "daemonset", helmRelease); err != nil {
			return false, nil
		}
		pods, err := dsPods(ctx)
		return err == nil && len(pods) == 1 && ds.Status.DesiredNumberScheduled == 1, nil
	}); err != nil {
		t.Errorf("after %s left, daemonset %s: desired %d, want 1 (%v)\n%s", second, helmRelease, ds.Status.DesiredNumberScheduled, err, e.describeDaemonSet(ctx))
	}
}
