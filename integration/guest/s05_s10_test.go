//go:build integration_guest

package guest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/cri"
	"github.com/cgdelegate/cgdelegate/integration/guest/inspect"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// raiseScript tries to lift the container's own memory limit.
const raiseScript = `echo "BEFORE=$(cat /sys/fs/cgroup/memory.max)"
if err=$( (echo max > /sys/fs/cgroup/memory.max) 2>&1 ); then echo RAISE=ok; else echo "RAISE=$err"; fi
echo "AFTER=$(cat /sys/fs/cgroup/memory.max)"`

// podContainers lists the containers of a pod.
func (e *guestEnv) podContainers(ctx context.Context, t *testing.T, pod *cri.Pod) []*runtimeapi.Container {
	t.Helper()
	resp, err := e.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod.ID},
	})
	if err != nil {
		t.Fatalf("ListContainers: %v", err)
	}
	return resp.GetContainers()
}

// TestS05NoNsdelegate: on a host without nsdelegate an annotated container
// is not created, the CRI error names nsdelegate; plain pods still run.
func TestS05NoNsdelegate(t *testing.T) {
	e := begin(t)
	e.requirePlugin(t)
	if e.cfg.NSDelegate {
		t.Fatalf("variant %s has nsdelegate; this scenario needs a host without it", e.cfg.Variant)
	}
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Name: "annotated", Annotations: writable()})
	_, err := pod.CreateContainer(ctx, sleeper("refused", 0))
	requireErrContains(t, "CreateContainer (annotated, no nsdelegate)", err, "nsdelegate")
	t.Logf("refusal seen by the CRI client: %v", err)
	if cs := e.podContainers(ctx, t, pod); len(cs) != 0 {
		t.Errorf("refused container exists anyway: %v", cs)
	}

	plain := e.runPod(ctx, t, cri.PodSpec{Name: "plain"})
	c := runContainer(ctx, t, plain, sleeper("plain", 0))
	if out := shOK(ctx, t, c, "echo alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("unannotated container exec: %q", out)
	}
}

// TestS06GuardCgroupWritable: with containerd's cgroup_writable = true on a
// host without nsdelegate, a container can raise its own memory.max to max
// unless cgdelegate is there; with cgdelegate it is refused.
func TestS06GuardCgroupWritable(t *testing.T) {
	e := begin(t)
	e.requirePlugin(t)
	if e.cfg.NSDelegate || e.cfg.Plugin != "external" {
		t.Fatalf("variant %s: this scenario needs no nsdelegate and an external plugin", e.cfg.Variant)
	}
	ctx := scenarioCtx(t)
	// The default runtime when the variant turned cgroup_writable on for it,
	// else the extra runtime that always has it.
	handler := writableHandler
	if e.cfg.CgroupWritable {
		handler = ""
	}

	// Baseline: the threat is real here without cgdelegate.
	if err := e.plugin.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	restart := e.restartPluginOnce(ctx, t)
	base := e.runPod(ctx, t, cri.PodSpec{Name: "baseline", RuntimeHandler: handler})
	bc := runContainer(ctx, t, base, sleeper("baseline", 64<<20))
	r := sh(ctx, t, bc, raiseScript)
	t.Logf("without cgdelegate: %s", strings.ReplaceAll(strings.TrimSpace(r.Stdout), "\n", "; "))
	if !strings.Contains(r.Stdout, "AFTER=max") {
		t.Errorf("baseline: expected cgroup_writable without nsdelegate to let the container raise memory.max to max; the harness does not reproduce the threat")
	}
	if err := base.Remove(); err != nil {
		t.Fatal(err)
	}
	restart()

	// With cgdelegate (guard: enforce, the default).
	pod := e.runPod(ctx, t, cri.PodSpec{Name: "guarded", RuntimeHandler: handler})
	c, err := pod.RunContainer(ctx, sleeper("guarded", 64<<20))
	if err == nil {
		r := sh(ctx, t, c, raiseScript)
		t.Fatalf("cgdelegate did not refuse a runtime-writable container on a host without nsdelegate; inside: %s", r.Stdout)
	}
	requireErrContains(t, "CreateContainer (cgroup_writable, no nsdelegate)", err, "nsdelegate")
	t.Logf("refusal seen by the CRI client: %v", err)
}

