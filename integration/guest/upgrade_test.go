//go:build integration_guest

package guest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// pluginGone and pluginBack match containerd's log lines for cgdelegate's
// connection closing and a (new) one synchronized.
func pluginGone(l string) bool {
	return strings.Contains(l, "connection to plugin") && strings.Contains(l, "cgdelegate") && strings.Contains(l, "closed")
}

func pluginBack(l string) bool {
	return strings.Contains(l, "cgdelegate") && strings.Contains(l, "connected and synchronized")
}

// clusterRegistryUpgrade: `helm upgrade` to the next release in the
// registry (another chart version whose appVersion names another image
// digest) while a writable pod and a pinned pod run, keeping the values
// set so far (--reuse-values), as a user types it. The DaemonSet rolls its pod onto
// the next release's digest; in the window without a plugin, a pod
// asking for a writable cgroup and requiring the plugin (fail closed)
// waits and starts, delegated, once the new plugin is up; pods that ask for nothing start throughout; the
// running pods keep their delegation and their CPUs. It reports the
// window (the old plugin's connection closed to the new one
// synchronized) and how long the waiting pod waited.
func clusterRegistryUpgrade(t *testing.T, e *guestEnv) {
	// plainPace spaces the plain pods: about the pace kubectl in the guest
	// gave them (8 s) when it ran there. At 3 s a four-CPU node under
	// emulation had 47 pods starting beside the rollout, which then took
	// 3.5 minutes instead of 1.5, and their deletion passed its 90 s.
	const plainPace = 8 * time.Second
	e.requireHelmPlugin(t)
	r := e.requireRegistry(t)
	next := r.Releases[1]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Cleanup(e.pluginLogFrom(t))

	// The running workloads.
	wl := startKeptWorkloads(ctx, t, e, "upgrade")
	ns := "upgrade"

	// The upgrade, in the background.
	from := fileSize(e.paths.ContainerdLog)
	started := time.Now()
	upgradeDone := make(chan error, 1)
	go func() {
		_, err := helmCmd(ctx, append([]string{"upgrade", helmRelease, chartRef(r)}, upgradeArgs(next)...)...)
		upgradeDone <- err
	}()

	// Pods that ask for nothing, one every plainPace until the new
	// plugin is up: each must start.
	var plainMu sync.Mutex
	var plain []string
	stopPlain := make(chan struct{})
	plainDone := make(chan struct{})
	go func() {
		defer close(plainDone)
		for i := 0; ; i++ {
			p := admissionPod(fmt.Sprintf("during-%d", i), clusterNamespace, false)
			if _, err := applyObject(ctx, p); err != nil {
				t.Errorf("pod %s during the upgrade: %v", p.Name, err)
			} else {
				plainMu.Lock()
				plain = append(plain, p.Name)
				plainMu.Unlock()
			}
			select {
			case <-stopPlain:
				return
			case <-time.After(plainPace):
			}
		}
	}()
	t.Cleanup(func() {
		plainMu.Lock()
		defer plainMu.Unlock()
		deletePods(t, clusterNamespace, plain...)
	})

	// The window: the old plugin gone, then a writable pod requiring it.
	alive := func() error { return nil }
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 6*time.Minute, pluginGone, alive); err != nil {
		t.Fatalf("the old plugin's connection never closed: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	gone := time.Now()
	waiting := admissionPod("waits", ns, true)
	if _, err := applyObject(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 6*time.Minute, pluginBack, alive); err != nil {
		t.Fatalf("the new plugin never connected: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	window := time.Since(gone)
	close(stopPlain)
	<-plainDone
	if err := <-upgradeDone; err != nil {
		t.Fatalf("%v\n%s", err, e.describeDaemonSet(ctx))
	}
	upgraded := time.Since(started)

	wp := waitNamespacedPod(ctx, t, ns, waiting.Name, "work", 4*time.Minute)
	waited := time.Since(gone)
	assertWritableMount(ctx, t, e.kubeletContainer(ctx, t, wp, "work"))

	assertDSRelease(ctx, t, e, r, next)
	plainMu.Lock()
	names := append([]string(nil), plain...)
	plainMu.Unlock()
	for _, name := range names {
		waitNamespacedPod(ctx, t, clusterNamespace, name, "work", 3*time.Minute)
	}

	// The running pods kept everything.
	wl.check(ctx, t, "upgrade")
	t.Logf("upgrade: %s; plugin window %s; the fail-closed pod ran %s after the old plugin left; %d plain pods started during it",
		upgraded.Round(100*time.Millisecond), window.Round(100*time.Millisecond), waited.Round(100*time.Millisecond), len(names))
	clusterMetric(t, "ClusterRegistryUpgrade", "cluster_registry_upgrade", map[string]float64{
		"upgrade_seconds": seconds(upgraded), "plugin_window_seconds": seconds(window),
		"failclosed_pod_running_seconds": seconds(waited), "plain_pods": float64(len(names)),
	})
	if pods, err := dsPods(ctx); err == nil && len(pods) == 1 {
		clusterMetric(t, "ClusterRegistryUpgrade", "plugin_pod_start", podStartSeconds(&pods[0]))
	}
}

// admissionNamespace creates a namespace labelled to allow writable
// cgroups, deleted when the test ends, and returns its name. The deletion
// is not waited for: no two scenarios use the same namespace.
func admissionNamespace(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	ns := &corev1.Namespace{}
	ns.APIVersion, ns.Kind, ns.Name = "v1", "Namespace", name
	ns.Labels = map[string]string{"cgdelegate.io/writable-cgroups": "allowed"}
	if _, err := applyObject(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := kubectl(ctx, nil, "delete", "namespace", name, "--wait=false"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return name
}

// deletePods deletes pods of namespace and waits for them to go (they
// stop in a second: TerminationGracePeriodSeconds 1). The wait is long
// for a guest on a loaded host, where a dozen pods took past 90 s to go
// (twice, never on a quiet one); the time it took is logged.
func deletePods(t *testing.T, namespace string, names ...string) {
	t.Helper()
	if len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	args := append([]string{"-n", namespace, "delete", "pod"}, names...)
	if _, err := kubectl(ctx, nil, append(args, "--wait=true", "--timeout=200s")...); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	t.Logf("cleanup: %d pods deleted in %s", len(names), time.Since(start).Round(100*time.Millisecond))
}
