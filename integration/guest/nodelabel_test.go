//go:build integration_guest

package guest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/workstation"
)

const (
	// nodeLabel is the label cgdelegate puts on its own Node
	// (advert.FeatureLabel).
	nodeLabel = "cgdelegate.io/supports-cgroup-options"
	// reasonNote is the annotation beside it that says why it is absent.
	reasonNote = "cgdelegate.io/supports-cgroup-options-reason"
	// ghostNode is a Node object with no kubelet behind it: the node a
	// stolen token tries to relabel.
	ghostNode = "cgd-ghost"
)

// pluginToken is the service-account token the kubelet projected into
// cgdelegate's pod, read from the node as someone who can read the node's
// files (or the pod's) would steal it.
func (e *guestEnv) pluginToken(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(e.paths.KubeletRoot, "pods", string(p.UID), "volumes", "kubernetes.io~projected", "*", "token"))
	if len(matches) != 1 {
		t.Fatalf("the projected token of pod %s: found %v, want one", p.Name, matches)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil || len(b) == 0 {
		t.Fatalf("the projected token of pod %s: %v", p.Name, err)
	}
	return string(b)
}

// kubectlAs runs kubectl against the admin kubeconfig's API server with
// token as its only credential (no client certificate).
func kubectlAs(ctx context.Context, token string, args ...string) ([]byte, error) {
	server, ca, err := adminCluster()
	if err != nil {
		return nil, err
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, server, ca, strings.TrimSpace(token))
	res, err := onWorkstation(ctx, workstation.Request{Tool: "kubectl", Args: append([]string{"--request-timeout=30s"}, args...), Kubeconfig: []byte(kubeconfig)})
	out := append(res.Stdout, res.Stderr...)
	if err != nil {
		return out, fmt.Errorf("as the token's account: %w", err)
	}
	return out, nil
}

