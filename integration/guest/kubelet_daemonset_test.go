//go:build integration_guest

package guest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/inspect"
	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// The DaemonSet's pod: its container names in contrib/kubernetes/daemonset.yaml.
const (
	dsPluginContainer = "cgdelegate"
	dsInitContainer   = "install-hook"
	// dsConfig is the plugin's -config in the DaemonSet, the same path on
	// the node (manifests.StaticPod).
	dsConfig = "/etc/cgdelegate/config.yaml"
)

// Deadlines of the DaemonSet scenarios, longer than scenarioCtx's: the
// first one deploys the pod too.
const (
	dsDeployTimeout   = 8 * time.Minute
	dsScenarioTimeout = 12 * time.Minute
)

// dsScenarioCtx is a DaemonSet scenario's deadline.
func dsScenarioCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), dsScenarioTimeout)
	t.Cleanup(cancel)
	return ctx
}

// daemonSetPlugin is cgdelegate running as the kubelet's static pod
// rendered from the shipped DaemonSet.
type daemonSetPlugin struct {
	sp        *staticPod
	namespace string
	image     string
	// imported is the name `ctr images import` gave the release image,
	// ociimage.DefaultRepo:<version>.
	imported string
	// hookSum is the sha256 of the hook the host had before the pod ran
	// (the same build as the image's), removed so that the pod's init
	// container is what puts it back.
	hookSum string
}

// requireDaemonSetPlugin returns cgdelegate's static pod, deploying it with
// the kubelet on first use, and fails the scenario if it does not run.
func (e *guestEnv) requireDaemonSetPlugin(ctx context.Context, t *testing.T) (*kubeletEnv, *daemonSetPlugin) {
	t.Helper()
	if e.variant.Plugin != variant.PluginDaemonSet {
		t.Fatalf("scenario needs cgdelegate as the DaemonSet's pod; variant %s runs it %s", e.variant.Name, e.variant.Plugin)
	}
	k := e.requireKubelet(t)
	if e.dsPlugin == nil && e.pluginErr == nil {
		start := time.Now()
		// Its own deadline: importing 35 MB and starting two containers
		// under TCG on a loaded host took up to 4 minutes.
		dctx, cancel := context.WithTimeout(ctx, dsDeployTimeout)
		defer cancel()
		e.dsPlugin, e.pluginErr = e.deployDaemonSet(dctx, k)
		t.Logf("DaemonSet pod deployed in %s (err %v)", time.Since(start).Round(100*time.Millisecond), e.pluginErr)
	}
	if e.pluginErr != nil {
		t.Fatalf("cgdelegate as the DaemonSet's pod: %v", e.pluginErr)
	}
	return k, e.dsPlugin
}

// deployDaemonSet runs the shipped DaemonSet's pod as a static pod and
// waits until the kubelet runs it and cgdelegate has registered with
// containerd.
func (e *guestEnv) deployDaemonSet(ctx context.Context, k *kubeletEnv) (*daemonSetPlugin, error) {
	hook, err := os.ReadFile(e.paths.HookBinary)
	if err != nil {
		return nil, fmt.Errorf("the host's hook before the pod: %w", err)
	}
	sum := sha256.Sum256(hook)
	st, imported, err := e.prepareDaemonSet(ctx)
	if err != nil {
		return nil, err
	}
	image, err := podImage(&st.Pod)
	if err != nil {
		return nil, err
	}
	from := fileSize(e.paths.ContainerdLog)
	sp, err := k.write(&st.Pod)
	if err != nil {
		return nil, err
	}
	ds := &daemonSetPlugin{sp: sp, namespace: st.Pod.Namespace, image: image, imported: imported, hookSum: hex.EncodeToString(sum[:])}
	err = waitLog(ctx, e.paths.ContainerdLog, from, dsDeployTimeout, func(l string) bool {
		return strings.Contains(l, "cgdelegate") && strings.Contains(l, "connected and synchronized")
	}, func() error {
		if !k.daemon.Running() {
			return errors.New("the kubelet exited")
		}
		return nil
	})
	if err != nil {
		// ds stays set, so that dumpLogs prints the pod's container logs.
		p, _ := k.client.Pod(ctx, ds.namespace, sp.Full)
		return ds, fmt.Errorf("cgdelegate's pod did not register with containerd: %w\nkubelet: %s\n--- containerd log ---\n%s\n--- kubelet log ---\n%s",
			err, kubelet.Describe(p), fileTail(e.paths.ContainerdLog, 20), fileTail(e.paths.KubeletLog, 30))
	}
	return ds, nil
}

