//go:build integration_guest

package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/inspect"
	cgdconfig "github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// Console markers of the demo (read by integration/vm's TestDemo): a story
// line, and the name of a step whose observations were all made.
const (
	markDemo     = "CGD-DEMO "
	markDemoStep = "CGD-DEMO-STEP "
)

// Demo steps, in order; integration/vm requires every one it expects.
const (
	stepWritable  = "writable-mount"
	stepDelegate  = "delegation"
	stepOwnLimit  = "own-limit"
	stepBounds    = "pod-bounds"
	stepRefused   = "refused"
	stepAdvertise = "advertisement"
	stepPinning   = "pinning"
)

// story prints the demo for a person, one CGD-DEMO line at a time.
type story struct{}

func (story) say(format string, args ...any) {
	for _, l := range strings.Split(fmt.Sprintf(format, args...), "\n") {
		fmt.Printf("%s%s\n", markDemo, l)
	}
}

func (story) done(step string) { fmt.Printf("%s%s\n", markDemoStep, step) }

// demoScript runs, in a writable container limited to 64 MiB, what a
// delegating workload does (the child process stays), then tries to raise
// its own limit. It prints KEY=value markers.
const demoScript = delegationSteps + `echo "OWNBEFORE=$(cat memory.max)"
if err=$( (echo max > memory.max) 2>&1 ); then echo RAISE=ok; else echo "RAISE=${err##*: }"; fi
echo "OWNAFTER=$(cat memory.max)"
`

