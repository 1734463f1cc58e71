//go:build integration_guest

package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/inspect"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// The CPU pinning scenarios. They run in a variant booted with
// -smp 4 and two NUMA nodes (0-1 and 2-3) and cgdelegate started with
// cpuPinning: true; reservedCPUs is empty, and the policy keeps at least
// one CPU in the node shared pool, so at most 3 CPUs go to bubbles.
//
// What a container runs on is read inside it: a non-privileged container
// of containerd on cgroup v2 has its own cgroup namespace, so its
// /sys/fs/cgroup is its own cgroup (checked: /proc/self/cgroup is "0::/").
// The cpuset controller is there because runc enables every controller of
// the parent along the cgroupfs path it creates (the VM's /init enables all
// of them at the root); the scenarios check it in the pod cgroup's
// cgroup.subtree_control and the container's cgroup.controllers.

const (
	mib = 1 << 20
	// cfsPeriod is the kubelet's CFS period, µs.
	cfsPeriod = 100000
	// guaranteedOOMScoreAdj is what the kubelet gives a Guaranteed container.
	guaranteedOOMScoreAdj = -997
)

// requirePinning fails the scenario unless cgdelegate runs with pinning.
func (e *guestEnv) requirePinning(t *testing.T) {
	t.Helper()
	e.requirePlugin(t)
	if !e.variant.Pinning {
		t.Fatalf("variant %s runs cgdelegate without cpuPinning", e.variant.Name)
	}
}

// podResources are pod-level resources as a kubelet sends them in
// LinuxPodSandboxConfig.Resources for pod.spec.resources with a CPU request
// and limit of cpus and a 512 MiB memory limit.
func podResources(cpus int64) *runtimeapi.LinuxContainerResources {
	return &runtimeapi.LinuxContainerResources{
		CpuPeriod: cfsPeriod, CpuQuota: cpus * cfsPeriod, CpuShares: cpus * 1024, MemoryLimitInBytes: 512 * mib,
	}
}

// guaranteed is a Guaranteed container of one whole CPU (request == limit)
// with a memory limit, as the kubelet creates it.
func guaranteed(name string) cri.ContainerSpec {
	s := sleeper(name, 0)
	s.Resources = &runtimeapi.LinuxContainerResources{
		CpuPeriod: cfsPeriod, CpuQuota: cfsPeriod, CpuShares: 1024,
		MemoryLimitInBytes: 64 * mib, OomScoreAdj: guaranteedOOMScoreAdj,
	}
	return s
}

// burstable is a Burstable container: 500m request, 1 CPU limit.
func burstable(name string) cri.ContainerSpec {
	s := sleeper(name, 0)
	s.Resources = &runtimeapi.LinuxContainerResources{
		CpuPeriod: cfsPeriod, CpuQuota: cfsPeriod, CpuShares: 512, MemoryLimitInBytes: 64 * mib,
	}
	return s
}

// memoryOnly is a Burstable container with a memory limit and no CPU
// request or limit: it always runs in a shared pool.
func memoryOnly(name string) cri.ContainerSpec {
	s := sleeper(name, 0)
	s.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 2, MemoryLimitInBytes: 64 * mib}
	return s
}

// pluginLog checks the plugin's log from byte offset from (the start of
// the scenario): it logs every warning and error, and fails the scenario on
// a container update that failed twice in a row (checkPluginLog).
func (e *guestEnv) pluginLog(t *testing.T, from int64) {
	t.Helper()
	e.pluginLogExcept(t, from, nil)
}

// pluginLogExcept is pluginLog where expected, if not nil, tells the failed
// container updates a scenario causes on purpose: those are logged, not
// failed (checkPluginLogExcept).
func (e *guestEnv) pluginLogExcept(t *testing.T, from int64, expected func(line string) bool) {
	t.Helper()
	if e.variant.Plugin == variant.PluginPreregistered {
		// NRI starts a pre-registered plugin without stdout or stderr
		// (adaptation: exec.Command, nothing attached): there is no log.
		t.Logf("plugin log: none, the plugin is pre-registered (NRI discards its output)")
		return
	}
	b, err := os.ReadFile(e.paths.PluginLog)
	if err != nil || int64(len(b)) < from {
		t.Errorf("plugin log: %v", err)
		return
	}
	checkPluginLogExcept(t, string(b[from:]), expected)
}

// pluginLogFrom marks the plugin's log now and returns what reports the
// lines logged after the mark (checkPluginLog): from the external
// plugin's file, or from the pod of the DaemonSet helm installed.
func (e *guestEnv) pluginLogFrom(t *testing.T) func() {
	t.Helper()
	if e.variant.Plugin != variant.PluginHelm {
		from := fileSize(e.paths.PluginLog)
		return func() { e.pluginLog(t, from) }
	}
	since := time.Now()
	return func() {
		out, err := dsLogs(since)
		if err != nil {
			t.Errorf("plugin log: %v", err)
			return
		}
		checkPluginLog(t, out)
	}
}