// dsPod waits until the kubelet reports the plugin container running with
// more than minRestarts restarts, and returns the pod.
func (k *kubeletEnv) dsPod(ctx context.Context, t *testing.T, ds *daemonSetPlugin, minRestarts int32) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	p, err := k.client.WaitPod(ctx, ds.namespace, ds.sp.Full, 250*time.Millisecond, func(p *corev1.Pod) (bool, error) {
		cs := kubelet.ContainerStatus(p, dsPluginContainer)
		return cs != nil && cs.State.Running != nil && cs.RestartCount >= minRestarts, nil
	})
	if err != nil {
		t.Fatalf("cgdelegate's pod running (restarts >= %d): %v", minRestarts, err)
	}
	return p
}

// containerPIDs are the host PIDs in the cgroup of the kubelet pod's
// container (cgroupfs driver: <pod cgroup>/<container ID>).
func (e *guestEnv) containerPIDs(t *testing.T, k *kubeletEnv, p *corev1.Pod, name string) []int {
	t.Helper()
	id, err := kubelet.ContainerID(kubelet.ContainerStatus(p, name))
	if err != nil {
		t.Fatal(err)
	}
	procs := readCgroupFile(t, filepath.Join(e.kubeletPodCgroup(t, k, p), id), "cgroup.procs")
	var pids []int
	for _, f := range strings.Fields(procs) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("cgroup.procs of %s: %q", name, procs)
		}
		pids = append(pids, pid)
	}
	if len(pids) == 0 {
		t.Fatalf("container %s of %s has no processes", name, p.Name)
	}
	return pids
}

