//go:build integration_guest

package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/inspect"
	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/oracle"
)

// The pinning oracle (KubeletPinningOracle): the manifests
// testdata/pods/oracle-*.yaml run twice under the real kubelet, once with
// the kubelet's own pod-level resource managers doing the pinning and
// cgdelegate's pinning off, once with the kubelet's CPU manager at none and
// cgdelegate pinning; integration/internal/oracle compares what the containers saw.

const (
	// oracleReserved is reservedSystemCPUs of the kubelet and reservedCPUs
	// of cgdelegate.
	oracleReserved = "0"
	// oracleReservedMemory is what NUMA node 0 keeps back for the system:
	// reservedMemory of the kubelet's Static memory manager (it refuses to
	// start with none) and of cgdelegate.
	oracleReservedMemory = "64Mi"
	// markOracle precedes one manifest's two observations on the console.
	markOracle = "CGD-ORACLE "
	// podLogDir is the kubelet's podLogsRootDirectory (its default).
	podLogDir = "/var/log/pods"
)

// oracleAllowed are the differences cgdelegate has on purpose; docs/cpu-pinning.md
// ("Compared with the kubelet's pod-level resource managers") says the
// same. Every other difference fails the scenario.
var oracleAllowed = []oracle.Allowance{
	// A Guaranteed pod without a bubble (fractional CPUs): the kubelet's
	// Static memory manager pins its memory to one NUMA node although its
	// CPUs float over the node shared pool; cgdelegate narrows memory only
	// with CPUs, so the pages stay local to wherever the CPUs run.
	{Manifest: "oracle-fractional", Container: "*", Field: "memNodes", Kubelet: "1", Cgdelegate: "2", Why: whyMemWithCPUs},
	{Manifest: "oracle-fractional", Container: "*", Field: "memsAligned", Kubelet: "false", Cgdelegate: "true", Why: whyMemWithCPUs},
	// A bubble over two NUMA nodes: the kubelet gives every container the
	// pod's memory nodes; cgdelegate gives a pinned container the nodes of
	// its own CPUs, so an exclusive container on one node allocates there.
	{Manifest: "oracle-wide", Container: "*", Field: "memNodes", Kubelet: "2", Cgdelegate: "1", Why: whyMemPerContainer},
	{Manifest: "oracle-wide", Container: "*", Field: "memsAligned", Kubelet: "false", Cgdelegate: "true", Why: whyMemPerContainer},
	{Manifest: "oracle-all-cpus", Container: "*", Field: "memNodes", Kubelet: "2", Cgdelegate: "1", Why: whyMemPerContainer},
	{Manifest: "oracle-all-cpus", Container: "*", Field: "memsAligned", Kubelet: "false", Cgdelegate: "true", Why: whyMemPerContainer},
	// A container without CPUs in a pod whose budget is all exclusive: the
	// kubelet refuses the pod (empty pod shared pool); cgdelegate runs the
	// container in the node shared pool, the exclusive ones as the kubelet
	// would have.
	{Manifest: "oracle-empty-shared", Field: "admitted", Kubelet: "false", Cgdelegate: "true", Why: whyEphemeral},
	{Manifest: "oracle-empty-shared", Container: "shared", Field: "class", Kubelet: "refused", Cgdelegate: "node-shared", Why: whyEphemeral},
	{Manifest: "oracle-empty-shared", Container: "*", Field: "class", Kubelet: "refused", Cgdelegate: "exclusive", Why: whyEphemeral},
}

const (
	whyMemWithCPUs     = "cgdelegate narrows cpuset.mems only together with CPUs (a bubble); the kubelet's Static memory manager also pins the memory of a Guaranteed pod whose CPUs are shared"
	whyMemPerContainer = "cgdelegate gives a pinned container the memory nodes of its own CPUs; the kubelet gives every container the pod's memory nodes"
	whyEphemeral       = "NRI can not tell an ephemeral container (kubectl debug, which the kubelet runs in the node shared pool and never refuses) " +
		"from a regular one without CPUs: cgdelegate runs such a container in the node shared pool when its pod's bubble is all exclusive, " +
		"where the kubelet refuses a pod with a regular one at admission"
)

// oracleKubeletConfig is the kubelet's configuration for one pass: the
// same reserved CPUs and feature gates in both; with static, the static
// CPU manager, the Static memory manager (so that containers' memory nodes
// are the kubelet's choice too, as cgdelegate's are) and the topology
// manager in pod scope with the best-effort policy. best-effort because it
// is cgdelegate's rule: a bubble goes on the fewest NUMA nodes that hold
// it, and a pod too large for one node is spread, not refused (restricted
// and single-numa-node refuse it, which cgdelegate has no option for).
func (e *guestEnv) oracleKubeletConfig(static bool) kubelet.Config {
	c := e.kubeletConfig()
	c.ReservedSystemCPUs = oracleReserved
	c.FeatureGates = map[string]bool{"PodLevelResourceManagers": true}
	if static {
		c.CPUManagerPolicy = "static"
		c.TopologyManagerPolicy, c.TopologyManagerScope = "best-effort", "pod"
		c.MemoryManagerPolicy = "Static"
		c.ReservedMemory = []kubelet.MemoryReservation{{NUMANode: 0, Memory: oracleReservedMemory}}
	}
	return c
}