// checkPluginLog fails the test for a container update the plugin could
// not send or the runtime refused twice in a row, and logs warnings,
// errors and synchronizations.
func checkPluginLog(t *testing.T, log string) {
	t.Helper()
	checkPluginLogExcept(t, log, nil)
}

// checkPluginLogExcept is checkPluginLog where a failed container update
// that expected (if not nil) accepts is logged, not failed.
func checkPluginLogExcept(t *testing.T, log string, expected func(line string) bool) {
	t.Helper()
	for _, l := range strings.Split(log, "\n") {
		switch {
		case (strings.Contains(l, "cannot send container updates") || strings.Contains(l, "runtime failed some container updates")) &&
			(strings.Contains(l, "level=WARN") || strings.Contains(l, `"level":"WARN"`)):
			// A first failure is logged at info: a container that stopped
			// while its update was in flight. A warning is a container
			// that failed again.
			if expected != nil && expected(l) {
				t.Logf("plugin (expected): %s", l)
			} else {
				t.Errorf("plugin: %s", l)
			}
		case strings.Contains(l, "level=WARN"), strings.Contains(l, "level=ERROR"), strings.Contains(l, "synchronized"),
			strings.Contains(l, `"level":"WARN"`), strings.Contains(l, `"level":"ERROR"`): // -log-format json in the DaemonSet
			t.Logf("plugin: %s", l)
		}
	}
}

// cpuView is what a container sees of its own cgroup.
type cpuView struct {
	Name        string
	CPUs, Mems  cpuset.CPUSet
	CPUMax      string
	Controllers string
}

func (v cpuView) String() string {
	return fmt.Sprintf("%s: cpus=%s mems=%s cpu.max=%q", v.Name, v.CPUs, v.Mems, v.CPUMax)
}

// exclusive reports whether the CFS quota is off, as cgdelegate sets it
// for an exclusive slice. Only meaningful for containers with a CPU limit
// (a container without one has no quota either).
func (v cpuView) exclusive() bool { return strings.HasPrefix(v.CPUMax, "max ") }

const cpuViewScript = `d=/sys/fs/cgroup
echo "CG=$(cat /proc/self/cgroup)"
echo "CPUS=$(cat $d/cpuset.cpus.effective)"
echo "MEMS=$(cat $d/cpuset.mems.effective)"
echo "CPUMAX=$(cat $d/cpu.max)"
echo "CTRL=$(cat $d/cgroup.controllers)"`

// viewOf reads the container's cpuset and CFS quota from inside it.
func viewOf(ctx context.Context, t *testing.T, c *cri.Container) cpuView {
	t.Helper()
	m := inspect.Markers(shOK(ctx, t, c, cpuViewScript))
	if cg := inspect.CgroupPath(m["CG"]); cg != "/" {
		t.Fatalf("%s: /proc/self/cgroup path %q, want / (a private cgroup namespace)", c.Name, cg)
	}
	v := cpuView{Name: c.Name, CPUMax: m["CPUMAX"], Controllers: m["CTRL"]}
	var err error
	if v.CPUs, err = cpuset.Parse(m["CPUS"]); err != nil || v.CPUs.IsEmpty() {
		t.Fatalf("%s: cpuset.cpus.effective %q: %v (controllers %q)", c.Name, m["CPUS"], err, m["CTRL"])
	}
	if v.Mems, err = cpuset.Parse(m["MEMS"]); err != nil || v.Mems.IsEmpty() {
		t.Fatalf("%s: cpuset.mems.effective %q: %v", c.Name, m["MEMS"], err)
	}
	return v
}

// waitView polls the container's view until ok accepts it (updates sent
// with UpdateContainers land asynchronously) and returns the last view.
func waitView(ctx context.Context, t *testing.T, c *cri.Container, what string, ok func(cpuView) bool) cpuView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := viewOf(ctx, t, c)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s after 30s", what, v)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// nodeCPUs reads the CPUs of every NUMA node of the guest.
func nodeCPUs(t *testing.T) map[int]cpuset.CPUSet {
	t.Helper()
	dirs, err := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no NUMA nodes in sysfs: %v", err)
	}
	out := map[int]cpuset.CPUSet{}
	for _, d := range dirs {
		var n int
		if _, err := fmt.Sscanf(filepath.Base(d), "node%d", &n); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		set, err := cpuset.Parse(readCgroupFile(t, d, "cpulist"))
		if err != nil {
			t.Fatalf("%s/cpulist: %v", d, err)
		}
		out[n] = set
	}
	return out
}