// cgroupRemount remounts the host cgroup2 hierarchy from the init
// namespace, with or without nsdelegate, and checks the result.
func (e *guestEnv) cgroupRemount(nsdelegate bool) error {
	data := ""
	if nsdelegate {
		data = "nsdelegate"
	}
	if err := syscall.Mount("cgroup2", e.paths.CgroupRoot, "cgroup2", syscall.MS_REMOUNT, data); err != nil {
		return fmt.Errorf("remount %s (%q): %w", e.paths.CgroupRoot, data, err)
	}
	mi, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		return fmt.Errorf("remount: %w", err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, " "+e.paths.CgroupRoot+" ") && strings.Contains(l, "nsdelegate") != nsdelegate {
			return fmt.Errorf("remount: nsdelegate=%v not in force: %q", nsdelegate, l)
		}
	}
	return nil
}

// TestS07HookRefusesAfterRemount: nsdelegate is dropped after the plugin
// admitted the container; the start is refused by cgdelegate-hook, and its
// message reaches the CRI client.
func TestS07HookRefusesAfterRemount(t *testing.T) {
	e := begin(t)
	e.requirePlugin(t)
	if !e.cfg.NSDelegate {
		t.Fatalf("variant %s has no nsdelegate to drop", e.cfg.Variant)
	}
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	// CreateContainer goes through NRI (the plugin checks nsdelegate there);
	// the hook runs when runc creates the container, at StartContainer.
	ct, err := pod.CreateContainer(ctx, sleeper("late", 0))
	if err != nil {
		t.Fatalf("CreateContainer with nsdelegate in force: %v", err)
	}
	if err := e.cgroupRemount(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.cgroupRemount(true); err != nil {
			t.Errorf("restoring nsdelegate: %v", err)
		}
	})
	err = ct.Start(ctx)
	requireErrContains(t, "StartContainer after nsdelegate was dropped", err, "nsdelegate")
	t.Logf("refusal seen by the CRI client: %v", err)
	if st, serr := ct.Status(ctx); serr == nil && st.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container is running although the hook refused it")
	}
}

// TestS08UsernsPod: in a user-namespaced pod (hostUsers: false) with the
// cgroupfs driver, the container's root can create and use child cgroups.
// The pod has its own network namespace, as Kubernetes requires for
// hostUsers: false.
func TestS08UsernsPod(t *testing.T) {
	e := begin(t)
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable(), UserNS: cri.UserNSPod(65536), PodNetwork: true})
	c := runContainer(ctx, t, pod, sleeper("userns", 0))
	if m := strings.Fields(shOK(ctx, t, c, "cat /proc/self/uid_map")); len(m) != 3 || m[0] != "0" || m[1] != "65536" {
		t.Errorf("uid_map = %q, want 0 65536 65536", m)
	}
	assertWritableMount(ctx, t, c)
	r := sh(ctx, t, c, `cd /sys/fs/cgroup
ls -ln cgroup.procs cgroup.subtree_control .
if mkdir child; then echo MKDIR=ok; else echo MKDIR=fail; fi
sleep 600 >/dev/null 2>&1 &
pid=$!
if echo $pid > child/cgroup.procs; then echo MOVE=ok; else echo MOVE=fail; fi
echo "CHILDCG=$(cat /proc/$pid/cgroup)"
kill $pid; wait $pid 2>/dev/null
rmdir child`)
	t.Logf("inside: %s", r)
	for k, want := range map[string]string{"MKDIR": "ok", "MOVE": "ok", "CHILDCG": "0::/child"} {
		if got := inspect.Markers(r.Stdout)[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// procParent returns the parent pid and the executable of pid.
func procParent(pid int) (ppid int, exe string, err error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, "", fmt.Errorf("proc %d: %w", pid, err)
	}
	// The command name may contain spaces: fields start after the last ')'.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 2 {
		return 0, "", fmt.Errorf("proc %d: short stat", pid)
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, "", fmt.Errorf("proc %d: %w", pid, err)
	}
	exe, err = os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	if err != nil {
		return 0, "", fmt.Errorf("proc %d: %w", pid, err)
	}
	return ppid, exe, nil
}

// pluginProcesses finds running cgdelegate plugin processes (not the hook).
func pluginProcesses() map[int]string {
	out := map[int]string{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join(d, "exe"))
		if err == nil && strings.Contains(filepath.Base(exe), "cgdelegate") && !strings.Contains(exe, "hook") {
			out[pid] = exe
		}
	}
	return out
}