// procArgs is the command line of pid.
func procArgs(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// nodeStatus runs `cgdelegate status` on the node with the DaemonSet's
// config, as an operator would.
func (e *guestEnv) nodeStatus(t *testing.T) (status.Report, string) {
	t.Helper()
	return e.cgdelegateStatus(t, "-config", dsConfig)
}

// assertNodeSupported checks `cgdelegate status` on the node: supported,
// published by pid, no warnings, and the NFD feature file says true.
func (e *guestEnv) assertNodeSupported(t *testing.T, pid int) {
	t.Helper()
	rep, raw := e.nodeStatus(t)
	if !rep.Supported || rep.PluginPID != pid || len(rep.Warnings) > 0 || rep.Runtime == nil || rep.Runtime.Name != "containerd" {
		t.Errorf("cgdelegate status on the node: supported %v, pluginPID %d (want %d), runtime %+v, warnings %q, problems %q:\n%s",
			rep.Supported, rep.PluginPID, pid, rep.Runtime, rep.Warnings, rep.Problems, raw)
	}
	if e.variant.Pinning && (rep.Pinning == nil || !rep.Pinning.Active) {
		t.Errorf("cgdelegate status: pinning %s, want active:\n%s", pinningWord(rep.Pinning), raw)
	}
	// No capabilities and the runtime's default seccomp profile: pid 1's
	// root is out of reach, so the whole table, with the reason.
	requireMountCheck(t, rep, raw, false)
	b, err := os.ReadFile(rep.Config.FeatureFile)
	if err != nil || !slices.Contains(strings.Split(string(b), "\n"), "cgdelegate.io/supports-cgroup-options=true") {
		t.Errorf("NFD feature file %s: %q (%v), want supports-cgroup-options=true", rep.Config.FeatureFile, b, err)
	}
}

// requiringPod is one of the scenario manifests renamed, with the
// annotation the cluster policy requires of every pod that asks for a
// writable cgroup, so that NRI's validator holds it while cgdelegate is
// away.
func requiringPod(t *testing.T, file, name string) *corev1.Pod {
	t.Helper()
	p := loadPod(t, file)
	p.Name = name
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[requiredPluginsAnnotation] = requiredCgdelegate
	return p
}

// runWritable runs writable.yaml as name and checks it got a writable
// cgroup and the pod bounds; it returns the pod and its container.
func (e *guestEnv) runWritable(ctx context.Context, t *testing.T, k *kubeletEnv, name string) (*corev1.Pod, *cri.Container) {
	t.Helper()
	p := requiringPod(t, "writable.yaml", name)
	sp := k.run(t, e, p)
	kp := k.waitRunning(ctx, t, sp, kubeletPodNames(p)...)
	c := e.kubeletContainer(ctx, t, kp, p.Spec.Containers[0].Name)
	assertWritableMount(ctx, t, c)
	e.assertKubeletBounds(t, k, kp)
	return kp, c
}

// assertKubeletBounds checks that the pod cgroup the kubelet made carries
// cgdelegate's bounds.
func (e *guestEnv) assertKubeletBounds(t *testing.T, k *kubeletEnv, p *corev1.Pod) {
	t.Helper()
	dir := e.kubeletPodCgroup(t, k, p)
	for _, f := range []string{"cgroup.max.descendants", "cgroup.max.depth"} {
		if v := readCgroupFile(t, dir, f); v == "max" {
			t.Errorf("pod %s: %s = max, want cgdelegate's bound", p.Name, f)
		}
	}
}

// kubeletDaemonSetPod: cgdelegate deployed as it ships. The release image,
// imported with ctr and tagged as the DaemonSet's image, runs as the
// static pod rendered from contrib/kubernetes/daemonset.yaml under the
// kubelet, with containerd loading contrib/containerd/cgdelegate.toml: the
// init container installs the hook on the host, the image's entrypoint
// runs the plugin with the DaemonSet's args, an annotated pod gets a
// writable cgroup and bounds through it, and `cgdelegate status` on the
// node reads the status and feature files from the host paths.
func kubeletDaemonSetPod(t *testing.T, e *guestEnv) {
	ctx := dsScenarioCtx(t)
	e.logPluginDrops(t)
	k, ds := e.requireDaemonSetPlugin(ctx, t)
	p := k.dsPod(ctx, t, ds, 0)
	t.Logf("kubelet: %s", kubelet.Describe(p))
	if cs := kubelet.ContainerStatus(p, dsPluginContainer); cs.RestartCount > 0 {
		// Why it restarted before the scenario did anything: the earlier
		// runs' logs (the kubelet keeps <n>.log per restart).
		logs, _ := filepath.Glob("/var/log/pods/" + ds.namespace + "_" + ds.sp.Full + "_*/" + dsPluginContainer + "/*.log")
		for _, f := range logs {
			t.Logf("%s (restarted %d times), tail of %s:\n%s", dsPluginContainer, cs.RestartCount, f, fileTail(f, 8))
		}
	}

	// The init container ran the hook install and put the image's hook
	// (the host's own build) back where hookPath says.
	if len(p.Status.InitContainerStatuses) != 1 {
		t.Fatalf("init containers %+v, want %s", p.Status.InitContainerStatuses, dsInitContainer)
	}
	if is := p.Status.InitContainerStatuses[0]; is.Name != dsInitContainer || is.State.Terminated == nil || is.State.Terminated.ExitCode != 0 {
		t.Errorf("init container %s: %+v, want terminated with exit 0", is.Name, is.State)
	}
	hook, err := os.ReadFile(e.paths.HookBinary)
	if err != nil {
		t.Fatalf("the init container did not install the hook: %v", err)
	}
	if sum := sha256.Sum256(hook); hex.EncodeToString(sum[:]) != ds.hookSum {
		t.Errorf("installed hook sha256 %x, want the image's %s", sum, ds.hookSum)
	}
	if st, err := os.Stat(e.paths.HookBinary); err != nil || st.Mode().Perm()&0o111 == 0 {
		t.Errorf("installed hook %s: %v, mode %v: not executable", e.paths.HookBinary, err, st.Mode())
	}

	// The plugin is the image's entrypoint with the DaemonSet's args, in
	// the host PID namespace, from the image's root file system.
	cs := kubelet.ContainerStatus(p, dsPluginContainer)
	img, err := e.cri.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ds.image}})
	if err != nil || img.GetImage() == nil {
		t.Fatalf("the DaemonSet's image %s is not in the CRI image store: %v", ds.image, err)
	}
	if id := img.GetImage().GetId(); id == "" || !strings.HasSuffix(cs.ImageID, id) {
		t.Errorf("container %s runs image %s (%s), want the DaemonSet's %s (%s, tags %q)", dsPluginContainer, cs.Image, cs.ImageID, ds.image, id, img.GetImage().GetRepoTags())
	}
	pids := e.containerPIDs(t, k, p, dsPluginContainer)
	if len(pids) != 1 {
		t.Errorf("cgdelegate's container has processes %v, want one", pids)
	}
	args := procArgs(t, pids[0])
	want := append([]string{"/usr/local/bin/cgdelegate"}, p.Spec.Containers[0].Args...)
	if !slices.Equal(args, want) {
		t.Errorf("the plugin runs %q, want the image's entrypoint with the DaemonSet's args %q", args, want)
	}
	// It runs the image's binary in the container's mount namespace, not
	// the host's /usr/local/bin/cgdelegate.
	mine, err1 := os.Readlink("/proc/self/ns/mnt")
	its, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pids[0]))
	if err1 != nil || err2 != nil || mine == its {
		t.Errorf("the plugin's mount namespace %s (%v), the node's %s (%v): want its own", its, err2, mine, err1)
	}
	// It runs with the DaemonSet's reduced privileges, not privileged.
	assertSecurityContext(t, pids[0], p.Spec.Containers[0].SecurityContext)
	// The image's binary is the build the image is labelled with.
	_, wantVersion, _ := strings.Cut(ds.imported, ":")
	if out, err := exec.Command(fmt.Sprintf("/proc/%d/exe", pids[0]), "-version").Output(); err != nil || strings.TrimSpace(string(out)) != "cgdelegate "+wantVersion {
		t.Errorf("the image's cgdelegate -version: %q (%v), want cgdelegate %s (the imported tag %s)", out, err, wantVersion, ds.imported)
	}
	exe, err1 := os.Stat(fmt.Sprintf("/proc/%d/exe", pids[0]))
	host, err2 := os.Stat(e.paths.PluginBinary)
	if err1 != nil || err2 != nil || os.SameFile(exe, host) {
		t.Errorf("the plugin's executable (%v) is the node's %s (%v), want the image's", err1, e.paths.PluginBinary, err2)
	}

	// containerd runs with the shipped drop-in merged in: NRI's default
	// validator on, no global required plugins.
	dump, err := exec.CommandContext(ctx, "containerd", "--config", e.paths.ContainerdConfig, "config", "dump").Output()
	if err != nil {
		t.Fatalf("containerd config dump: %v", err)
	}
	section := validatorSection(string(dump))
	t.Logf("containerd's merged default_validator: %q", section)
	if !slices.Contains(section, "enable = true") ||
		slices.ContainsFunc(section, func(l string) bool { return strings.HasPrefix(l, "required_plugins") && l != "required_plugins = []" }) {
		t.Errorf("containerd's merged config does not import %s as written (validator on, nothing required globally):\n%s", containerdDropIn, dump)
	}

	kp, c := e.runWritable(ctx, t, k, "ds-writable")
	r := sh(ctx, t, c, delegateScript)
	if m := inspect.Markers(r.Stdout); m["MEMSET"] != "ok" || m["MOVE"] != "ok" || m["CHILDCG"] != "0::/limited" {
		t.Errorf("delegation in %s: %s", kp.Name, r)
	}
	e.assertNodeSupported(t, pids[0])
}