// assertOneNode checks that the views run on CPUs of one NUMA node and
// have exactly that node as their memory node.
func assertOneNode(t *testing.T, nodes map[int]cpuset.CPUSet, views ...cpuView) {
	t.Helper()
	all := cpuset.New()
	for _, v := range views {
		all = all.Union(v.CPUs)
		if !v.Mems.Equals(views[0].Mems) {
			t.Errorf("mems differ: %s vs %s", v, views[0])
		}
	}
	if views[0].Mems.Size() != 1 {
		t.Fatalf("mems %s: want a single NUMA node", views[0].Mems)
	}
	node := views[0].Mems.List()[0]
	if !all.IsSubsetOf(nodes[node]) {
		t.Errorf("cpus %s are not all on NUMA node %d (%s)", all, node, nodes[node])
	}
}

// assertExclusiveDisjoint checks that no CPU is in two exclusive views and
// that no shared view overlaps an exclusive one.
func assertExclusiveDisjoint(t *testing.T, views []cpuView) {
	t.Helper()
	for i, a := range views {
		for _, b := range views[i+1:] {
			if (a.exclusive() || b.exclusive()) && !a.CPUs.Intersection(b.CPUs).IsEmpty() {
				t.Errorf("cpus %s assigned twice: %s and %s", a.CPUs.Intersection(b.CPUs), a, b)
			}
		}
	}
}

// podCgroupPinning checks that the cpuset controller reaches the
// container cgroups: enabled in the pod cgroup's subtree_control and listed
// in the container's controllers.
func (e *guestEnv) podCgroupPinning(t *testing.T, pod *cri.Pod, views ...cpuView) {
	t.Helper()
	sub := strings.Fields(readCgroupFile(t, e.podCgroup(pod), "cgroup.subtree_control"))
	if !slices.Contains(sub, "cpuset") {
		t.Errorf("pod cgroup %s: subtree_control %q has no cpuset", e.podCgroup(pod), sub)
	}
	for _, v := range views {
		if !slices.Contains(strings.Fields(v.Controllers), "cpuset") {
			t.Errorf("%s: cgroup.controllers %q has no cpuset", v.Name, v.Controllers)
		}
	}
	t.Logf("pod cgroup subtree_control: %s", strings.Join(sub, " "))
}

// hostCgroupCPUs reads cpuset.cpus (what the runtime wrote, not the
// effective set) of a container's cgroup from the host.
func (e *guestEnv) hostCgroupCPUs(t *testing.T, c *cri.Container) string {
	t.Helper()
	return readCgroupFile(t, e.containerCgroup(t, c.Pod, c), "cpuset.cpus")
}

