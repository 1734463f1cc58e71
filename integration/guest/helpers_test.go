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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/inspect"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/host"
)

// The opt-in annotation (pod scope, bare key).
const writableAnnotation = "writable-cgroups.noderesource.dev"

func writable() map[string]string { return map[string]string{writableAnnotation: "true"} }

// scenarioCtx is a per-scenario deadline.
func scenarioCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runPod runs a host-network pod that is removed when the test ends.
func (e *guestEnv) runPod(ctx context.Context, t *testing.T, spec cri.PodSpec) *cri.Pod {
	t.Helper()
	spec.Name = podName(t, spec.Name)
	spec.SystemdCgroup = e.variant.Systemd
	pod, err := e.cri.RunPod(ctx, spec)
	if err != nil {
		t.Fatalf("run pod: %v", err)
	}
	t.Cleanup(func() {
		// NotFound: the scenario removed the pod itself.
		if err := pod.Remove(); err != nil && status.Code(err) != codes.NotFound {
			t.Logf("cleanup: %v", err)
		}
	})
	return pod
}

// podName names a pod after the scenario (and subtest) that runs it: t.Name()
// without the TestScenarios/ runner.
func podName(t *testing.T, suffix string) string {
	_, name, _ := strings.Cut(t.Name(), "/")
	n := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(name))
	if suffix != "" {
		n += "-" + suffix
	}
	return n
}

// sleeper is a busybox container that just sleeps.
func sleeper(name string, memLimit int64) cri.ContainerSpec {
	return cri.ContainerSpec{Name: name, Image: busyboxImage, Command: []string{"sleep", "3600"}, MemoryLimit: memLimit}
}

// runContainer creates and starts a container, failing the test on error.
func runContainer(ctx context.Context, t *testing.T, pod *cri.Pod, spec cri.ContainerSpec) *cri.Container {
	t.Helper()
	c, err := pod.RunContainer(ctx, spec)
	if err != nil {
		t.Fatalf("run container: %v", err)
	}
	return c
}

// sh runs a script in the container and fails the test if ExecSync fails.
func sh(ctx context.Context, t *testing.T, c *cri.Container, script string) cri.ExecResult {
	t.Helper()
	r, err := c.Sh(ctx, script)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	return r
}

// shOK is sh that also requires exit status 0.
func shOK(ctx context.Context, t *testing.T, c *cri.Container, script string) string {
	t.Helper()
	r := sh(ctx, t, c, script)
	if r.ExitCode != 0 {
		t.Fatalf("script %q in %s: %s", script, c.Name, r)
	}
	return r.Stdout
}

// cgroupMount returns the container's visible /sys/fs/cgroup mount and all
// its cgroup2 mounts.
func cgroupMount(ctx context.Context, t *testing.T, c *cri.Container) (inspect.Mount, []inspect.Mount) {
	t.Helper()
	out := shOK(ctx, t, c, "cat /proc/self/mountinfo")
	mounts, err := inspect.ParseMountinfo(strings.NewReader(out))
	if err != nil {
		t.Fatalf("container mountinfo: %v", err)
	}
	m, ok := inspect.TopMount(mounts, "/sys/fs/cgroup")
	if !ok {
		t.Fatalf("no /sys/fs/cgroup mount in the container:\n%s", out)
	}
	return m, inspect.ByFSType(mounts, "cgroup2")
}

// podCgroup is the host path of the pod's cgroup, found from its cgroup
// parent as cgdelegate finds it (a systemd slice name is expanded).
func (e *guestEnv) podCgroup(pod *cri.Pod) string {
	rel, err := host.PodPath(pod.Spec.CgroupParent)
	if err != nil {
		// The suite made the parent; a bad one is a bug of the suite.
		panic(fmt.Sprintf("pod %s: %v", pod.Spec.Name, err))
	}
	return filepath.Join(e.paths.CgroupRoot, rel)
}

// readCgroupFile reads a file of a host cgroup, trimmed.
func readCgroupFile(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	return strings.TrimSpace(string(b))
}

// requireErrContains checks that err is non-nil and mentions every word.
func requireErrContains(t *testing.T, what string, err error, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded, want an error mentioning %q", what, words)
	}
	for _, w := range words {
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(w)) {
			t.Errorf("%s: error does not mention %q: %v", what, w, err)
		}
	}
}

// assertWritableMount checks an opted-in container's cgroup view.
func assertWritableMount(ctx context.Context, t *testing.T, c *cri.Container) {
	t.Helper()
	assertWritableMountIn(ctx, t, c, "/")
}

// assertWritableMountIn is assertWritableMount for a container whose execs
// land in the cgroup execIn of its namespace: "/init" once cgdelegate-init
// moved its processes to that leaf (docs/in-pod.md, the exec rule).
func assertWritableMountIn(ctx context.Context, t *testing.T, c *cri.Container, execIn string) {
	t.Helper()
	m, all := cgroupMount(ctx, t, c)
	if m.FSType != "cgroup2" || m.ReadOnly() || !m.HasSuperOpt("nsdelegate") || m.Root != "/" {
		t.Errorf("/sys/fs/cgroup = %s, want a rw cgroup2 mount of the namespace root with nsdelegate", m)
	}
	for _, o := range all {
		if o.Root != "/" {
			t.Errorf("cgroup2 mount %s exposes a cgroup outside the namespace", o)
		}
	}
	if got := inspect.CgroupPath(shOK(ctx, t, c, "cat /proc/self/cgroup")); got != execIn {
		t.Errorf("/proc/self/cgroup path = %q, want %s (private cgroup namespace)", got, execIn)
	}
}

// restartPluginOnce returns a function that starts the stopped plugin again,
// at most once; it also runs at cleanup, so a failing test never leaves the
// next scenario without the plugin.
func (e *guestEnv) restartPluginOnce(ctx context.Context, t *testing.T) func() {
	restarted := false
	restart := func() {
		if !restarted {
			restarted = true
			if err := e.startPlugin(ctx, fileSize(e.paths.ContainerdLog)); err != nil {
				t.Fatalf("restart cgdelegate: %v", err)
			}
		}
	}
	t.Cleanup(restart)
	return restart
}

// withPluginConfig restarts the external plugin with extra after the
// variant's config for the rest of the scenario; at its end (after the
// scenario's own cleanups, which were registered later) the plugin runs
// with the variant's config again.
func (e *guestEnv) withPluginConfig(ctx context.Context, t *testing.T, extra string) {
	t.Helper()
	if e.variant.Plugin != variant.PluginExternal || e.plugin == nil {
		t.Fatalf("variant %s: reconfiguring cgdelegate needs the external plugin, not %s", e.variant.Name, e.variant.Plugin)
	}
	if err := writeFile(e.paths.PluginYAML, pluginConfigYAML(e.variant)+extra); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.restorePluginConfig(t) })
	if err := e.restartPlugin(ctx); err != nil {
		t.Fatalf("restart cgdelegate with %q added to its config: %v", extra, err)
	}
}

// restorePluginConfig writes the variant's own plugin config and restarts
// the external plugin with it (a scenario's cleanup).
func (e *guestEnv) restorePluginConfig(t *testing.T) {
	t.Helper()
	if err := writeFile(e.paths.PluginYAML, pluginConfigYAML(e.variant)); err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.restartPlugin(ctx); err != nil {
		t.Errorf("cleanup: restart cgdelegate with the variant's config: %v", err)
	}
}