// kubeletPluginPodRestart: cgdelegate's process in its pod is killed
// (SIGKILL, a crash). The kubelet restarts the container, the plugin
// reconnects and rebuilds its state from the runtime, and nothing loses
// what it was given: the writable pod keeps its delegated cgroup, a pinned
// pod (with cpuPinning) keeps its cpusets, and a new annotated pod is
// admitted writable.
func kubeletPluginPodRestart(t *testing.T, e *guestEnv) {
	ctx := dsScenarioCtx(t)
	e.logPluginDrops(t)
	k, ds := e.requireDaemonSetPlugin(ctx, t)
	k.dsPod(ctx, t, ds, 0) // running before the workloads start

	kw, w := e.runWritable(ctx, t, k, "ds-keep")
	shOK(ctx, t, w, "mkdir /sys/fs/cgroup/keep && echo 5 > /sys/fs/cgroup/keep/pids.max 2>/dev/null; echo kept > /tmp/marker")
	var budget *corev1.Pod
	var before map[string]cpuView
	if e.variant.Pinning {
		bp := loadPod(t, "pod-level.yaml")
		bp.Name = "ds-budget"
		sp := k.run(t, e, bp)
		budget = k.waitRunning(ctx, t, sp, kubeletPodNames(bp)...)
		before = e.kubeletViews(ctx, t, budget)
		if !before["exclusive"].exclusive() || before["exclusive"].CPUs.Size() != 1 {
			t.Fatalf("before the restart the pinned pod is not pinned: %v", before)
		}
	}

	// The pod as it is now: on a loaded TCG host containerd may have
	// dropped the plugin meanwhile (a request over the drop-in's 5 s
	// plugin_request_timeout); it reconnects by itself, and after repeated
	// drops exits and the kubelet restarts it.
	p := k.dsPod(ctx, t, ds, 0)
	restarts := kubelet.ContainerStatus(p, dsPluginContainer).RestartCount
	pids := e.containerPIDs(t, k, p, dsPluginContainer)
	from := fileSize(e.paths.ContainerdLog)
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill cgdelegate (pid %d): %v", pid, err)
		}
	}
	t.Logf("killed cgdelegate %v; waiting for the kubelet to restart it", pids)
	killed := time.Now()
	err := waitLog(ctx, e.paths.ContainerdLog, from, 5*time.Minute, func(l string) bool {
		return strings.Contains(l, "cgdelegate") && strings.Contains(l, "connected and synchronized")
	}, func() error { return nil })
	if err != nil {
		t.Fatalf("cgdelegate did not reconnect: %v\n%s", err, fileTail(e.paths.KubeletLog, 30))
	}
	p = k.dsPod(ctx, t, ds, restarts+1)
	t.Logf("cgdelegate back %.1fs after the kill: %s", time.Since(killed).Seconds(), kubelet.Describe(p))
	newPIDs := e.containerPIDs(t, k, p, dsPluginContainer)
	if slices.Equal(newPIDs, pids) {
		t.Fatalf("cgdelegate's PIDs %v did not change", pids)
	}

	// The writable pod kept everything, in the same container.
	kw2, err := k.client.Pod(ctx, staticNamespace, kw.Name)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := kubelet.ContainerStatus(kw, "work"), kubelet.ContainerStatus(kw2, "work"); b == nil || b.State.Running == nil || a.ContainerID != b.ContainerID || b.RestartCount != a.RestartCount {
		t.Errorf("the writable pod's container changed: %s -> %s", kubelet.Describe(kw), kubelet.Describe(kw2))
	}
	if out := shOK(ctx, t, w, "cat /tmp/marker; test -d /sys/fs/cgroup/keep && mkdir /sys/fs/cgroup/keep/again && echo ok"); !strings.Contains(out, "kept") || !strings.Contains(out, "ok") {
		t.Errorf("the writable pod lost its delegated cgroup: %q", out)
	}
	assertWritableMount(ctx, t, w)
	e.assertKubeletBounds(t, k, kw)

	if budget != nil {
		after := e.kubeletViews(ctx, t, budget)
		for name, b := range before {
			if a := after[name]; !a.CPUs.Equals(b.CPUs) || !a.Mems.Equals(b.Mems) || a.CPUMax != b.CPUMax {
				t.Errorf("pinned container %s changed across the restart: %s -> %s", name, b, a)
			}
		}
		t.Logf("pinned pod unchanged: %v", after)
	}

	e.runWritable(ctx, t, k, "ds-after")
	e.assertNodeSupported(t, newPIDs[0])
}

