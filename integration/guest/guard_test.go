//go:build integration_guest

package guest

import (
	"context"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// raiseScript tries to lift the container's own memory limit.
const raiseScript = `echo "BEFORE=$(cat /sys/fs/cgroup/memory.max)"
if err=$( (echo max > /sys/fs/cgroup/memory.max) 2>&1 ); then echo RAISE=ok; else echo "RAISE=$err"; fi
echo "AFTER=$(cat /sys/fs/cgroup/memory.max)"`

// podContainers lists the containers of a pod.
func (e *guestEnv) podContainers(ctx context.Context, t *testing.T, pod *cri.Pod) []*runtimeapi.Container {
	t.Helper()
	resp, err := e.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod.ID},
	})
	if err != nil {
		t.Fatalf("ListContainers: %v", err)
	}
	return resp.GetContainers()
}

// refusedButPlainRuns checks that a container of pod is refused with an
// error holding want (what names the attempt), that nothing of it is left,
// and that a container of an unannotated pod still runs.
func (e *guestEnv) refusedButPlainRuns(ctx context.Context, t *testing.T, pod *cri.Pod, what, want string) {
	t.Helper()
	_, err := pod.CreateContainer(ctx, sleeper("refused", 0))
	requireErrContains(t, what, err, want)
	t.Logf("refusal seen by the CRI client: %v", err)
	if cs := e.podContainers(ctx, t, pod); len(cs) != 0 {
		t.Errorf("refused container exists anyway: %v", cs)
	}
	plain := e.runPod(ctx, t, cri.PodSpec{Name: "plain"})
	c := runContainer(ctx, t, plain, sleeper("plain", 0))
	if out := shOK(ctx, t, c, "echo alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("plain container exec: %q", out)
	}
}

// refusedWithoutNSDelegate (S05): on a host without nsdelegate an annotated
// container is not created, the CRI error names nsdelegate; plain pods still
// run.
func refusedWithoutNSDelegate(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	if e.variant.NSDelegate {
		t.Fatalf("variant %s has nsdelegate; this scenario needs a host without it", e.variant.Name)
	}
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Name: "annotated", Annotations: writable()})
	e.refusedButPlainRuns(ctx, t, pod, "CreateContainer (annotated, no nsdelegate)", "nsdelegate")
}

// guardCgroupWritable (S06): with containerd's cgroup_writable = true on a
// host without nsdelegate, a container can raise its own memory.max to max
// unless cgdelegate is there; with cgdelegate it is refused.
func guardCgroupWritable(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	if e.variant.NSDelegate || e.variant.Plugin != variant.PluginExternal {
		t.Fatalf("variant %s: this scenario needs no nsdelegate and an external plugin", e.variant.Name)
	}
	ctx := scenarioCtx(t)
	// The default runtime when the variant turned cgroup_writable on for it,
	// else the extra runtime that always has it.
	handler := writableHandler
	if e.variant.CgroupWritable {
		handler = ""
	}

	// Baseline: the threat is real here without cgdelegate.
	if err := e.plugin.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	restart := e.restartPluginOnce(ctx, t)
	base := e.runPod(ctx, t, cri.PodSpec{Name: "baseline", RuntimeHandler: handler})
	bc := runContainer(ctx, t, base, sleeper("baseline", 64<<20))
	r := sh(ctx, t, bc, raiseScript)
	t.Logf("without cgdelegate: %s", strings.ReplaceAll(strings.TrimSpace(r.Stdout), "\n", "; "))
	if !strings.Contains(r.Stdout, "AFTER=max") {
		t.Errorf("baseline: expected cgroup_writable without nsdelegate to let the container raise memory.max to max; the harness does not reproduce the threat")
	}
	if err := base.Remove(); err != nil {
		t.Fatal(err)
	}
	restart()

	// With cgdelegate (guard: enforce, the default).
	pod := e.runPod(ctx, t, cri.PodSpec{Name: "guarded", RuntimeHandler: handler})
	c, err := pod.RunContainer(ctx, sleeper("guarded", 64<<20))
	if err == nil {
		r := sh(ctx, t, c, raiseScript)
		t.Fatalf("cgdelegate did not refuse a runtime-writable container on a host without nsdelegate; inside: %s", r.Stdout)
	}
	requireErrContains(t, "CreateContainer (cgroup_writable, no nsdelegate)", err, "nsdelegate")
	t.Logf("refusal seen by the CRI client: %v", err)
}