// oraclePass is one configuration of the node.
type oraclePass struct {
	name       string // kubelet or cgdelegate: who pins
	pluginYAML string
	kubelet    kubelet.Config
}

func (e *guestEnv) oraclePasses() []oraclePass {
	off := e.variant
	off.Pinning = false
	return []oraclePass{
		{name: "kubelet", pluginYAML: pluginConfigYAML(off), kubelet: e.oracleKubeletConfig(true)},
		{
			name: "cgdelegate", kubelet: e.oracleKubeletConfig(false),
			pluginYAML: pluginConfigYAML(e.variant) + "reservedCPUs: \"" + oracleReserved + "\"\n" +
				"reservedMemory: \"0:memory=" + oracleReservedMemory + "\"\n",
		},
	}
}

// kubeletPinningOracle runs every oracle manifest in both passes, prints
// each manifest's two observations (CGD-ORACLE {json}) and fails on a
// difference of shape that oracleAllowed does not explain.
func kubeletPinningOracle(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	if !e.variant.Kubelet || !e.variant.NUMA {
		t.Fatalf("variant %s: the oracle needs a kubelet and two NUMA nodes", e.variant.Name)
	}
	if err := oracle.Validate(oracleAllowed); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 44*time.Minute)
	defer cancel()
	reserved, err := cpuset.Parse(oracleReserved)
	if err != nil {
		t.Fatal(err)
	}
	topo := oracle.Topology{Nodes: nodeCPUs(t), Reserved: reserved}
	manifests := oracleManifests(t)
	t.Cleanup(func() { e.oracleRestore(t) })

	obs := map[string]map[string]oracle.Observation{} // pass -> manifest -> observation
	for _, pass := range e.oraclePasses() {
		k := e.oracleReconfigure(ctx, t, pass)
		obs[pass.name] = map[string]oracle.Observation{}
		for _, p := range manifests {
			o := e.oracleObserve(ctx, t, k, p)
			t.Logf("%s pins %s: %s", pass.name, p.Name, describeObservation(o))
			obs[pass.name][p.Name] = o
		}
	}

	var failed []oracle.Difference
	var allExplained []oracle.Explained
	for _, p := range manifests {
		ko, co := obs["kubelet"][p.Name], obs["cgdelegate"][p.Name]
		ks, err := oracle.Normalise(ko, topo)
		if err != nil {
			t.Fatalf("kubelet pass: %v", err)
		}
		cs, err := oracle.Normalise(co, topo)
		if err != nil {
			t.Fatalf("cgdelegate pass: %v", err)
		}
		un, ex := oracle.Explain(oracle.Compare(ks, cs), oracleAllowed)
		failed, allExplained = append(failed, un...), append(allExplained, ex...)
		line, err := json.Marshal(map[string]any{
			"manifest": p.Name, "kubelet": ko, "cgdelegate": co,
			"differences": strs(un), "explained": explainedStrs(ex),
		})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%s%s\n", markOracle, line)
	}
	for _, x := range allExplained {
		t.Logf("differs on purpose: %s (%s)", x.Difference, x.Why)
	}
	for _, d := range failed {
		t.Errorf("cgdelegate differs from the kubelet: %s", d)
	}
	b, err := json.Marshal(map[string]any{
		"scenario": "KubeletPinningOracle", "name": "pinning_oracle",
		"values": map[string]float64{
			"manifests": float64(len(manifests)), "unexplained": float64(len(failed)), "explained": float64(len(allExplained)),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", markMetric, b)
}

func strs(ds []oracle.Difference) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

func explainedStrs(xs []oracle.Explained) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

func describeObservation(o oracle.Observation) string {
	if !o.Admitted {
		return "refused: " + o.Reason
	}
	var parts []string
	for _, c := range o.Containers {
		parts = append(parts, fmt.Sprintf("%s(%s) cpus=%s mems=%s cpu.max=%q", c.Name, c.Role, c.CPUs, c.Mems, c.CPUMax))
	}
	return strings.Join(parts, "; ")
}

// oracleManifests decodes testdata/pods/oracle-*.yaml in their number
// order (oracle-<n>-<what>.yaml).
func oracleManifests(t *testing.T) []*corev1.Pod {
	t.Helper()
	files, err := fs.Glob(podManifests, "testdata/pods/oracle-*.yaml")
	if err != nil || len(files) < 8 {
		t.Fatalf("oracle manifests: %d found (%v), want at least 8", len(files), err)
	}
	num := func(f string) int {
		n, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(f), "oracle-"), "-", 2)[0])
		return n
	}
	slices.SortFunc(files, func(a, b string) int { return num(a) - num(b) })
	out := make([]*corev1.Pod, len(files))
	for i, f := range files {
		out[i] = loadPod(t, filepath.Base(f))
	}
	return out
}