// kubeletViews is the cpu view of every container of the kubelet pod, by
// container name.
func (e *guestEnv) kubeletViews(ctx context.Context, t *testing.T, p *corev1.Pod) map[string]cpuView {
	t.Helper()
	out := map[string]cpuView{}
	for _, name := range kubeletPodNames(p) {
		out[name] = viewOf(ctx, t, e.kubeletContainer(ctx, t, p, name))
	}
	return out
}

// validatorSection is the lines of NRI's default_validator table in
// `containerd config dump`, trimmed.
func validatorSection(dump string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(dump, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "[") {
			in = strings.Contains(l, "io.containerd.nri.v1.nri") && strings.HasSuffix(l, ".default_validator]")
			continue
		}
		if in && l != "" {
			out = append(out, l)
		}
	}
	return out
}

// logPluginDrops logs, when the scenario ends, every time containerd
// closed cgdelegate's connection during it (a request over
// plugin_request_timeout), so spontaneous restarts of the pod are
// explained.
func (e *guestEnv) logPluginDrops(t *testing.T) {
	from := fileSize(e.paths.ContainerdLog)
	t.Cleanup(func() {
		b, err := os.ReadFile(e.paths.ContainerdLog)
		if err != nil || int64(len(b)) < from {
			return
		}
		for _, l := range strings.Split(string(b[from:]), "\n") {
			if strings.Contains(l, "closing plugin") || strings.Contains(l, "proceeding without it") {
				t.Logf("containerd dropped the plugin: %s", l)
			}
		}
	})
}