// TestS09PluginMode: the plugin runs in the variant's mode (external:
// started by us on the NRI socket; pre-registered: started by containerd
// from /opt/nri/plugins) and works in it.
func TestS09PluginMode(t *testing.T) {
	e := begin(t)
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	procs := pluginProcesses()
	if len(procs) != 1 {
		t.Fatalf("cgdelegate processes: %v, want exactly one", procs)
	}
	for pid, exe := range procs {
		ppid, _, err := procParent(pid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("mode %s: pid %d exe %s parent %d", e.cfg.Plugin, pid, exe, ppid)
		switch e.cfg.Plugin {
		case "external":
			if exe != e.paths.PluginBinary || ppid != os.Getpid() {
				t.Errorf("external plugin: exe %s parent %d, want %s started by the suite (pid %d)", exe, ppid, e.paths.PluginBinary, os.Getpid())
			}
		case "preregistered":
			if exe != e.paths.PluginPreinstall || ppid != e.containerd.Pid() {
				t.Errorf("pre-registered plugin: exe %s parent %d, want %s started by containerd (pid %d)", exe, ppid, e.paths.PluginPreinstall, e.containerd.Pid())
			}
		default:
			t.Fatalf("unknown plugin mode %q", e.cfg.Plugin)
		}
	}
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("mode", 0))
	assertWritableMount(ctx, t, c)
	if _, err := strconv.Atoi(readCgroupFile(t, e.podCgroup(pod), "cgroup.max.descendants")); err != nil {
		t.Errorf("pod cgroup has no descendants bound: %v", err)
	}
}

// assertBounded checks that the pod's cgroup carries numeric bounds.
func (e *guestEnv) assertBounded(t *testing.T, pod *cri.Pod) {
	t.Helper()
	for _, f := range []string{"cgroup.max.descendants", "cgroup.max.depth"} {
		if v := readCgroupFile(t, e.podCgroup(pod), f); v == "max" {
			t.Errorf("pod %s: %s = max, want a bound", pod.Spec.Name, f)
		}
	}
}

// TestS10Restarts: containerd and the plugin restart; running containers
// keep their state, and new writable containers still get mount and bound.
func TestS10Restarts(t *testing.T) {
	e := begin(t)
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	podA := e.runPod(ctx, t, cri.PodSpec{Name: "a", Annotations: writable()})
	a := runContainer(ctx, t, podA, sleeper("a", 0))
	shOK(ctx, t, a, "mkdir /sys/fs/cgroup/keep && echo kept > /tmp/marker")

	if err := e.restartContainerd(ctx); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
	if e.cfg.Plugin == "external" {
		// The external plugin loses its connection with containerd.
		if err := e.restartPlugin(ctx); err != nil {
			t.Fatalf("restart plugin after containerd: %v", err)
		}
	}
	check := func(stage string) {
		t.Helper()
		st, err := a.Status(ctx)
		if err != nil || st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("%s: container a: state %v, err %v", stage, st.GetState(), err)
		}
		if out := shOK(ctx, t, a, "cat /tmp/marker && test -d /sys/fs/cgroup/keep && echo ok"); !strings.Contains(out, "ok") {
			t.Errorf("%s: container a lost its state: %q", stage, out)
		}
		assertWritableMount(ctx, t, a)
		e.assertBounded(t, podA)
	}
	check("after containerd restart")
	podB := e.runPod(ctx, t, cri.PodSpec{Name: "b", Annotations: writable()})
	b := runContainer(ctx, t, podB, sleeper("b", 0))
	assertWritableMount(ctx, t, b)
	e.assertBounded(t, podB)

	if e.cfg.Plugin == "external" {
		if err := e.restartPlugin(ctx); err != nil {
			t.Fatalf("restart plugin: %v", err)
		}
		check("after plugin restart")
		podC := e.runPod(ctx, t, cri.PodSpec{Name: "c", Annotations: writable()})
		c := runContainer(ctx, t, podC, sleeper("c", 0))
		assertWritableMount(ctx, t, c)
		e.assertBounded(t, podC)
	}
}

// TestNUMATopology checks the -smp 4 two-node variant that the pod CPU
// pinning scenarios build on.
func TestNUMATopology(t *testing.T) {
	begin(t)
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