// oracleReconfigure stops the kubelet, forgets its resource managers'
// checkpoints (the kubelet refuses to start when the policy in
// cpu_manager_state or memory_manager_state is not its own), restarts
// cgdelegate with the pass's config and starts the kubelet with the pass's.
func (e *guestEnv) oracleReconfigure(ctx context.Context, t *testing.T, pass oraclePass) *kubeletEnv {
	t.Helper()
	e.stopKubelet(t)
	if err := writeFile(e.paths.PluginYAML, pass.pluginYAML); err != nil {
		t.Fatal(err)
	}
	if err := e.restartPlugin(ctx); err != nil {
		t.Fatalf("%s pass: restart cgdelegate: %v", pass.name, err)
	}
	start := time.Now()
	if err := e.startKubelet(pass.kubelet); err != nil {
		e.kubeletErr = err
		t.Fatalf("%s pass: kubelet: %v", pass.name, err)
	}
	t.Logf("%s pass: cgdelegate config %q, kubelet cpuManagerPolicy=%s memoryManagerPolicy=%q topologyManager=%s/%s, started in %s",
		pass.name, pass.pluginYAML, pass.kubelet.CPUManagerPolicy, pass.kubelet.MemoryManagerPolicy,
		pass.kubelet.TopologyManagerPolicy, pass.kubelet.TopologyManagerScope, time.Since(start).Round(100*time.Millisecond))
	return e.kubelet
}

