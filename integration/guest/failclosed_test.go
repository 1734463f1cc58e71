//go:build integration_guest

package guest

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/status"
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

// checkFailClosedReport: the plugin says whether containerd enforces
// required-plugins, from containerd's config as the variant set it up:
// "enforced" where the harness imported the shipped drop-in (FailClosed),
// "off" elsewhere (containerd's own default), in `cgdelegate status` and in
// the readiness probe's line, which passes either way.
func checkFailClosedReport(t *testing.T, e *guestEnv) {
	t.Helper()
	want := status.FailClosedOff
	if e.variant.FailClosed {
		want = status.FailClosedEnforced
	}
	var rep status.Report
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		var raw string
		rep, raw = e.cgdelegateStatus(t)
		if rep.Runtime != nil && rep.FailClosed != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgdelegate status: no failClosed from a configured plugin in a minute:\n%s", raw)
		}
	}
	t.Logf("cgdelegate status: failClosed %s: %s", rep.FailClosed.State, rep.FailClosed.Reason)
	if rep.FailClosed.State != want {
		t.Errorf("cgdelegate status: failClosed %+v, want %s (variant FailClosed %v)", rep.FailClosed, want, e.variant.FailClosed)
	}
	out, err := exec.Command(e.paths.PluginBinary, "status", "-ready").CombinedOutput()
	t.Logf("cgdelegate status -ready: %s", strings.TrimSpace(string(out)))
	if err != nil || !strings.Contains(string(out), "; fail-closed "+want) {
		t.Errorf("cgdelegate status -ready: %v, %q; want ready with fail-closed %s", err, out, want)
	}
}
