//go:build integration_guest

package guest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// previousInstallArgs are the helm install arguments after the chart that
// install the previous release as its own docs/deploying.md gave the
// command (`--set image.repository=REGISTRY/cgdelegate --wait`; the
// registry's plain HTTP and the timeout as chartArgs), with CPU pinning
// (CPU 0 reserved) as that chart takes it (config.cpuPinning,
// config.reservedCPUs), so that a pinned pod runs across the upgrade.
func previousInstallArgs(r *variant.Registry, prev variant.Release) []string {
	return append(registryArgs(r, prev), "--set", "config.cpuPinning=true", "--set-string", "config.reservedCPUs=0")
}

// resetThenReuseArgs are the helm upgrade arguments after the chart that
// move the release to rel's chart as docs/deploying.md gives the command
// now: the new chart's defaults and the values the release was given
// over them (--reset-then-reuse-values), not the old chart's defaults.
func resetThenReuseArgs(rel variant.Release) []string {
	return append(chartArgs(rel), "--reset-then-reuse-values")
}

// clusterUpgradeFromPrevious: the upgrade path from the previous release
// (the registry's Previous, built by the harness from a pinned commit).
// helm install of its chart as its docs gave it, with pinning; a
// writable pod and a pinned pod started under its plugin; helm upgrade to
// this code's first release with --reset-then-reuse-values while they
// run. The DaemonSet's pod runs the first release's digest with the
// release's values (pinning still active), the running pods keep their
// delegated cgroup, its bounds and their CPUs, and a new writable pod
// starts writable; the window (the old plugin's connection closed to the
// new one synchronized) is reported. helm uninstall at the end (the node
// label gone), so that ClusterRegistryInstall installs as always: the
// scenario runs before anything else installs cgdelegate.
func clusterUpgradeFromPrevious(t *testing.T, e *guestEnv) {
	if e.variant.Plugin != variant.PluginHelm {
		t.Fatalf("scenario needs cgdelegate installed with helm; variant %s runs it %s", e.variant.Name, e.variant.Plugin)
	}
	e.requireCluster(t)
	r := e.requireRegistry(t)
	if r.Previous == nil {
		t.Fatalf("the registry (%s) holds no previous release: the harness pushes it only for a variant that runs %s", variant.RegistryFile, variant.ClusterUpgradeFromPrevious)
	}
	if e.helm != nil || e.pluginErr != nil {
		t.Fatalf("cgdelegate is already installed (or was uninstalled): put %s before every other scenario that installs it", variant.ClusterUpgradeFromPrevious)
	}
	prev, next := *r.Previous, r.Releases[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t.Cleanup(e.pluginLogFrom(t))

	// The previous release, as its docs installed it.
	from := fileSize(e.paths.ContainerdLog)
	start := time.Now()
	args := append([]string{"install", helmRelease, chartRef(r)}, previousInstallArgs(r, prev)...)
	if _, err := helmCmd(ctx, args...); err != nil {
		t.Fatalf("%v\n%s", err, e.describeDaemonSet(ctx))
	}
	installed := time.Since(start)
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 3*time.Minute, pluginBack, func() error { return nil }); err != nil {
		t.Fatalf("the previous release's plugin never connected: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	registered := time.Since(start)
	t.Logf("helm %s: %s; its plugin registered after %s", strings.Join(args, " "), installed.Round(100*time.Millisecond), registered.Round(100*time.Millisecond))
	uninstall := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		if _, err := helmCmd(ctx, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", "5m"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, e.describeDaemonSet(ctx))
		}
	}
	assertDSRelease(ctx, t, e, r, prev)

	// The running workloads, under the previous release's plugin.
	wl := startKeptWorkloads(ctx, t, e, "previous")
	ns := "previous"
	var keep corev1.Pod
	if err := getJSON(ctx, &keep, "-n", ns, "pod", "keep"); err != nil {
		uninstall()
		t.Fatal(err)
	}
	keepCg := e.kubeletPodCgroup(t, e.kubelet, &keep)

	// The upgrade, as docs/deploying.md gives it now.
	from = fileSize(e.paths.ContainerdLog)
	started := time.Now()
	upgradeDone := make(chan error, 1)
	go func() {
		_, err := helmCmd(ctx, append([]string{"upgrade", helmRelease, chartRef(r)}, resetThenReuseArgs(next)...)...)
		upgradeDone <- err
	}()
	alive := func() error { return nil }
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 6*time.Minute, pluginGone, alive); err != nil {
		if err := <-upgradeDone; err != nil {
			t.Logf("helm upgrade: %v", err)
		}
		uninstall()
		t.Fatalf("the previous release's plugin never left: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	gone := time.Now()
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 6*time.Minute, pluginBack, alive); err != nil {
		if err := <-upgradeDone; err != nil {
			t.Logf("helm upgrade: %v", err)
		}
		uninstall()
		t.Fatalf("the new plugin never connected: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	window := time.Since(gone)
	if err := <-upgradeDone; err != nil {
		uninstall()
		t.Fatalf("helm upgrade from %s to %s: %v\n%s", prev.Chart, next.Chart, err, e.describeDaemonSet(ctx))
	}
	upgraded := time.Since(started)

	// This release runs, with the values the release was given.
	if st, err := helmStatus(ctx); err != nil || st.Revision != 2 || st.Chart != "cgdelegate-"+next.Chart {
		t.Errorf("after the upgrade: %+v (%v), want revision 2 of cgdelegate-%s", st, err, next.Chart)
	}
	assertDSRelease(ctx, t, e, r, next)
	if rep, raw := e.cgdelegateStatus(t); !rep.Supported || rep.Pinning == nil || !rep.Pinning.Active {
		t.Errorf("after the upgrade: supported %v, pinning %+v; want the install's values kept (pinning active):\n%s", rep.Supported, rep.Pinning, raw)
	}

	// The running pods kept everything; a new writable pod is writable.
	wl.check(ctx, t, "upgrade from the previous release")
	assertBoundsHold(ctx, t, wl.writable, keepCg)
	after := admissionPod("after", ns, true)
	if _, err := applyObject(ctx, after); err != nil {
		uninstall()
		t.Fatal(err)
	}
	newStart := time.Now()
	ap := waitNamespacedPod(ctx, t, ns, after.Name, "work", 4*time.Minute)
	newRunning := time.Since(newStart)
	c := e.kubeletContainer(ctx, t, ap, "work")
	assertWritableMount(ctx, t, c)
	assertDelegates(ctx, t, c)

	// Uninstalled, the node as ClusterRegistryInstall expects it: the
	// label withdrawn, the plugin's pod gone (helm uninstall --wait
	// waits for the DaemonSet, not for its pods) and its connection
	// closed.
	from = fileSize(e.paths.ContainerdLog)
	ustart := time.Now()
	uninstall()
	uninstalled := time.Since(ustart)
	e.waitLabelWithdrawn(ctx, t)
	var left []corev1.Pod
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer pcancel()
	if err := poll(pctx, time.Second, func() (bool, error) {
		pods, err := dsPods(pctx)
		left = pods
		return err == nil && len(pods) == 0, nil
	}); err != nil {
		t.Errorf("after helm uninstall: %d DaemonSet pods left (%v), want none\n%s", len(left), err, e.describeDaemonSet(ctx))
	}
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 2*time.Minute, pluginGone, alive); err != nil {
		t.Errorf("after helm uninstall cgdelegate's connection to containerd did not close: %v", err)
	}
	gonePods := time.Since(ustart)

	t.Logf("from %s (%s) to %s (%s): install %s, upgrade %s, plugin window %s, a new writable pod ran after %s, uninstall %s (the plugin's pod gone after %s)",
		prev.Chart, prev.Digest, next.Chart, next.Digest, installed.Round(100*time.Millisecond), upgraded.Round(100*time.Millisecond),
		window.Round(100*time.Millisecond), newRunning.Round(100*time.Millisecond), uninstalled.Round(100*time.Millisecond),
		gonePods.Round(100*time.Millisecond))
	clusterMetric(t, "ClusterUpgradeFromPrevious", "cluster_upgrade_from_previous", map[string]float64{
		"install_seconds": seconds(installed), "registered_seconds": seconds(registered),
		"upgrade_seconds": seconds(upgraded), "plugin_window_seconds": seconds(window),
		"writable_pod_running_seconds": seconds(newRunning), "uninstall_seconds": seconds(uninstalled),
		"plugin_pod_gone_seconds": seconds(gonePods),
	})
}
