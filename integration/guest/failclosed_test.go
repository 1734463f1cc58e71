//go:build integration_guest

package guest

import (
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// requiredPlugins is NRI's default validator's per-pod annotation, with the
// value contrib/kubernetes/writable-cgroups-policy.yaml requires.
const (
	requiredPluginsAnnotation = "required-plugins.noderesource.dev"
	requiredCgdelegate        = `["cgdelegate"]`
)

// failClosedPerPod: containerd runs with the shipped drop-in
// (contrib/containerd/cgdelegate.toml: the default validator on, no global
// required plugins). With cgdelegate stopped, an opted-in pod that requires
// cgdelegate gets no container, and the error names cgdelegate; a plain pod
// runs. With cgdelegate back, the same pod's container starts writable.
func failClosedPerPod(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	if !e.variant.FailClosed || e.variant.Plugin != variant.PluginExternal {
		t.Fatalf("variant %s: this scenario needs the fail-closed drop-in and an external plugin", e.variant.Name)
	}
	ctx := scenarioCtx(t)
	ann := writable()
	ann[requiredPluginsAnnotation] = requiredCgdelegate

	if err := e.plugin.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	restart := e.restartPluginOnce(ctx, t)

	pod := e.runPod(ctx, t, cri.PodSpec{Name: "required", Annotations: ann})
	// The default validator's words: `required plugin "cgdelegate" not present`.
	e.refusedButPlainRuns(ctx, t, pod, "CreateContainer (requires cgdelegate, cgdelegate stopped)", `required plugin "cgdelegate"`)

	restart()
	back := e.runPod(ctx, t, cri.PodSpec{Name: "back", Annotations: ann})
	assertWritableMount(ctx, t, runContainer(ctx, t, back, sleeper("writable", 0)))
}
