//go:build integration_guest

package guest

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/cri"
	"github.com/cgdelegate/cgdelegate/integration/variant"
)

// assertBounded checks that the pod's cgroup carries numeric bounds.
func (e *guestEnv) assertBounded(t *testing.T, pod *cri.Pod) {
	t.Helper()
	for _, f := range []string{"cgroup.max.descendants", "cgroup.max.depth"} {
		if v := readCgroupFile(t, e.podCgroup(pod), f); v == "max" {
			t.Errorf("pod %s: %s = max, want a bound", pod.Spec.Name, f)
		}
	}
}

// restarts (S10): containerd and the plugin restart; running containers keep
// their state, and new writable containers still get mount and bound.
func restarts(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	podA := e.runPod(ctx, t, cri.PodSpec{Name: "a", Annotations: writable()})
	a := runContainer(ctx, t, podA, sleeper("a", 0))
	shOK(ctx, t, a, "mkdir /sys/fs/cgroup/keep && echo kept > /tmp/marker")

	if err := e.restartContainerd(ctx); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
	if e.variant.Plugin == variant.PluginExternal {
		// The external plugin loses its connection with containerd.
		if err := e.restartPlugin(ctx); err != nil {
			t.Fatalf("restart plugin after containerd: %v", err)
		}
	}
	check := func(stage string) {
		t.Helper()
		st, err := a.Status(ctx)
		if err != nil || st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("%s: container a: state %v, err %v", stage, st.GetState(), err)
		}
		if out := shOK(ctx, t, a, "cat /tmp/marker && test -d /sys/fs/cgroup/keep && echo ok"); !strings.Contains(out, "ok") {
			t.Errorf("%s: container a lost its state: %q", stage, out)
		}
		assertWritableMount(ctx, t, a)
		e.assertBounded(t, podA)
	}
	check("after containerd restart")
	podB := e.runPod(ctx, t, cri.PodSpec{Name: "b", Annotations: writable()})
	b := runContainer(ctx, t, podB, sleeper("b", 0))
	assertWritableMount(ctx, t, b)
	e.assertBounded(t, podB)

	if e.variant.Plugin == variant.PluginExternal {
		if err := e.restartPlugin(ctx); err != nil {
			t.Fatalf("restart plugin: %v", err)
		}
		check("after plugin restart")
		podC := e.runPod(ctx, t, cri.PodSpec{Name: "c", Annotations: writable()})
		c := runContainer(ctx, t, podC, sleeper("c", 0))
		assertWritableMount(ctx, t, c)
		e.assertBounded(t, podC)
	}
}