// demo is `make demo`: it tells, from real observations, what cgdelegate
// does to a pod on this node. Every step checks what it prints.
func demo(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	var s story

	v, err := e.cri.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("CRI Version: %v", err)
	}
	host := hostCgroupMount(t)
	s.say("Node: %s %s with %s, kernel %s, cgroup2 mounted with %s; cgdelegate runs as an external NRI plugin.",
		v.GetRuntimeName(), v.GetRuntimeVersion(), runcVersion(), kernelRelease(), strings.Join(host.SuperOpts, ","))
	s.say("")

	// 1. The writable container and what it sees.
	const memLimit = 64 << 20
	s.say("1. A pod annotated %s: \"true\" runs a busybox container with a 64 MiB memory limit.", writableAnnotation)
	pod := e.runPod(ctx, t, cri.PodSpec{Name: "demo", Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("app", memLimit))
	m, _ := cgroupMount(ctx, t, c)
	nsPath := inspect.CgroupPath(shOK(ctx, t, c, "cat /proc/self/cgroup"))
	if m.FSType != "cgroup2" || m.ReadOnly() || !m.HasSuperOpt("nsdelegate") || m.Root != "/" || nsPath != "/" {
		t.Fatalf("the container's view is not a writable cgroup2 namespace root: mount %s, /proc/self/cgroup %q", m, nsPath)
	}
	s.say("   Inside, /sys/fs/cgroup is %s, mounted %s (super options %s),",
		m.FSType, strings.Join(m.Options, ","), strings.Join(m.SuperOpts, ","))
	s.say("   and /proc/self/cgroup says 0::%s: the container has its own cgroup namespace, rooted at its own cgroup.", nsPath)
	s.done(stepWritable)

	r := sh(ctx, t, c, demoScript)
	got := inspect.Markers(r.Stdout)
	for k, want := range map[string]string{
		"ENABLE": "ok", "MEMSET": "ok", "PIDSSET": "ok", "MOVE": "ok",
		"CHILDCG": "0::/limited", "MEMMAX": "33554432", "PIDSMAX": "16",
	} {
		if got[k] != want {
			t.Errorf("delegation: %s = %q, want %q\n%s", k, got[k], want, r)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	ctrCg := e.containerCgroup(t, pod, c)
	hostMem := readCgroupFile(t, filepath.Join(ctrCg, "limited"), "memory.max")
	if hostMem != got["MEMMAX"] {
		t.Fatalf("the node sees %s/limited/memory.max = %q, the container wrote %q", ctrCg, hostMem, got["MEMMAX"])
	}
	s.say("   From inside, the container:")
	s.say("     - created the child cgroups leaf/ and limited/ and moved its own processes into leaf/;")
	s.say("     - enabled controllers for its children: cgroup.subtree_control = %q;", got["SUBTREE"])
	s.say("     - set limited/memory.max = %s (32 MiB) and limited/pids.max = %s;", got["MEMMAX"], got["PIDSMAX"])
	s.say("     - moved a process (pid %s) into it: /proc/%s/cgroup = %s.", got["CHILDPID"], got["CHILDPID"], got["CHILDCG"])
	s.say("   On the node the same child is %s/limited, memory.max = %s.", ctrCg, hostMem)
	s.done(stepDelegate)

	// 2. Its own limit is out of reach.
	if got["RAISE"] == "ok" || !strings.Contains(got["RAISE"], "Operation not permitted") ||
		got["OWNBEFORE"] != fmt.Sprint(memLimit) || got["OWNAFTER"] != fmt.Sprint(memLimit) {
		t.Fatalf("raising its own memory.max: %q (before %q, after %q), want EPERM and %d unchanged",
			got["RAISE"], got["OWNBEFORE"], got["OWNAFTER"], memLimit)
	}
	s.say("")
	s.say("2. The same container tries to lift its own limit: echo max > /sys/fs/cgroup/memory.max")
	s.say("   -> %s (EPERM). memory.max is still %s: nsdelegate keeps the namespace root's limits with the node.",
		got["RAISE"], got["OWNAFTER"])
	s.done(stepOwnLimit)

	// 3. The pod cgroup bounds, read on the node.
	podCg := e.podCgroup(pod)
	desc := readCgroupFile(t, podCg, "cgroup.max.descendants")
	depth := readCgroupFile(t, podCg, "cgroup.max.depth")
	nr := inspect.KeyValues(readCgroupFile(t, podCg, "cgroup.stat"))["nr_descendants"]
	if desc == "max" || depth == "max" || nr == "" {
		t.Fatalf("pod cgroup %s is not bounded: max.descendants %q, max.depth %q, nr_descendants %q", podCg, desc, depth, nr)
	}
	s.say("")
	s.say("3. On the node, cgdelegate bounded the pod cgroup before the container started:")
	s.say("   %s", podCg)
	s.say("     cgroup.max.descendants = %s, cgroup.max.depth = %s (now %s descendants in use)", desc, depth, nr)
	s.say("   so at most %s cgroups can exist below the pod cgroup, at most %s levels deep, whatever its containers do.", desc, depth)
	s.done(stepBounds)

	// 4. A refused container.
	bad := map[string]string{writableAnnotation: "yes"}
	badPod := e.runPod(ctx, t, cri.PodSpec{Name: "typo", Annotations: bad})
	_, err = badPod.CreateContainer(ctx, sleeper("typo", 0))
	requireErrContains(t, "CreateContainer with a bad annotation", err, writableAnnotation, `"yes"`)
	if cs := e.podContainers(ctx, t, badPod); len(cs) != 0 {
		t.Fatalf("the refused container exists anyway: %v", cs)
	}
	s.say("")
	s.say("4. A pod annotated %s: \"yes\" (a typo) asks for a container. It is NOT created;", writableAnnotation)
	st, isStatus := grpcstatus.FromError(errors.Unwrap(err))
	if !isStatus || st.Code() == codes.OK {
		t.Fatalf("the refusal is not a gRPC error from the runtime: %v", err)
	}
	s.say("   the CRI client (the kubelet) gets gRPC code %s:", st.Code())
	s.say("   %s", st.Message())
	s.done(stepRefused)

	// 5. The node advertisement and cgdelegate status.
	feature, err := os.ReadFile(cgdconfig.DefaultFeatureFile)
	if err != nil {
		t.Fatalf("node feature file: %v", err)
	}
	if !strings.Contains(string(feature), "cgdelegate.io/supports-cgroup-options=true") {
		t.Fatalf("node feature file %s: %q, want supports-cgroup-options=true", cgdconfig.DefaultFeatureFile, feature)
	}
	rep, raw := e.cgdelegateStatus(t)
	if !rep.Supported || rep.Runtime == nil {
		t.Fatalf("cgdelegate status does not report a supported node with a runtime:\n%s", raw)
	}
	s.say("")
	s.say("5. The node advertises it for the scheduler (Node Feature Discovery local feature file):")
	s.say("   %s:", cgdconfig.DefaultFeatureFile)
	for _, l := range strings.Split(strings.TrimSpace(string(feature)), "\n") {
		s.say("     %s", l)
	}
	s.say("   cgdelegate status: supportsCgroupOptions=%v, cgroup v%d at %s with nsdelegate=%v,",
		rep.Supported, rep.Host.Version, rep.Host.CgroupRoot, rep.Host.NsDelegate)
	s.say("   runtime %s %s, plugin pid %d, guard %q, pod bounds %d/%d, CPU pinning %s.",
		rep.Runtime.Name, rep.Runtime.Version, rep.PluginPID, rep.Config.Guard,
		rep.Config.MaxDescendants, rep.Config.MaxDepth, pinningWord(rep.Pinning))
	s.done(stepAdvertise)

	// 6. Pinned cpusets, when this VM runs the pod-level CPU manager.
	if rep.Pinning == nil || !rep.Pinning.Active {
		s.say("")
		s.say("6. CPU pinning (cpuPinning) is %s in this VM: no pinned cpusets to show.", pinningWord(rep.Pinning))
		return
	}
	e.demoPinning(ctx, t, s, c)
}

// demoPinning shows the cpusets of a Guaranteed and a shared container of a
// pod with a pod-level CPU budget, and of a container outside it (app, in
// the node shared pool).
func (e *guestEnv) demoPinning(ctx context.Context, t *testing.T, s story, app *cri.Container) {
	t.Helper()
	const period = 100000
	pod := e.runPod(ctx, t, cri.PodSpec{Name: "pinned", Resources: &runtimeapi.LinuxContainerResources{
		CpuShares: 2048, CpuPeriod: period, CpuQuota: 2 * period, MemoryLimitInBytes: 256 << 20,
	}})
	excl := runContainer(ctx, t, pod, cri.ContainerSpec{
		Name: "guaranteed", Image: busyboxImage, Command: []string{"sleep", "3600"},
		Resources: &runtimeapi.LinuxContainerResources{
			CpuShares: 1024, CpuPeriod: period, CpuQuota: period, MemoryLimitInBytes: 64 << 20, OomScoreAdj: -997,
		},
	})
	shared := runContainer(ctx, t, pod, cri.ContainerSpec{
		Name: "shared", Image: busyboxImage, Command: []string{"sleep", "3600"},
		Resources: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: period},
	})
	online, err := cpuset.Parse(strings.TrimSpace(readFileOr(t, "/sys/devices/system/cpu/online")))
	if err != nil {
		t.Fatal(err)
	}
	gCPUs, gMems := allowedCPUs(ctx, t, excl)
	sCPUs, sMems := allowedCPUs(ctx, t, shared)
	gQuota := readCgroupFile(t, e.containerCgroup(t, pod, excl), "cpu.max")
	if gCPUs.Size() != 1 || sCPUs.IsEmpty() || gCPUs.Intersection(sCPUs).Size() != 0 || gCPUs.Union(sCPUs).Equals(online) {
		t.Fatalf("pinning: guaranteed runs on %q, shared on %q, node CPUs %q: want 1 exclusive CPU, a disjoint shared set, and CPUs left for the node",
			gCPUs, sCPUs, online)
	}
	if !strings.HasPrefix(gQuota, "max") {
		t.Fatalf("pinning: the guaranteed container's cpu.max is %q, want its quota lifted (max)", gQuota)
	}
	// The node shared pool shrinks asynchronously (UpdateContainers).
	bubble := gCPUs.Union(sCPUs)
	var aCPUs cpuset.CPUSet
	deadline := time.Now().Add(20 * time.Second)
	for {
		aCPUs, _ = allowedCPUs(ctx, t, app)
		if aCPUs.Intersection(bubble).IsEmpty() || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !aCPUs.Intersection(bubble).IsEmpty() {
		t.Fatalf("pinning: the container outside the pod still runs on %q, overlapping the pod's CPUs %q", aCPUs, bubble)
	}
	s.say("")
	s.say("6. CPU pinning: a pod with a pod-level budget of 2 CPUs, on a node with CPUs %s (two NUMA nodes).", online)
	s.say("   Its Guaranteed container (1 whole CPU): CPUs %s, memory nodes %s, cpu.max %q: an exclusive CPU, no quota.", gCPUs, gMems, gQuota)
	s.say("   Its shared container:                   CPUs %s, memory nodes %s: the rest of the pod's CPUs.", sCPUs, sMems)
	s.say("   The container of step 1, outside it:    CPUs %s: the node shared pool, moved off the pod's CPUs.", aCPUs)
	s.done(stepPinning)
}

// allowedCPUs is where a container's processes may run, read inside it.
func allowedCPUs(ctx context.Context, t *testing.T, c *cri.Container) (cpuset.CPUSet, string) {
	t.Helper()
	kv := map[string]string{}
	for _, l := range strings.Split(shOK(ctx, t, c, "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status"), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	cpus, err := cpuset.Parse(kv["Cpus_allowed_list"])
	if err != nil {
		t.Fatalf("%s: Cpus_allowed_list: %v", c.Name, err)
	}
	return cpus, kv["Mems_allowed_list"]
}

// hostCgroupMount is the node's /sys/fs/cgroup mount.
func hostCgroupMount(t *testing.T) inspect.Mount {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mounts, err := inspect.ParseMountinfo(f)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := inspect.TopMount(mounts, "/sys/fs/cgroup")
	if !ok {
		t.Fatal("no /sys/fs/cgroup on the node")
	}
	return m
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "(unknown)"
	}
	return strings.TrimSpace(string(b))
}

func runcVersion() string {
	out, err := exec.Command("runc", "--version").Output()
	if err != nil {
		return "runc (unknown version)"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.Replace(strings.TrimSpace(first), " version ", " ", 1)
}

func readFileOr(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// containerCgroup is the node path of a container's cgroup below its pod
// cgroup (containerCgroupIn).
func (e *guestEnv) containerCgroup(t *testing.T, pod *cri.Pod, c *cri.Container) string {
	t.Helper()
	return containerCgroupIn(t, e.podCgroup(pod), c.ID)
}

// cgdelegateStatus runs `cgdelegate status` with args and parses its report.
func (e *guestEnv) cgdelegateStatus(t *testing.T, args ...string) (status.Report, string) {
	t.Helper()
	out, err := exec.Command(e.paths.PluginBinary, append([]string{"status"}, args...)...).Output()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("cgdelegate status: %v", err)
	}
	rep, perr := status.Parse(bytes.NewReader(out))
	if perr != nil {
		t.Fatalf("cgdelegate status (%v): %v\n%s", err, perr, out)
	}
	return rep, string(out)
}

func pinningWord(p *status.Pinning) string {
	switch {
	case p == nil:
		return "off"
	case p.Active:
		return "active"
	case p.Reason != "":
		return "inactive: " + p.Reason
	}
	return "inactive"
}