// capBits are the capabilities a DaemonSet container may add, by the name
// Kubernetes uses, as bits of /proc/<pid>/status Cap* (linux/capability.h).
var capBits = map[corev1.Capability]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "KILL": 5,
	"SYS_PTRACE": 19, "SYS_ADMIN": 21, "SYS_RESOURCE": 24,
}

// assertSecurityContext checks that process pid runs as sc says: with
// exactly the added capabilities when all are dropped, no_new_privs for
// allowPrivilegeEscalation: false, a seccomp filter for RuntimeDefault and
// a read-only root for readOnlyRootFilesystem. It logs the LSM label.
func assertSecurityContext(t *testing.T, pid int, sc *corev1.SecurityContext) {
	t.Helper()
	if sc == nil || (sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("the DaemonSet's plugin container is privileged (%+v), want least privilege", sc)
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			status[k] = strings.TrimSpace(v)
		}
	}
	if sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") {
		var want uint64
		for _, c := range sc.Capabilities.Add {
			bit, ok := capBits[c]
			if !ok {
				t.Fatalf("capability %s: add its bit to capBits", c)
			}
			want |= 1 << bit
		}
		for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
			got, err := strconv.ParseUint(status[f], 16, 64)
			if err != nil || got != want {
				t.Errorf("plugin %s = %q (%v), want %016x (drop ALL, add %v)", f, status[f], err, want, sc.Capabilities.Add)
			}
		}
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation && status["NoNewPrivs"] != "1" {
		t.Errorf("plugin NoNewPrivs = %q, want 1 (allowPrivilegeEscalation: false)", status["NoNewPrivs"])
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault && status["Seccomp"] != "2" {
		t.Errorf("plugin Seccomp = %q, want 2 (a filter: RuntimeDefault)", status["Seccomp"])
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		var rootOpts string
		for _, l := range strings.Split(string(mi), "\n") {
			// ID parent major:minor root mountpoint options ...
			if f := strings.Fields(l); len(f) > 5 && f[4] == "/" {
				rootOpts = f[5] // the last mount on / is what the process sees
			}
		}
		if !slices.Contains(strings.Split(rootOpts, ","), "ro") {
			t.Errorf("plugin root mounted %q, want ro (readOnlyRootFilesystem)", rootOpts)
		}
	}
	label, _ := os.ReadFile(fmt.Sprintf("/proc/%d/attr/current", pid))
	t.Logf("plugin runs with CapEff %s, NoNewPrivs %s, Seccomp %s, LSM label %q", status["CapEff"], status["NoNewPrivs"], status["Seccomp"], strings.TrimSpace(string(label)))
}
