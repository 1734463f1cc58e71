//go:build integration_guest

package guest

// The runtime side of the install from the chart (runtimeConfig.install):
// the init container install-nri-config writes containerd's NRI drop-in and
// restarts containerd.service through systemd's private socket, on a node
// whose containerd ran without it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgdelegate/cgdelegate/contrib"
	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

const (
	// containerdUnit is containerd's systemd unit as containerd ships it
	// (containerd.service in its repository), with the suite's binary,
	// config and log; ClusterRuntimeDropIn moves containerd into it.
	containerdUnit     = "containerd.service"
	containerdUnitFile = "/run/systemd/system/" + containerdUnit
	// containerdStarting is containerd's log line at each start.
	containerdStarting = `msg="starting containerd"`
	// installNRIConfig is the chart's init container (runtimeConfig.install).
	installNRIConfig = "install-nri-config"
	// noNodeSelector is a node selector no node has: the DaemonSet's pod
	// goes, as when an operator takes cgdelegate off a node.
	noNodeSelector = "cgdelegate.test/no-such-node"
	// chartMetricsPort is the chart's metrics.port.
	chartMetricsPort = "9767"
)

// containerdUnitText is containerd's shipped unit (Type=notify, Delegate,
// KillMode=process: the shims, and the containers, survive a restart) with
// the suite's paths: the guest's binary, its config, its log file (the
// scenarios read containerd's log there).
func containerdUnitText(binary, cfg, logPath string) string {
	return `# Written by the cgdelegate integration suite (ClusterRuntimeDropIn):
# containerd's own containerd.service, with the suite's binary, config and log.
[Unit]
Description=containerd container runtime
After=network.target dbus.service

[Service]
ExecStart=` + binary + ` --config ` + cfg + `
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999
StandardOutput=append:` + logPath + `
StandardError=inherit
`
}