// stopKubelet stops a running kubelet and removes its CPU and memory
// manager checkpoints.
func (e *guestEnv) stopKubelet(t *testing.T) {
	t.Helper()
	if e.kubelet != nil {
		if err := e.kubelet.daemon.Stop(20 * time.Second); err != nil {
			t.Errorf("stop the kubelet: %v", err)
		}
	}
	e.kubelet, e.kubeletErr = nil, nil
	for _, f := range []string{"cpu_manager_state", "memory_manager_state"} {
		if err := os.Remove(filepath.Join(e.paths.KubeletRoot, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("remove the kubelet's %s: %v", f, err)
		}
	}
}

// oracleRestore leaves the node as the variant booted it: no kubelet (the
// next Kubelet scenario starts its own) and cgdelegate with the variant's
// config.
func (e *guestEnv) oracleRestore(t *testing.T) {
	e.stopKubelet(t)
	e.restorePluginConfig(t)
}

// oracleObserve runs one manifest until the pod is admitted (every
// container running, init containers completed) or refused, records what
// each container sees, and removes the pod again.
func (e *guestEnv) oracleObserve(ctx context.Context, t *testing.T, k *kubeletEnv, p *corev1.Pod) oracle.Observation {
	t.Helper()
	logFrom := fileSize(e.paths.PluginLog)
	sp, err := k.write(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := k.remove(rctx, e, sp); err != nil {
			t.Errorf("remove %s: %v", sp.Full, err)
		}
		// The next manifest must find the node empty: wait for the
		// sandbox to stop too (cgdelegate returns the bubble then).
		if err := e.waitSandboxStopped(rctx, sp.Full); err != nil {
			t.Errorf("remove %s: %v", sp.Full, err)
		}
	}()
	o := oracle.Observation{Manifest: p.Name}
	var last *corev1.Pod
	deadline := time.Now().Add(6 * time.Minute)
	for {
		kp, err := k.client.Pod(ctx, staticNamespace, sp.Full)
		if err == nil && kp != nil {
			last = kp
			if reason, refused := refusal(kp); refused {
				o.Reason = reason
				return o
			}
			if admitted(kp) {
				break
			}
		}
		if reason := pluginRefusal(e.paths.PluginLog, logFrom, sp.Full); reason != "" {
			o.Reason = reason
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: neither admitted nor refused after 6 min: %s; containerd: %s", sp.Full, kubelet.Describe(last), e.describeContainers(ctx, sp.Full))
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Updates of shared pools are sent after the event that changed them;
	// let them land.
	time.Sleep(2 * time.Second)
	o.Admitted = true
	for _, c := range p.Spec.InitContainers {
		if isSidecar(c) {
			o.Containers = append(o.Containers, e.oracleView(ctx, t, last, c.Name, oracle.RoleSidecar))
			continue
		}
		o.Containers = append(o.Containers, initView(t, last, c.Name))
	}
	for _, c := range p.Spec.Containers {
		o.Containers = append(o.Containers, e.oracleView(ctx, t, last, c.Name, oracle.RoleApp))
	}
	return o
}

// waitSandboxStopped waits until containerd has no ready sandbox of the
// kubelet pod called full.
func (e *guestEnv) waitSandboxStopped(ctx context.Context, full string) error {
	for {
		resp, err := e.cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
			LabelSelector: map[string]string{labelPodName: full, labelPodNamespace: staticNamespace},
		}})
		if err == nil && len(resp.GetItems()) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("sandbox of %s: %w (last: %w)", full, ctx.Err(), err)
			}
			return fmt.Errorf("sandbox of %s still ready: %w", full, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// oracleView reads a running container's view from inside it.
func (e *guestEnv) oracleView(ctx context.Context, t *testing.T, p *corev1.Pod, name string, role oracle.Role) oracle.Container {
	t.Helper()
	var cs *corev1.ContainerStatus
	if role == oracle.RoleSidecar {
		cs = initStatus(p, name)
	} else {
		cs = kubelet.ContainerStatus(p, name)
	}
	if cs == nil {
		t.Fatalf("pod %s: no status of container %s", p.Name, name)
	}
	v := viewOf(ctx, t, e.kubeletContainer(ctx, t, withStatus(p, cs), name))
	return oracle.Container{Name: name, Role: role, CPUs: v.CPUs.String(), Mems: v.Mems.String(), CPUMax: v.CPUMax}
}

// withStatus returns p with cs among its container statuses, so that
// kubeletContainer finds a sidecar (whose status is an init container's).
func withStatus(p *corev1.Pod, cs *corev1.ContainerStatus) *corev1.Pod {
	if kubelet.ContainerStatus(p, cs.Name) != nil {
		return p
	}
	q := p.DeepCopy()
	q.Status.ContainerStatuses = append(q.Status.ContainerStatuses, *cs)
	return q
}

// initView is what a completed init container printed of its cgroup (the
// CPUS=, MEMS=, CPUMAX= lines of its command), read from the kubelet's
// container log.
func initView(t *testing.T, p *corev1.Pod, name string) oracle.Container {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(podLogDir, fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), name, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("init container %s of %s: no log in %s (%v)", name, p.Name, podLogDir, err)
	}
	b, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	m := inspect.Markers(criLogText(string(b)))
	if cg := inspect.CgroupPath(m["CG"]); cg != "/" {
		t.Fatalf("init container %s: /proc/self/cgroup path %q, want / (a private cgroup namespace); log:\n%s", name, cg, b)
	}
	return oracle.Container{Name: name, Role: oracle.RoleInit, CPUs: m["CPUS"], Mems: m["MEMS"], CPUMax: m["CPUMAX"]}
}

// criLogText strips the CRI log format's "<time> <stream> <tag> " prefix
// from every line.
func criLogText(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if f := strings.SplitN(l, " ", 4); len(f) == 4 {
			out = append(out, f[3])
		}
	}
	return strings.Join(out, "\n")
}

func initStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

// admitted reports whether every app container and sidecar runs and every
// other init container completed successfully.
func admitted(p *corev1.Pod) bool {
	for _, c := range p.Spec.InitContainers {
		cs := initStatus(p, c.Name)
		switch {
		case cs == nil:
			return false
		case isSidecar(c) && cs.State.Running == nil:
			return false
		case !isSidecar(c) && (cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0):
			return false
		}
	}
	for _, c := range p.Spec.Containers {
		if !kubelet.Running(p, c.Name) {
			return false
		}
	}
	return true
}

// refusal says why the kubelet refused the pod (phase Failed: its
// admission, "<reason>: <message>") or a container of it (waiting with a
// create error, whose message is the runtime's, e.g. cgdelegate's).
func refusal(p *corev1.Pod) (string, bool) {
	if p.Status.Phase == corev1.PodFailed {
		return p.Status.Reason + ": " + p.Status.Message, true
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && slices.Contains([]string{"CreateContainerError", "RunContainerError", "CreateContainerConfigError"}, w.Reason) {
			return fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message), true
		}
	}
	return "", false
}

// pluginRefusal is cgdelegate's "pod refused" log line for the pod (a
// RunPodSandbox it failed), after byte offset from of its log; "" if none.
func pluginRefusal(path string, from int64, full string) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < from {
		return ""
	}
	for _, l := range strings.Split(string(b[from:]), "\n") {
		if strings.Contains(l, "refused the pod "+staticNamespace+"/"+full) {
			return l
		}
	}
	return ""
}