// runningViews reads every running container of the pod from inside.
func (e *guestEnv) runningViews(ctx context.Context, t *testing.T, pod *cri.Pod) []cpuView {
	t.Helper()
	var out []cpuView
	for _, c := range e.podContainers(ctx, t, pod) {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		out = append(out, viewOf(ctx, t, &cri.Container{ID: c.GetId(), Name: c.GetMetadata().GetName(), Pod: pod}))
	}
	slices.SortFunc(out, func(a, b cpuView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// publishedStatus is what `cgdelegate status` shows of the running
// plugin's report: the process that published it, when, and its
// allocation table.
type publishedStatus struct {
	pid   int
	at    time.Time
	table policy.Status
	raw   string
}

// published runs `cgdelegate status` with the plugin's config and returns
// what the plugin published; it fails the test unless pinning is active.
func (e *guestEnv) published(ctx context.Context, t *testing.T) publishedStatus {
	t.Helper()
	out, err := exec.CommandContext(ctx, e.paths.PluginBinary, "status", "-config", e.paths.PluginYAML).Output()
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
		t.Fatalf("cgdelegate status: %v\n%s", err, out)
	}
	var r struct {
		PluginPID int       `json:"pluginPID"`
		UpdatedAt time.Time `json:"updatedAt"`
		Pinning   *struct {
			Active      bool           `json:"active"`
			Reason      string         `json:"reason"`
			Allocations *policy.Status `json:"allocations"`
		} `json:"pinning"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("cgdelegate status output: %v\n%s", err, out)
	}
	if r.Pinning == nil || !r.Pinning.Active || r.Pinning.Allocations == nil {
		t.Fatalf("cgdelegate status shows no active pinning:\n%s", out)
	}
	return publishedStatus{pid: r.PluginPID, at: r.UpdatedAt, table: *r.Pinning.Allocations, raw: string(out)}
}

// waitStatusPod polls `cgdelegate status` until the pod's row has exactly
// the wanted containers (by name, with their pools and cpus) and returns
// the row. The plugin publishes its allocation table at least every 10 s,
// so the table may lag an event by that much.
func (e *guestEnv) waitStatusPod(ctx context.Context, t *testing.T, pod *cri.Pod, want map[string]cpuView) policy.PodStatus {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		pub := e.published(ctx, t)
		tab, raw := pub.table, pub.raw
		var row *policy.PodStatus
		for i := range tab.Pods {
			if tab.Pods[i].ID == pod.ID {
				row = &tab.Pods[i]
			}
		}
		problem := statusMismatch(row, want)
		if problem == "" {
			t.Logf("cgdelegate status: node shared pool %s; pod %s bubble %s shared pool %s", tab.NodeSharedPool, row.Name, row.Bubble, row.SharedPool)
			for _, c := range row.Containers {
				t.Logf("  %-14s %-10s cpus=%s mems=%s", c.Name, c.Pool, c.CPUs, c.Mems)
			}
			return *row
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgdelegate status after 40s: %s\n%s", problem, raw)
		}
		time.Sleep(time.Second)
	}
}

func statusMismatch(row *policy.PodStatus, want map[string]cpuView) string {
	if row == nil {
		return "pod not in the table"
	}
	if row.Bubble == "" {
		return "pod has no bubble"
	}
	if len(row.Containers) != len(want) {
		return fmt.Sprintf("%d containers in the table, want %d", len(row.Containers), len(want))
	}
	for _, c := range row.Containers {
		v, ok := want[c.Name]
		wantPool := policy.PoolPodShared
		if v.exclusive() {
			wantPool = policy.PoolExclusive
		}
		switch {
		case !ok:
			return fmt.Sprintf("unexpected container %s", c.Name)
		case c.Pool != wantPool:
			return fmt.Sprintf("%s in pool %s, want %s", c.Name, c.Pool, wantPool)
		case c.CPUs != v.CPUs.String() || c.Mems != v.Mems.String():
			return fmt.Sprintf("%s cpus=%s mems=%s in the table, the container runs on %s", c.Name, c.CPUs, c.Mems, v)
		}
	}
	return ""
}

func byName(views ...cpuView) map[string]cpuView {
	m := make(map[string]cpuView, len(views))
	for _, v := range views {
		m[v.Name] = v
	}
	return m
}

// unionOf is every CPU of nodes.
// nodeOf returns the NUMA nodes of cpus.
func nodeOf(nodes map[int]cpuset.CPUSet, cpus cpuset.CPUSet) cpuset.CPUSet {
	var ids []int
	for id, set := range nodes {
		if !set.Intersection(cpus).IsEmpty() {
			ids = append(ids, id)
		}
	}
	return cpuset.New(ids...)
}

func unionOf(nodes map[int]cpuset.CPUSet) cpuset.CPUSet {
	all := cpuset.New()
	for _, set := range nodes {
		all = all.Union(set)
	}
	return all
}

// pinningPodBudget: a pod whose 2-CPU budget comes through CRI
// LinuxPodSandboxConfig.Resources gets a bubble on one NUMA node; its
// Guaranteed 1-CPU container gets an exclusive CPU with the quota off, its
// Burstable container the other CPU with its quota kept.
func pinningPodBudget(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	ctx := scenarioCtx(t)
	logFrom := fileSize(e.paths.PluginLog)
	t.Cleanup(func() { e.pluginLog(t, logFrom) })
	nodes := nodeCPUs(t)
	all := unionOf(nodes)
	// A pod without a budget runs in the node shared pool: every CPU now.
	plain := e.runPod(ctx, t, cri.PodSpec{Name: "plain"})
	pc := runContainer(ctx, t, plain, memoryOnly("node-pool"))
	if v := viewOf(ctx, t, pc); !v.CPUs.Equals(all) {
		t.Errorf("node shared pool container before any bubble: %s, want cpus %s", v, all)
	}

	pod := e.runPod(ctx, t, cri.PodSpec{Name: "budget", Resources: podResources(2)})
	ex := runContainer(ctx, t, pod, guaranteed("exclusive"))
	sh := runContainer(ctx, t, pod, burstable("shared"))

	vx, vs := viewOf(ctx, t, ex), viewOf(ctx, t, sh)
	t.Logf("%s", vx)
	t.Logf("%s", vs)
	e.podCgroupPinning(t, pod, vx, vs)
	if vx.CPUs.Size() != 1 || vs.CPUs.Size() != 1 {
		t.Errorf("want one exclusive and one shared CPU: %s; %s", vx, vs)
	}
	if !vx.CPUs.Intersection(vs.CPUs).IsEmpty() {
		t.Errorf("exclusive and shared sets overlap: %s; %s", vx, vs)
	}
	assertOneNode(t, nodes, vx, vs)
	if !vx.exclusive() {
		t.Errorf("exclusive container: cpu.max %q, want the quota off (max)", vx.CPUMax)
	}
	if want := fmt.Sprintf("%d %d", cfsPeriod, cfsPeriod); vs.CPUMax != want {
		t.Errorf("shared container: cpu.max %q, want its quota %q", vs.CPUMax, want)
	}
	for _, c := range []*cri.Container{ex, sh} {
		if got, want := e.hostCgroupCPUs(t, c), map[string]cpuView{"exclusive": vx, "shared": vs}[c.Name].CPUs.String(); got != want {
			t.Errorf("%s: host cgroup cpuset.cpus %q, effective inside %q", c.Name, got, want)
		}
	}

	bubble := vx.CPUs.Union(vs.CPUs)
	row := e.waitStatusPod(ctx, t, pod, byName(vx, vs))
	if b, err := cpuset.Parse(row.Bubble); err != nil || !b.Equals(bubble) {
		t.Errorf("status bubble %q, want the union of the containers' cpus %s", row.Bubble, bubble)
	}

	// The bubble left the node shared pool: the plain pod's container was
	// narrowed (UpdateContainers after RunPodSandbox), and is widened again
	// when the budget pod goes (UpdateContainers after RemovePodSandbox).
	narrowed := waitView(ctx, t, pc, "node shared pool container after the bubble was carved", func(v cpuView) bool {
		return v.CPUs.Equals(all.Difference(bubble))
	})
	t.Logf("node pool while the bubble exists: %s", narrowed)
	if err := pod.Remove(); err != nil {
		t.Fatal(err)
	}
	widened := waitView(ctx, t, pc, "node shared pool container after the budget pod was removed", func(v cpuView) bool {
		return v.CPUs.Equals(all)
	})
	t.Logf("node pool after the budget pod was removed: %s", widened)
}

// pinningDynamicAdd: a Guaranteed container added to a running pod
// takes its slice from the pod shared pool, shrinking the shared
// container's set in the same CreateContainer; stopping and removing it
// widens the set again.
//
// The 2-CPU pod of PinningPodBudget has no room for a second slice (it
// would leave the shared container no CPU): there the add is refused and
// nothing changes. The shrink and widen are shown in a 3-CPU pod, the
// largest bubble -smp 4 allows (one CPU stays in the node shared pool);
// its bubble spans both NUMA nodes.
func pinningDynamicAdd(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	ctx := scenarioCtx(t)
	logFrom := fileSize(e.paths.PluginLog)
	t.Cleanup(func() { e.pluginLog(t, logFrom) })

	t.Run("refused-when-full", func(t *testing.T) {
		// The shared container requests no CPU, so the CPU requests fit
		// the budget (2 x 1000m): the refusal is the policy's.
		pod := e.runPod(ctx, t, cri.PodSpec{Name: "full", Resources: podResources(2)})
		runContainer(ctx, t, pod, guaranteed("exclusive"))
		sh := runContainer(ctx, t, pod, memoryOnly("shared"))
		before := viewOf(ctx, t, sh)
		_, err := pod.CreateContainer(ctx, guaranteed("extra"))
		requireErrContains(t, "CreateContainer of a second 1-CPU slice in a 2-CPU pod with a shared container", err,
			"cgdelegate refused", "leaving no cpus for shared containers")
		t.Logf("refusal seen by the CRI client: %v", err)
		if after := viewOf(ctx, t, sh); !after.CPUs.Equals(before.CPUs) || after.CPUMax != before.CPUMax {
			t.Errorf("a refused add changed the shared container: %s, was %s", after, before)
		}
		if err := pod.Remove(); err != nil {
			t.Fatal(err)
		}
	})

	pod := e.runPod(ctx, t, cri.PodSpec{Name: "grow", Resources: podResources(3)})
	ex := runContainer(ctx, t, pod, guaranteed("exclusive"))
	sh := runContainer(ctx, t, pod, burstable("shared"))
	vx, before := viewOf(ctx, t, ex), viewOf(ctx, t, sh)
	t.Logf("before: %s; %s", vx, before)
	if before.CPUs.Size() != 2 || !vx.exclusive() || !vx.CPUs.Intersection(before.CPUs).IsEmpty() {
		t.Fatalf("3-CPU pod: want one exclusive CPU and two shared: %s; %s", vx, before)
	}

	added := runContainer(ctx, t, pod, guaranteed("added"))
	va := viewOf(ctx, t, added)
	// The shrink came in the CreateContainer response: it is in place now.
	shrunk := viewOf(ctx, t, sh)
	t.Logf("after add: %s; %s", va, shrunk)
	switch {
	case !va.exclusive() || va.CPUs.Size() != 1:
		t.Errorf("added container is not exclusive: %s", va)
	case shrunk.CPUs.Size() != 1 || !shrunk.CPUs.IsSubsetOf(before.CPUs) || !shrunk.CPUs.Union(va.CPUs).Equals(before.CPUs):
		t.Errorf("shared set %s did not shrink by the added slice %s (was %s)", shrunk.CPUs, va.CPUs, before.CPUs)
	}
	assertExclusiveDisjoint(t, []cpuView{vx, va, shrunk})
	e.waitStatusPod(ctx, t, pod, byName(vx, va, shrunk))

	if err := added.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := added.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	widened := waitView(ctx, t, sh, "shared set after the added container was removed", func(v cpuView) bool {
		return v.CPUs.Equals(before.CPUs)
	})
	t.Logf("after remove: %s", widened)
	e.waitStatusPod(ctx, t, pod, byName(vx, widened))
}

// pinningPluginRestartDuringChurn: cgdelegate is killed; containers
// are added and removed while it is down (containerd admits them without
// it, as in GuardCgroupWritable and Restarts); it is started again and
// rebuilds its state from Synchronize. Afterwards no CPU is in two exclusive containers, the
// Guaranteed container created while it was down has a slice, and a new
// Guaranteed container gets a slice disjoint from the others.
func pinningPluginRestartDuringChurn(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	if e.variant.Plugin != variant.PluginExternal {
		t.Fatalf("variant %s: this scenario kills the external plugin", e.variant.Name)
	}
	ctx := scenarioCtx(t)
	logFrom := fileSize(e.paths.PluginLog)
	t.Cleanup(func() { e.pluginLog(t, logFrom) })
	pod := e.runPod(ctx, t, cri.PodSpec{Name: "churn", Resources: podResources(3)})
	first := runContainer(ctx, t, pod, guaranteed("first"))
	sh := runContainer(ctx, t, pod, burstable("shared"))
	t.Logf("before the kill: %s; %s", viewOf(ctx, t, first), viewOf(ctx, t, sh))

	restart := e.killPlugin(ctx, t)

	// Churn with the plugin down.
	down := runContainer(ctx, t, pod, guaranteed("while-down"))
	shDown := runContainer(ctx, t, pod, burstable("shared-down"))
	if err := first.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := first.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("while down: %s; %s", viewOf(ctx, t, down), viewOf(ctx, t, shDown))

	restart()
	// The repairs' cpusets are written to the cgroups before Synchronize
	// answers (startPlugin waited for containerd to log it); the quota of
	// "while-down" is switched off by the runtime's update, which follows
	// within the sender's hold (at most 5 s).
	views := e.runningViews(ctx, t, pod)
	for _, v := range views {
		t.Logf("after the restart: %s", v)
	}
	assertExclusiveDisjoint(t, views)
	if vd := byName(views...)["while-down"]; vd.CPUs.Size() != 1 {
		t.Errorf("the Guaranteed container created while cgdelegate was down has no slice after the restart: %s", vd)
	}
	start := time.Now()
	vd := waitView(ctx, t, down, "the quota of the container created while cgdelegate was down", cpuView.exclusive)
	t.Logf("quota off %.1fs after Synchronize: %s", time.Since(start).Seconds(), vd)
	if vd.CPUs.Size() != 1 {
		t.Errorf("the Guaranteed container created while cgdelegate was down lost its slice: %s", vd)
	}

	after := runContainer(ctx, t, pod, guaranteed("after"))
	va := viewOf(ctx, t, after)
	t.Logf("new container: %s", va)
	if !va.exclusive() || va.CPUs.Size() != 1 {
		t.Errorf("new Guaranteed container has no exclusive slice: %s", va)
	}
	views = e.runningViews(ctx, t, pod)
	for _, v := range views {
		t.Logf("final: %s", v)
	}
	assertExclusiveDisjoint(t, views)
	var exclusive int
	for _, v := range views {
		if v.exclusive() {
			exclusive++
		}
	}
	if exclusive != 2 || len(views) != 4 {
		t.Errorf("want 4 running containers, 2 of them exclusive; got %d, %d", len(views), exclusive)
	}
	e.waitStatusPod(ctx, t, pod, byName(views...))

	// Another crash, no churn: the rebuild must move nothing. "while-down"
	// has no stamp (an update can not add one): it keeps its slice by its
	// quota (-1) and its current cpuset.
	if err := e.plugin.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := e.startPlugin(ctx, fileSize(e.paths.ContainerdLog)); err != nil {
		t.Fatalf("second restart: %v", err)
	}
	again := e.runningViews(ctx, t, pod)
	for i, v := range again {
		t.Logf("after a second restart: %s", v)
		if i < len(views) && (v.Name != views[i].Name || !v.CPUs.Equals(views[i].CPUs) || v.CPUMax != views[i].CPUMax) {
			t.Errorf("a restart without churn changed %s to %s", views[i], v)
		}
	}
	if len(again) != len(views) {
		t.Errorf("%d running containers after the second restart, want %d", len(again), len(views))
	}
}

// numaTopology checks the -smp 4 two-node variant that the pod CPU pinning
// scenarios build on.
func numaTopology(t *testing.T, _ *guestEnv) {
	want := map[string]string{"node0": "0-1", "node1": "2-3"}
	for node, cpus := range want {
		b, err := os.ReadFile(filepath.Join("/sys/devices/system/node", node, "cpulist"))
		if err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		if got := strings.TrimSpace(string(b)); got != cpus {
			t.Errorf("%s cpulist = %q, want %q", node, got, cpus)
		}
	}
}

// pinningContainerScope: cgdelegate restarted with topologyScope:
// container (and with the variant's config again at the end); there are no
// bubbles. A Guaranteed 1-CPU container (oom_score_adj -997) gets one
// exclusive CPU from the node pool with its quota off and the memory node
// of that CPU, and the node-shared container keeps every other CPU and
// every memory node; a burstable container in a pod the kubelet scored
// Burstable gets no exclusive CPU; an exclusive container whose memory
// limit no node holds alone gets both memory nodes, one no node group
// holds is refused; removing the pod widens the shared container again.
func pinningContainerScope(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	ctx := scenarioCtx(t)
	logFrom := fileSize(e.paths.PluginLog)
	e.withPluginConfig(ctx, t, "topologyScope: container\n")
	t.Cleanup(func() { e.pluginLog(t, logFrom) })
	nodes := nodeCPUs(t)
	all := unionOf(nodes)
	plain := e.runPod(ctx, t, cri.PodSpec{Name: "plain"})
	pc := runContainer(ctx, t, plain, memoryOnly("node-pool"))
	if v := viewOf(ctx, t, pc); !v.CPUs.Equals(all) {
		t.Fatalf("node shared pool container before any slice: %s, want cpus %s", v, all)
	}

	pod := e.runPod(ctx, t, cri.PodSpec{Name: "guaranteed", Guaranteed: true})
	ex := runContainer(ctx, t, pod, guaranteed("exclusive"))
	vx := viewOf(ctx, t, ex)
	t.Logf("exclusive: %s", vx)
	if vx.CPUs.Size() != 1 || !vx.exclusive() {
		t.Fatalf("exclusive container: %s, want one cpu with the quota off", vx)
	}
	narrowed := waitView(ctx, t, pc, "node shared pool container after the slice", func(v cpuView) bool {
		return v.CPUs.Equals(all.Difference(vx.CPUs))
	})
	t.Logf("node pool with the slice: %s", narrowed)
	if !narrowed.Mems.Equals(cpuset.New(0, 1)) {
		t.Errorf("node-shared container mems %s, want every memory node 0-1", narrowed.Mems)
	}

	bpod := e.runPod(ctx, t, cri.PodSpec{Name: "burstable"})
	spec := guaranteed("scored-burstable")
	spec.Resources.OomScoreAdj = 500 // the kubelet's score for a Burstable pod
	bc := runContainer(ctx, t, bpod, spec)
	if v := viewOf(ctx, t, bc); v.exclusive() || !v.CPUs.Equals(all.Difference(vx.CPUs)) {
		t.Errorf("container of a Burstable pod: %s, want the node shared pool with its quota", v)
	}

	// The exclusive container's memory nodes hold its memory limit: its
	// 64Mi fit the node of its cpu; 1.5Gi fit no ~1Gi node alone and are
	// widened to both; 4Gi fit nowhere and are refused with the numbers.
	if want := nodeOf(nodes, vx.CPUs); !vx.Mems.Equals(want) {
		t.Errorf("exclusive container mems %s, want the node of its cpu %s", vx.Mems, want)
	}
	wideSpec := guaranteed("wide")
	wideSpec.Resources.MemoryLimitInBytes = 1536 * mib
	vw := viewOf(ctx, t, runContainer(ctx, t, pod, wideSpec))
	t.Logf("exclusive 1.5Gi: %s", vw)
	if vw.CPUs.Size() != 1 || !vw.exclusive() || !vw.Mems.Equals(cpuset.New(0, 1)) {
		t.Errorf("exclusive 1.5Gi container: %s, want one cpu, quota off, mems 0-1", vw)
	}
	fatSpec := guaranteed("fat")
	fatSpec.Resources.MemoryLimitInBytes = 4096 * mib
	if _, err := pod.CreateContainer(ctx, fatSpec); err == nil || !strings.Contains(err.Error(), "insufficient memory") ||
		!strings.Contains(err.Error(), "memory limit 4Gi does not fit") {
		t.Errorf("4Gi exclusive container: err = %v, want insufficient memory with the numbers", err)
	} else {
		t.Logf("4Gi exclusive container refused: %v", err)
	}

	if err := pod.Remove(); err != nil {
		t.Fatal(err)
	}
	widened := waitView(ctx, t, pc, "node shared pool container after the pod was removed", func(v cpuView) bool {
		return v.CPUs.Equals(all)
	})
	t.Logf("node pool after the pod was removed: %s", widened)
}

// pinningLiveInitContainer plays a tenant whose Guaranteed container is
// annotated as an init container but never exits. The kubelet reuses an
// init container's CPUs because it has exited; this one has not, so when
// its regular sibling is created cgdelegate must move it off its
// exclusive CPUs before they go to anyone else: here to another pod's
// exclusive container, whose CPUs the real cgroups must show in no other
// container's effective cpuset.
func pinningLiveInitContainer(t *testing.T, e *guestEnv) {
	e.requirePinning(t)
	ctx := scenarioCtx(t)
	logFrom := fileSize(e.paths.PluginLog)
	e.withPluginConfig(ctx, t, "topologyScope: container\n")
	t.Cleanup(func() { e.pluginLog(t, logFrom) })
	all := unionOf(nodeCPUs(t))

	liarPod := e.runPod(ctx, t, cri.PodSpec{
		Name: "live-init", Guaranteed: true,
		Annotations: map[string]string{"lifecycle.cgdelegate.io/container.liar": "init"},
	})
	liar := runContainer(ctx, t, liarPod, guaranteed("liar"))
	vl := viewOf(ctx, t, liar)
	t.Logf("the \"init\" container that never exits: %s", vl)
	if vl.CPUs.Size() != 1 || !vl.exclusive() {
		t.Fatalf("\"init\" container: %s, want one exclusive cpu with the quota off", vl)
	}
	// The regular sibling: as far as the annotation says, every init
	// container of the pod has completed, and their CPUs are free again.
	sibling := runContainer(ctx, t, liarPod, memoryOnly("app"))
	t.Logf("regular sibling: %s", viewOf(ctx, t, sibling))

	tenant := e.runPod(ctx, t, cri.PodSpec{Name: "next-tenant", Guaranteed: true})
	victim := runContainer(ctx, t, tenant, guaranteed("exclusive"))
	vv := viewOf(ctx, t, victim)
	t.Logf("the next tenant's exclusive container: %s", vv)
	if vv.CPUs.Size() != 1 || !vv.exclusive() {
		t.Fatalf("next tenant's container: %s, want one exclusive cpu with the quota off", vv)
	}
	moved := waitView(ctx, t, liar, "the \"init\" container still running beside the next tenant's slice", func(v cpuView) bool {
		return v.CPUs.Intersection(vv.CPUs).IsEmpty() && !v.exclusive()
	})
	t.Logf("the \"init\" container after the reuse: %s", moved)
	if want := all.Difference(vv.CPUs); !moved.CPUs.Equals(want) {
		t.Errorf("the \"init\" container runs on %s, want the node shared pool %s", moved.CPUs, want)
	}
	for _, c := range []*cri.Container{sibling, liar} {
		if v := viewOf(ctx, t, c); !v.CPUs.Intersection(vv.CPUs).IsEmpty() {
			t.Errorf("%s shares the next tenant's exclusive cpus %s", v, vv.CPUs)
		}
	}
	for _, p := range []*cri.Pod{tenant, liarPod} {
		if err := p.Remove(); err != nil {
			t.Fatal(err)
		}
	}
}

// killPlugin SIGKILLs the external plugin and waits until containerd
// noticed it gone; it returns restartPluginOnce's restart.
func (e *guestEnv) killPlugin(ctx context.Context, t *testing.T) func() {
	t.Helper()
	from := fileSize(e.paths.ContainerdLog)
	if err := e.plugin.Kill(); err != nil {
		t.Fatal(err)
	}
	restart := e.restartPluginOnce(ctx, t)
	if err := waitLog(ctx, e.paths.ContainerdLog, from, 30*time.Second, func(l string) bool {
		return strings.Contains(l, "cgdelegate") && strings.Contains(l, "closed")
	}, func() error { return nil }); err != nil {
		t.Fatalf("containerd did not notice the killed plugin: %v", err)
	}
	return restart
}
