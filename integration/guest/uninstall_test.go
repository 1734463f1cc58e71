//go:build integration_guest

package guest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
)

// errUninstalled is pluginErr once ClusterHelmUninstall has run.
var errUninstalled = errors.New("cgdelegate was uninstalled (ClusterHelmUninstall)")

// failClosedWait is how long a fail-closed pod must stay not running after
// the uninstall to count as waiting.
const failClosedWait = 30 * time.Second

// clusterHelmUninstall: `helm uninstall` while a writable pod
// runs. The chart's pre-delete hook withdraws the node label before the
// plugin goes; a new pod selecting the label stays Pending with the
// scheduler's reason; the running pod keeps its delegated cgroup; a new
// pod asking for a writable cgroup and requiring the plugin waits (the
// runtime refuses its container while the plugin is missing); a pod that
// asks for nothing starts. It is the boot's last scenario: cgdelegate is
// gone after it.
func clusterHelmUninstall(t *testing.T, e *guestEnv) {
	e.requireHelmPlugin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	ns := admissionNamespace(t, ctx, "uninstall")
	keep := admissionPod("keep-uninstall", ns, true)
	if _, err := applyObject(ctx, keep); err != nil {
		t.Fatal(err)
	}
	kp := waitNamespacedPod(ctx, t, ns, keep.Name, "work", 4*time.Minute)
	w := e.kubeletContainer(ctx, t, kp, "work")
	shOK(ctx, t, w, "mkdir /sys/fs/cgroup/keep && echo kept > /tmp/marker")
	if n, err := getNode(ctx, e.nodeName()); err != nil || n.Labels[nodeLabel] != "true" {
		t.Fatalf("before the uninstall node %s has no %s=true (%v)", e.nodeName(), nodeLabel, err)
	}

	from := fileSize(e.paths.ContainerdLog)
	start := time.Now()
	out, err := helmCmd(ctx, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", "5m")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%v\n%s", err, e.describeDaemonSet(ctx))
	}
	t.Logf("helm uninstall took %s: %s", took.Round(100*time.Millisecond), strings.TrimSpace(string(out)))
	e.helm, e.pluginErr = nil, errUninstalled

	// The label is gone: the hook removed it before the plugin went, and
	// the plugin withdraws it at exit (a plugin that relabelled the node
	// after the hook's Job ran removes it as its pod ends, which may be
	// just after helm returns).
	labelled := time.Now()
	if e.waitLabelWithdrawn(ctx, t) {
		t.Logf("the node label was gone %s after helm uninstall returned", time.Since(labelled).Round(100*time.Millisecond))
	}
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 2*time.Minute, pluginGone, func() error { return nil }); err != nil {
		t.Errorf("cgdelegate's connection to containerd did not close: %v", err)
	}

	// A pod selecting the label is not scheduled.
	sel := admissionPod("selects-label-after", clusterNamespace, false)
	sel.Spec.NodeSelector = map[string]string{nodeLabel: "true"}
	plain := admissionPod("plain-after", clusterNamespace, false)
	waits := admissionPod("waits-after", ns, true)
	for _, p := range []*corev1.Pod{sel, plain, waits} {
		if _, err := applyObject(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { deletePods(t, clusterNamespace, sel.Name, plain.Name) })
	pending := waitClusterPod(ctx, t, sel.Name, "unschedulable", 2*time.Minute, func(p *corev1.Pod) bool {
		c := podCondition(p, corev1.PodScheduled)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
	})
	if c := podCondition(pending, corev1.PodScheduled); !strings.Contains(c.Message, "node affinity/selector") {
		t.Errorf("pod %s is unschedulable for %q, want the node selector", sel.Name, c.Message)
	}
	t.Logf("pod %s: Pending: %s", sel.Name, podCondition(pending, corev1.PodScheduled).Message)

	// A pod that asks for nothing starts.
	waitNamespacedPod(ctx, t, clusterNamespace, plain.Name, "work", 3*time.Minute)

	// The fail-closed pod waits: scheduled, its container refused by the
	// runtime while cgdelegate is missing, never running.
	var last *corev1.Pod
	deadline := time.Now().Add(failClosedWait)
	for time.Now().Before(deadline) {
		p := &corev1.Pod{}
		if err := getJSON(ctx, p, "-n", ns, "pod", waits.Name); err == nil {
			last = p
			if kubelet.Running(p, "work") {
				t.Fatalf("pod %s asking for a writable cgroup runs without cgdelegate: %s", waits.Name, describePod(p))
			}
		}
		time.Sleep(2 * time.Second)
	}
	cs := kubelet.ContainerStatus(last, "work")
	if cs == nil || cs.State.Waiting == nil || !strings.Contains(cs.State.Waiting.Message, "cgdelegate") {
		t.Errorf("pod %s: want its container waiting with the runtime's refusal naming cgdelegate: %s", waits.Name, describePod(last))
	} else {
		t.Logf("pod %s waits: %s: %s", waits.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
	}

	// The running pod kept its delegated cgroup.
	if out := shOK(ctx, t, w, "cat /tmp/marker; mkdir /sys/fs/cgroup/keep/again && echo ok"); !strings.Contains(out, "kept") || !strings.Contains(out, "ok") {
		t.Errorf("the writable pod lost its delegated cgroup with the uninstall: %q", out)
	}
	assertWritableMount(ctx, t, w)
	clusterMetric(t, "ClusterHelmUninstall", "cluster_helm_uninstall", map[string]float64{"uninstall_seconds": seconds(took)})
}

// waitLabelWithdrawn waits up to 90 s, after helm uninstall, for the
// node to lose the label; it reports false, and the value left, when it
// does not.
func (e *guestEnv) waitLabelWithdrawn(ctx context.Context, t *testing.T) bool {
	t.Helper()
	lctx, lcancel := context.WithTimeout(ctx, 90*time.Second)
	defer lcancel()
	var label string
	if err := poll(lctx, 500*time.Millisecond, func() (bool, error) {
		n, err := getNode(lctx, e.nodeName())
		if err != nil {
			return false, err
		}
		v, ok := n.Labels[nodeLabel]
		label = v
		return !ok, nil
	}); err != nil {
		t.Errorf("after helm uninstall node %s still has %s=%s: %v", e.nodeName(), nodeLabel, label, err)
		return false
	}
	return true
}