// clusterRuntimeDropIn: the node's containerd runs as containerd.service
// with containerd 2.x's default import of /etc/containerd/conf.d/*.toml
// (`containerd config default`, which kubeadm's setup tells users to
// write) and no cgdelegate drop-in: the plugin says it does not fail
// closed (cgdelegate status, cgdelegate_fail_closed 0, the node annotation
// off). On the same node with no import, `cgdelegate install-nri-config`
// fails naming the fix. Without the drop-in, a request that times out
// creates a pod that asks without cgdelegate, and the pod gets a
// CgroupDelegationMissed Event (requestTimeoutEvent). `helm upgrade --set runtimeConfig.install=true`:
// the init container writes the drop-in, restarts containerd once through
// systemd, and the plugin then says enforced in all three. A pod that asks
// for a writable cgroup, bound to the node while the plugin ran, has its
// container refused by containerd's default validator while the plugin is
// off the node (its DaemonSet's node selector matches no node), with the
// error naming cgdelegate; a plain pod starts; with the plugin back (its
// init container restarts nothing this time) the refused container starts
// writable. containerd stays in containerd.service, with the drop-in, for
// the rest of the boot.
func clusterRuntimeDropIn(t *testing.T, e *guestEnv) {
	e.requireHelmPlugin(t)
	r := e.requireRegistry(t)
	if !e.variant.Systemd || !e.variant.Cluster {
		t.Fatalf("variant %s: this scenario needs systemd as PID 1 and the cluster", e.variant.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t.Cleanup(e.pluginLogFrom(t))
	rel, err := currentRelease(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	// The engines image's import runs in the background on the harness's
	// containerd; a restart would cut it.
	if e.engines != nil {
		select {
		case <-e.engines.done:
		case <-ctx.Done():
			t.Fatal("the engines image's import did not end")
		}
	}
	start := time.Now()

	// 1. A config with no import: install-nri-config names the fix.
	plain := e.variant
	plain.FailClosed = false
	if err := writeFile(e.paths.ContainerdConfig, containerdConfig(plain)); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, e.paths.PluginBinary, "install-nri-config", "-runtime", "containerd", "-restart=false").CombinedOutput()
	var exitErr *exec.ExitError
	// The log's text format escapes the quotes of imports = ["..."].
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 || !strings.Contains(string(out), "does not import "+containerdDropIn) ||
		!strings.Contains(string(out), "add imports = [") || !strings.Contains(string(out), config.ContainerdImport) {
		t.Errorf("install-nri-config with a config.toml that imports nothing: %v, want exit 1 naming the import to add:\n%s", err, out)
	} else {
		t.Logf("install-nri-config with a config.toml that imports nothing: %v: %s", err, strings.TrimSpace(string(out)))
	}

	// 2. containerd's default import, no drop-in, containerd in its unit.
	if err := os.Remove(containerdDropIn); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err := writeFile(e.paths.ContainerdConfig, containerdConfig(plain, config.ContainerdImport)); err != nil {
		t.Fatal(err)
	}
	if err := e.moveContainerdToUnit(ctx); err != nil {
		t.Fatal(err)
	}
	moved := time.Since(start)
	// The chart's metrics, for cgdelegate_fail_closed; the new pod reads
	// containerd's new config at its Configure.
	pod := e.helmUpgradeTo(ctx, t, r, rel, "--set", "metrics.enabled=true")
	e.waitFailClosed(ctx, t, pod, status.FailClosedOff)
	// Without the drop-in, a request that times out creates the pod
	// without cgdelegate; the pod gets an Event saying so.
	eventAfter := e.requestTimeoutEvent(ctx, t, pod)

	// 3. The drop-in from the chart.
	invocation := unitProperty(ctx, t, "InvocationID")
	from := fileSize(e.paths.ContainerdLog)
	upgradeStart := time.Now()
	pod = e.helmUpgradeTo(ctx, t, r, rel, "--set", "runtimeConfig.install=true")
	installed := time.Since(upgradeStart)
	if b, err := os.ReadFile(containerdDropIn); err != nil || string(b) != contrib.ContainerdDropIn {
		t.Errorf("%s after the install (%v):\n%s\nwant contrib/containerd/cgdelegate.toml", containerdDropIn, err, b)
	}
	if n := countLog(t, e.paths.ContainerdLog, from, containerdStarting); n != 1 {
		t.Errorf("containerd started %d times during the install, want once (the init container's restart)", n)
	}
	if now := unitProperty(ctx, t, "InvocationID"); now == invocation {
		t.Errorf("%s kept its invocation %s: not restarted", containerdUnit, now)
	}
	initLog := initContainerLog(ctx, t, pod)
	for _, want := range []string{"restarting the runtime to load the drop-in", "runtime restarted"} {
		if !strings.Contains(initLog, want) {
			t.Errorf("%s's log lacks %q:\n%s", installNRIConfig, want, initLog)
		}
	}
	e.waitFailClosed(ctx, t, pod, status.FailClosedEnforced)

	// 4. A pod that asks, bound to the node while the plugin runs, its
	// container created once the plugin is gone.
	ns := admissionNamespace(t, ctx, "dropin")
	asks := admissionPod("asks", ns, true)
	asks.Spec.InitContainers = []corev1.Container{{
		Name: "gate", Image: "cgd.local/busybox:1", ImagePullPolicy: corev1.PullNever,
		Command: []string{"sh", "-c", "until [ -e /tmp/go ]; do sleep 1; done"},
	}}
	if _, err := applyObject(ctx, asks); err != nil {
		t.Fatal(err)
	}
	waitInitRunning(ctx, t, ns, asks.Name, "gate")

	from = fileSize(e.paths.ContainerdLog)
	stopped := time.Now()
	t.Cleanup(func() { e.patchDSNodeSelector(context.Background(), t, "null") })
	e.patchDSNodeSelector(ctx, t, `"true"`)
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 3*time.Minute, pluginGone, func() error { return nil }); err != nil {
		t.Fatalf("cgdelegate did not leave the node: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	if err := poll(ctx, time.Second, func() (bool, error) { p, err := dsPods(ctx); return err == nil && len(p) == 0, nil }); err != nil {
		t.Fatalf("the DaemonSet's pod is still there: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	if res, err := kubectl(ctx, nil, "-n", ns, "exec", asks.Name, "-c", "gate", "--", "touch", "/tmp/go"); err != nil {
		t.Fatalf("open the gate: %v: %s", err, res)
	}
	refused := waitRefused(ctx, t, ns, asks.Name, "work", `required plugin "cgdelegate"`)
	t.Logf("pod %s/%s with cgdelegate off the node: %s: %s", ns, asks.Name, refused.Reason, refused.Message)
	plainPod := admissionPod("plain", ns, false)
	if _, err := applyObject(ctx, plainPod); err != nil {
		t.Fatal(err)
	}
	waitNamespacedPod(ctx, t, ns, plainPod.Name, "work", 3*time.Minute)
	if p := (&corev1.Pod{}); getJSON(ctx, p, "-n", ns, "pod", asks.Name) == nil && kubelet.Running(p, "work") {
		t.Errorf("pod %s asking for a writable cgroup runs without cgdelegate: %s", asks.Name, describePod(p))
	}
	off := time.Since(stopped)

	// 5. The plugin back: its init container restarts nothing, the
	// refused container starts writable.
	from = fileSize(e.paths.ContainerdLog)
	back := time.Now()
	e.patchDSNodeSelector(ctx, t, "null")
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 4*time.Minute, pluginBack, func() error { return nil }); err != nil {
		t.Fatalf("cgdelegate did not come back: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	wp := waitNamespacedPod(ctx, t, ns, asks.Name, "work", 4*time.Minute)
	ran := time.Since(back)
	assertWritableMount(ctx, t, e.kubeletContainer(ctx, t, wp, "work"))
	if n := countLog(t, e.paths.ContainerdLog, from, containerdStarting); n != 0 {
		t.Errorf("containerd started %d times when the plugin came back, want none (the drop-in was in force)", n)
	}
	pods, err := dsPods(ctx)
	if err != nil || len(pods) != 1 {
		t.Fatalf("the DaemonSet's pods after its return: %d (%v), want 1\n%s", len(pods), err, e.describeDaemonSet(ctx))
	}
	if l := initContainerLog(ctx, t, &pods[0]); !strings.Contains(l, "no restart") {
		t.Errorf("%s's log, the drop-in in force, lacks \"no restart\":\n%s", installNRIConfig, l)
	}
	clusterMetric(t, "ClusterRuntimeDropIn", "cluster_runtime_dropin", map[string]float64{
		"containerd_unit_seconds": seconds(moved), "install_seconds": seconds(installed),
		"plugin_off_seconds": seconds(off), "refused_pod_running_seconds": seconds(ran),
		"missed_event_seconds": seconds(eventAfter), "scenario_seconds": seconds(time.Since(start)),
	})
}

// currentRelease is the registry's release the helm release runs.
func currentRelease(ctx context.Context, r *variant.Registry) (variant.Release, error) {
	st, err := helmStatus(ctx)
	if err != nil {
		return variant.Release{}, err
	}
	for _, rel := range r.Releases {
		if st.Chart == "cgdelegate-"+rel.Chart {
			return rel, nil
		}
	}
	return variant.Release{}, fmt.Errorf("helm release %s runs chart %s, none of the registry's", helmRelease, st.Chart)
}

// moveContainerdToUnit stops the harness's containerd (its shims and
// containers keep running) and starts the same binary and config as
// containerd.service, as a node's containerd runs; restartContainerd
// refuses from then on.
func (e *guestEnv) moveContainerdToUnit(ctx context.Context) error {
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	if err := writeFile(containerdUnitFile, containerdUnitText(bin, e.paths.ContainerdConfig, e.paths.ContainerdLog)); err != nil {
		return err
	}
	if err := e.containerd.Stop(30 * time.Second); err != nil {
		return err
	}
	e.containerdUnit = true
	for _, args := range [][]string{{"daemon-reload"}, {"start", containerdUnit}} {
		if out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl %s: %w: %s\n%s", strings.Join(args, " "), err, out, fileTail(e.paths.ContainerdLog, 30))
		}
	}
	if _, err := e.cri.WaitReady(ctx); err != nil {
		return fmt.Errorf("containerd in %s: %w\n%s", containerdUnit, err, fileTail(e.paths.ContainerdLog, 30))
	}
	return nil
}

// unitProperty is a property of containerd.service (systemctl show).
func unitProperty(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "systemctl", "show", "-p", name, "--value", containerdUnit).Output()
	if err != nil {
		t.Fatalf("systemctl show %s %s: %v", name, containerdUnit, err)
	}
	return strings.TrimSpace(string(out))
}

// helmUpgradeTo is `helm upgrade --reuse-values` to rel with set, and the
// DaemonSet's new pod once its plugin has connected.
func (e *guestEnv) helmUpgradeTo(ctx context.Context, t *testing.T, r *variant.Registry, rel variant.Release, set ...string) *corev1.Pod {
	t.Helper()
	from := fileSize(e.paths.ContainerdLog)
	if _, err := helmCmd(ctx, append([]string{"upgrade", helmRelease, chartRef(r)}, upgradeArgs(rel, set...)...)...); err != nil {
		t.Fatalf("helm upgrade %v: %v\n%s", set, err, e.describeDaemonSet(ctx))
	}
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 3*time.Minute, pluginBack, func() error { return nil }); err != nil {
		t.Fatalf("helm upgrade %v: the plugin never connected: %v\n%s", set, err, e.describeDaemonSet(ctx))
	}
	pods, err := dsPods(ctx)
	if err != nil || len(pods) != 1 {
		t.Fatalf("the DaemonSet's pods after helm upgrade %v: %d (%v), want 1\n%s", set, len(pods), err, e.describeDaemonSet(ctx))
	}
	return &pods[0]
}

// waitFailClosed waits until the plugin of pod says want in its three
// places: cgdelegate status on the node, its Node's annotation and
// cgdelegate_fail_closed on its /metrics (the chart's metrics.enabled).
func (e *guestEnv) waitFailClosed(ctx context.Context, t *testing.T, pod *corev1.Pod, want string) {
	t.Helper()
	wantMetric := 0.0
	if want == status.FailClosedEnforced {
		wantMetric = 1
	}
	var got struct {
		status, annotation string
		metric             float64
		err                error
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := poll(ctx, 2*time.Second, func() (bool, error) {
		got.err = nil
		rep, _ := e.cgdelegateStatus(t)
		if got.status = "none"; rep.FailClosed != nil {
			got.status = rep.FailClosed.State
		}
		if n, err := getNode(ctx, e.nodeName()); err == nil {
			got.annotation = n.Annotations[advert.FailClosedAnnotation]
		}
		p := &corev1.Pod{}
		if got.err = getJSON(ctx, p, "-n", helmNamespace, "pod", pod.Name); got.err == nil {
			got.metric, got.err = podMetric(ctx, p.Status.PodIP, metrics.FailClosed)
		}
		return got.status == want && got.annotation == want && got.err == nil && got.metric == wantMetric, nil
	})
	if err != nil {
		t.Fatalf("fail-closed: status %q, node annotation %s=%q, %s = %v (%v); want %s, %s and %v within 2 minutes",
			got.status, advert.FailClosedAnnotation, got.annotation, metrics.FailClosed, got.metric, got.err, want, want, wantMetric)
	}
	rep, _ := e.cgdelegateStatus(t)
	t.Logf("fail-closed %s in cgdelegate status, the node annotation and %s = %v: %s", want, metrics.FailClosed, wantMetric, rep.FailClosed.Reason)
}

// podMetric reads one sample of the plugin pod's /metrics, at its pod IP.
func podMetric(ctx context.Context, ip, name string) (float64, error) {
	if ip == "" {
		return 0, errors.New("the plugin's pod has no IP yet")
	}
	url := "http://" + net.JoinHostPort(ip, chartMetricsPort) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	samples, err := parseSamples(strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	v, ok := samples[name]
	if !ok {
		return 0, fmt.Errorf("GET %s: no %s", url, name)
	}
	return v, nil
}

// initContainerLog is install-nri-config's log in pod, as kubectl logs
// shows it.
func initContainerLog(ctx context.Context, t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	out, err := kubectl(ctx, nil, "-n", helmNamespace, "logs", pod.Name, "-c", installNRIConfig)
	if err != nil {
		t.Errorf("kubectl logs %s -c %s: %v", pod.Name, installNRIConfig, err)
	}
	return string(out)
}

// countLog counts the lines of path after byte offset from that contain s.
func countLog(t *testing.T, path string, from int64, s string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if from > int64(len(b)) {
		from = 0
	}
	return strings.Count(string(b[from:]), s)
}

// patchDSNodeSelector sets the DaemonSet's noNodeSelector to value (JSON;
// null removes it).
func (e *guestEnv) patchDSNodeSelector(ctx context.Context, t *testing.T, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	patch := `{"spec":{"template":{"spec":{"nodeSelector":{"` + noNodeSelector + `":` + value + `}}}}}`
	if _, err := kubectl(ctx, nil, "-n", helmNamespace, "patch", "daemonset", helmRelease, "--type", "merge", "-p", patch); err != nil {
		t.Errorf("patch the DaemonSet's node selector %s: %v", value, err)
	}
}

// waitInitRunning waits until init container name of pod namespace/pod runs.
func waitInitRunning(ctx context.Context, t *testing.T, namespace, pod, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last *corev1.Pod
	err := poll(ctx, time.Second, func() (bool, error) {
		p := &corev1.Pod{}
		if err := getJSON(ctx, p, "-n", namespace, "pod", pod); err != nil {
			return false, nil
		}
		last = p
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == name && s.State.Running != nil {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: init container %s not running: %v: %s", namespace, pod, name, err, describePod(last))
	}
}

// waitRefused waits until container of pod namespace/pod waits with a
// message containing want, and returns that state; it fails if the
// container runs.
func waitRefused(ctx context.Context, t *testing.T, namespace, pod, container, want string) *corev1.ContainerStateWaiting {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last *corev1.Pod
	var w *corev1.ContainerStateWaiting
	err := poll(ctx, time.Second, func() (bool, error) {
		p := &corev1.Pod{}
		if err := getJSON(ctx, p, "-n", namespace, "pod", pod); err != nil {
			return false, nil
		}
		last = p
		cs := kubelet.ContainerStatus(p, container)
		if cs != nil && cs.State.Running != nil {
			return false, fmt.Errorf("container %s runs", container)
		}
		if cs != nil && cs.State.Waiting != nil && strings.Contains(cs.State.Waiting.Message, want) {
			w = cs.State.Waiting
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: want container %s refused with %q: %v: %s", namespace, pod, container, want, err, describePod(last))
	}
	return w
}

// requestTimeoutEvent plays the request timeout on a node without the
// drop-in: cgdelegate's processes stopped (SIGSTOP) while a pod that asks
// for a writable cgroup is created, so containerd's NRI request times out,
// containerd closes the plugin's connection and creates the pod without
// it: its container runs with the runtime's read-only /sys/fs/cgroup, and
// the kubelet says nothing. Let go, the plugin reconnects; its
// Synchronize finds the container and posts a CgroupDelegationMissed
// Event on the pod, which `kubectl get events` shows. It returns how long
// the Event took from the plugin's return.
func (e *guestEnv) requestTimeoutEvent(ctx context.Context, t *testing.T, plugin *corev1.Pod) time.Duration {
	t.Helper()
	ns := admissionNamespace(t, ctx, "timeout")
	id, err := kubelet.ContainerID(kubelet.ContainerStatus(plugin, dsPluginContainer))
	if err != nil {
		t.Fatal(err)
	}
	pids := containerProcs(t, id)
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Errorf("signal %v to cgdelegate (pid %d): %v", sig, pid, err)
			}
		}
	}
	from := fileSize(e.paths.ContainerdLog)
	signal(syscall.SIGSTOP)
	stopped := true
	resume := func() {
		if stopped {
			stopped = false
			signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	missed := admissionPod("missed", ns, true)
	if _, err := applyObject(ctx, missed); err != nil {
		t.Fatal(err)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			deletePods(t, ns, missed.Name)
		}
	})
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 3*time.Minute, pluginGone, func() error { return nil }); err != nil {
		t.Fatalf("containerd never timed cgdelegate out: %v\n%s", err, fileTail(e.paths.ContainerdLog, 20))
	}
	wp := waitNamespacedPod(ctx, t, ns, missed.Name, "work", 4*time.Minute)
	if m, _ := cgroupMount(ctx, t, e.kubeletContainer(ctx, t, wp, "work")); !m.ReadOnly() {
		t.Errorf("the container created without cgdelegate has /sys/fs/cgroup %s, want the runtime's read-only mount", m)
	}
	from = fileSize(e.paths.ContainerdLog)
	back := time.Now()
	resume()
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 3*time.Minute, pluginBack, func() error { return nil }); err != nil {
		t.Fatalf("cgdelegate did not reconnect after the timeout: %v\n%s", err, e.describeDaemonSet(ctx))
	}
	var ev struct {
		Items []struct {
			Reason    string `json:"reason"`
			Note      string `json:"note"`
			Regarding struct {
				Name      string `json:"name"`
				FieldPath string `json:"fieldPath"`
			} `json:"regarding"`
			ReportingController string `json:"reportingController"`
		} `json:"items"`
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err = poll(wctx, 2*time.Second, func() (bool, error) {
		if err := getJSON(wctx, &ev, "-n", ns, "events.v1.events.k8s.io"); err != nil {
			return false, nil
		}
		for _, it := range ev.Items {
			if it.Regarding.Name == missed.Name && it.Reason == advert.ReasonDelegationMissed {
				t.Logf("Event on pod %s/%s (%s, from %s): %s: %s", ns, missed.Name, it.Regarding.FieldPath, it.ReportingController, it.Reason, it.Note)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		out, _ := kubectl(ctx, nil, "-n", ns, "get", "events")
		t.Fatalf("no %s Event on pod %s/%s after the plugin reconnected: %v\n%s", advert.ReasonDelegationMissed, ns, missed.Name, err, out)
	}
	took := time.Since(back)
	deleted = true
	deletePods(t, ns, missed.Name)
	return took
}

// containerProcs are the processes in the cgroup of container id (its
// cgroup's name holds the ID under either cgroup driver).
func containerProcs(t *testing.T, id string) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup")); err == nil && strings.Contains(string(b), id) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no process in the cgroup of container %s", id)
	}
	return pids
}
