//go:build integration_guest

package guest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
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
		auditAfterOutage(ctx, t, e)
	}
}

// auditAfterOutage: an opted-in container created while cgdelegate is down
// (no per-pod required plugins here) runs read-only, and the next connect
// says so by name; the containers cgdelegate made (a, b, c, still running)
// are never named.
func auditAfterOutage(ctx context.Context, t *testing.T, e *guestEnv) {
	t.Helper()
	from := fileSize(e.paths.PluginLog)
	if err := e.plugin.Stop(20 * time.Second); err != nil {
		t.Fatalf("stop plugin: %v", err)
	}
	restart := e.restartPluginOnce(ctx, t)
	podD := e.runPod(ctx, t, cri.PodSpec{Name: "d", Annotations: writable()})
	d := runContainer(ctx, t, podD, sleeper("missed", 0))
	if out := shOK(ctx, t, d, "mkdir /sys/fs/cgroup/x 2>&1; echo rc=$?"); !strings.Contains(out, "rc=1") {
		t.Errorf("created while cgdelegate was down, the container's cgroups are not read-only: %q", out)
	}
	restart()
	b, err := os.ReadFile(e.paths.PluginLog)
	if err != nil || int64(len(b)) < from {
		t.Fatalf("plugin log: %v", err)
	}
	var named []string
	for _, l := range strings.Split(string(b[from:]), "\n") {
		if strings.Contains(l, "container runs without cgdelegate") {
			named = append(named, l)
		}
	}
	if len(named) != 1 || !strings.Contains(named[0], "container=missed ") || !strings.Contains(named[0], "recreate the container") {
		t.Errorf("after the outage the plugin named %d containers, want exactly the one created without it (container=missed):\n%s", len(named), strings.Join(named, "\n"))
	}
}