// clusterNodeLabel: while cgdelegate runs, its Node carries
// the label cgdelegate.io/supports-cgroup-options=true, written by the
// plugin with its own service account; a pod that selects the label is
// scheduled onto the Node. The account's token, stolen, cannot label
// another Node, nor change another label of its own Node (the chart's
// policy cgdelegate-node-label); it can only say what the plugin says.
func clusterNodeLabel(t *testing.T, e *guestEnv) {
	e.requireHelmPlugin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start := time.Now()
	var node *corev1.Node
	if err := poll(ctx, 500*time.Millisecond, func() (bool, error) {
		n, err := getNode(ctx, e.nodeName())
		node = n
		return err == nil && n.Labels[nodeLabel] == "true", nil
	}); err != nil {
		var labels map[string]string
		if node != nil {
			labels = node.Labels
		}
		t.Fatalf("node %s never got %s=true (%v); labels %v\n%s", e.nodeName(), nodeLabel, err, labels, e.describeDaemonSet(ctx))
	}
	t.Logf("node %s labelled %s=true (%s after the scenario's start)", e.nodeName(), nodeLabel, time.Since(start).Round(100*time.Millisecond))

	// A pod that selects the label is scheduled onto the node.
	sel := admissionPod("selects-label", clusterNamespace, false)
	sel.Spec.NodeSelector = map[string]string{nodeLabel: "true"}
	applied := time.Now()
	if _, err := applyObject(ctx, sel); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePods(t, clusterNamespace, sel.Name) })
	p := waitNamespacedPod(ctx, t, clusterNamespace, sel.Name, "work", 3*time.Minute)
	if p.Spec.NodeName != e.nodeName() {
		t.Errorf("pod %s selecting %s runs on %q, want %s", sel.Name, nodeLabel, p.Spec.NodeName, e.nodeName())
	}
	running := time.Since(applied)

	// The stolen token.
	pods, err := dsPods(ctx)
	if err != nil || len(pods) != 1 {
		t.Fatalf("the DaemonSet's pods: %d (%v)", len(pods), err)
	}
	// The token is the plugin container's alone: the pod as the API
	// server admitted it (the ServiceAccount admission adds the
	// automounted token to every container) gives the init container
	// that installs the hook no mount of it.
	for _, c := range pods[0].Spec.InitContainers {
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.MountPath, "/var/run/secrets") {
				t.Errorf("init container %s mounts %s at %s: it needs no service-account token", c.Name, m.Name, m.MountPath)
			}
		}
	}
	token := e.pluginToken(t, &pods[0])
	ghost := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: ghostNode}}
	if _, err := applyObject(ctx, ghost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := kubectl(ctx, nil, "delete", "node", ghostNode, "--wait=false"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	refusals := []struct {
		what string
		args []string
		want string
	}{
		{"label another node", []string{"label", "node", ghostNode, nodeLabel + "=true"}, "may only label its own node"},
		{"change another label of its own node", []string{"label", "node", e.nodeName(), "stolen=yes"}, "may change only the label " + nodeLabel},
		{"taint its own node", []string{"taint", "node", e.nodeName(), "stolen=yes:NoSchedule"}, "cgdelegate-node-label"},
		{
			"give its own node an owner that does not exist (the garbage collector would delete the Node)",
			mergePatch(e.nodeName(), ownerPatch), "may change only the label " + nodeLabel + " of a node, not metadata.ownerReferences",
		},
		{"give its own node a finalizer", mergePatch(e.nodeName(), finalizerPatch), "of a node, not metadata.finalizers"},
		{"set the label to pwned", mergePatch(e.nodeName(), labelPatch("pwned")), `may only set the label ` + nodeLabel + ` to "true" or remove it, not set it to "pwned"`},
	}
	for _, r := range refusals {
		out, err := kubectlAs(ctx, token, r.args...)
		if err == nil {
			t.Errorf("the stolen token could %s: %s", r.what, out)
			undoAttack(ctx, t, e.nodeName())
			continue
		}
		if !strings.Contains(err.Error(), r.want) {
			t.Errorf("the stolen token's attempt to %s was refused, but not by the policy (want %q): %v", r.what, r.want, err)
		}
		t.Logf("stolen token, %s: refused: %v", r.what, err)
	}
	assertNodeUntouched(ctx, t, e.nodeName(), "true")
	// What the plugin itself does is allowed: the label on its own node,
	// set with its own merge patch (advert's labelPatch) and with kubectl.
	if _, err := kubectlAs(ctx, token, mergePatch(e.nodeName(), labelPatch("true"))...); err != nil {
		t.Errorf("the plugin's own change, its label on its own node, was refused: %v", err)
	}
	if _, err := kubectlAs(ctx, token, "label", "node", e.nodeName(), nodeLabel+"=true", "--overwrite"); err != nil {
		t.Errorf("the plugin's own change, its label on its own node, was refused: %v", err)
	}
	if n, err := getNode(ctx, ghostNode); err != nil {
		t.Errorf("node %s: %v", ghostNode, err)
	} else if v, ok := n.Labels[nodeLabel]; ok {
		t.Errorf("node %s has %s=%s, want no such label", ghostNode, nodeLabel, v)
	}
	uninstallAccountAttacks(ctx, t)
	clusterMetric(t, "ClusterNodeLabel", "cluster_node_label", map[string]float64{"selecting_pod_running_seconds": seconds(running)})
}

// The attacks' merge patches, as a stolen token sends them.
const (
	// ownerPatch gives a Node an owner that does not exist: the garbage
	// collector deletes an object whose owners are all gone.
	ownerPatch = `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"cgd-gone","uid":"00000000-0000-0000-0000-00000000dead"}]}}`
	// finalizerPatch blocks the Node's deletion.
	finalizerPatch = `{"metadata":{"finalizers":["cgdelegate.io/stolen"]}}`
)

// labelPatch is the merge patch that sets the node label to value, as the
// plugin sends it (advert's labelPatch), or removes it for "".
func labelPatch(value string) string {
	if value == "" {
		return `{"metadata":{"labels":{"` + nodeLabel + `":null}}}`
	}
	return `{"metadata":{"labels":{"` + nodeLabel + `":"` + value + `"}}}`
}

// mergePatch is the kubectl arguments that send patch to Node node.
func mergePatch(node, patch string) []string {
	return []string{"patch", "node", node, "--type=merge", "-p", patch}
}

// assertNodeUntouched checks that node has no owner and no finalizer, and
// the node label label (""; none).
func assertNodeUntouched(ctx context.Context, t *testing.T, name, label string) {
	t.Helper()
	n, err := getNode(ctx, name)
	if err != nil {
		t.Errorf("node %s: %v", name, err)
		return
	}
	if len(n.OwnerReferences) != 0 || len(n.Finalizers) != 0 {
		t.Errorf("node %s has owners %v and finalizers %v, want none", name, n.OwnerReferences, n.Finalizers)
	}
	if v := n.Labels[nodeLabel]; v != label {
		t.Errorf("node %s has %s=%q, want %q", name, nodeLabel, v, label)
	}
}

// uninstallAccountAttacks plays a stolen token of the uninstall account,
// ServiceAccount cgdelegate-uninstall, which may patch every node while
// helm uninstall runs. The chart creates that account and its rights only
// as pre-delete hooks; its policy, cgdelegate-node-label-uninstall, is in
// place while the release is. So the test creates the account with the
// hook's rights (plus get: kubectl patch reads the node first, the Job's
// client does not), issues a token for it, and plays on the ghost node: an
// owner that does not exist, a finalizer, the label set; each refused by
// the policy. Removing the label is allowed.
func uninstallAccountAttacks(ctx context.Context, t *testing.T) {
	t.Helper()
	const (
		account = "cgdelegate-uninstall"
		rights  = "cgd-test-uninstall-rights"
		policy  = "cgdelegate-node-label-uninstall"
	)
	objects := []byte(`apiVersion: v1
kind: ServiceAccount
metadata: {name: ` + account + `, namespace: ` + helmNamespace + `}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ` + rights + `}
rules: [{apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "patch"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ` + rights + `}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ` + rights + `}
subjects: [{kind: ServiceAccount, name: ` + account + `, namespace: ` + helmNamespace + `}]
`)
	if out, err := kubectl(ctx, objects, "apply", "-f", "-"); err != nil {
		t.Fatalf("the uninstall account with the hook's rights: %v: %s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := kubectl(ctx, objects, "delete", "-f", "-", "--wait=true"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	out, err := kubectl(ctx, nil, "-n", helmNamespace, "create", "token", account, "--duration=20m")
	if err != nil {
		t.Fatal(err)
	}
	token := string(out)
	if _, err := kubectl(ctx, nil, "label", "node", ghostNode, nodeLabel+"=true", "--overwrite"); err != nil {
		t.Fatal(err)
	}
	// The API server names the first validation that fails: a patch that
	// leaves the label in place fails on that, so each attack on the
	// metadata also removes the label, as the Job's own patch does.
	removed := `{"metadata":{"labels":{"` + nodeLabel + `":null},`
	for _, r := range []struct{ what, patch, want string }{
		{"give a node an owner that does not exist", ownerPatch, "may only remove the label " + nodeLabel + ": the updated node still has it"},
		{
			"remove the label and give the node an owner that does not exist", removed + strings.TrimPrefix(ownerPatch, `{"metadata":{`),
			"may change only the label " + nodeLabel + " of a node, not metadata.ownerReferences",
		},
		{"remove the label and add a finalizer", removed + strings.TrimPrefix(finalizerPatch, `{"metadata":{`), "of a node, not metadata.finalizers"},
		{"set the label to pwned", labelPatch("pwned"), "may only remove the label " + nodeLabel},
	} {
		out, err := kubectlAs(ctx, token, mergePatch(ghostNode, r.patch)...)
		switch {
		case err == nil:
			t.Errorf("the uninstall account's token could %s: %s", r.what, out)
			undoAttack(ctx, t, ghostNode)
		case !strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), r.want):
			t.Errorf("the uninstall account's attempt to %s was refused, but not by %s with %q: %v", r.what, policy, r.want, err)
		default:
			t.Logf("uninstall account, %s: refused: %v", r.what, err)
		}
	}
	assertNodeUntouched(ctx, t, ghostNode, "true")
	// What the uninstall Job does is allowed: remove the label.
	if _, err := kubectlAs(ctx, token, mergePatch(ghostNode, labelPatch(""))...); err != nil {
		t.Errorf("the uninstall account's own change, removing the label, was refused: %v", err)
	}
	assertNodeUntouched(ctx, t, ghostNode, "")
}

// undoAttack removes, as the admin, the owners and finalizers an attack
// that was not refused gave node, before the garbage collector deletes it.
func undoAttack(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	if _, err := kubectl(ctx, nil, mergePatch(node, `{"metadata":{"ownerReferences":null,"finalizers":null}}`)...); err != nil {
		t.Errorf("undo the attack on node %s: %v", node, err)
	}
}
