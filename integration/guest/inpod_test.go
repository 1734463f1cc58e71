//go:build integration_guest

package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/inspect"
)

// The in-pod tools of the busybox image (integration/vm inPodTools).
const (
	initBin      = "/usr/local/bin/cgdelegate-init"
	delegateTest = "/usr/local/bin/delegate.test"
)

// maxDescendantsAnnotation lowers the pod's cgroup.max.descendants.
const maxDescendantsAnnotation = "cgroup-max-descendants.cgdelegate.io"

// inPodCtx is a deadline for the in-pod scenarios, longer than
// scenarioCtx: twenty Go workers at once are slow under TCG.
func inPodCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// shLong runs a script with a long ExecSync timeout and requires exit 0.
func shLong(ctx context.Context, t *testing.T, c *cri.Container, timeout time.Duration, script string) string {
	t.Helper()
	r, err := c.Exec(ctx, timeout, "sh", "-c", script)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("script in %s: %s", c.Name, r)
	}
	return r.Stdout
}

// The 20 workers. Worker 7 reads 64 MiB into one buffer under a 16 MiB
// limit; every other worker wN gets (16+N) MiB and 8+N pids, prints its
// cgroup and the limits it sees, and uses 4 MiB. Each worker's exit status,
// stdout and stderr end up as markers W<N>_RC, W<N>_OUT, W<N>_ERR (newlines
// as |).
const (
	workers      = 20
	oomWorker    = 7
	workerScript = `cd /tmp && rm -f w.*
i=1
while [ $i -le 20 ]; do
	if [ $i -eq 7 ]; then
		set -- 16Mi 'dd if=/dev/zero of=/dev/null bs=64M count=1'
	else
		set -- $((16+i))Mi 'cat /proc/self/cgroup /sys/fs/cgroup/$W/memory.max /sys/fs/cgroup/$W/pids.max; dd if=/dev/zero of=/dev/null bs=1M count=4 2>/dev/null'
	fi
	( W=w$i ` + initBin + ` run --cgroup w$i --memory $1 --pids $((8+i)) -- sh -c "$2" >w.$i.out 2>w.$i.err; echo $? >w.$i.rc ) &
	i=$((i+1))
done
wait
i=1
while [ $i -le 20 ]; do
	echo "W${i}_RC=$(cat w.$i.rc)"
	echo "W${i}_OUT=$(tr '\n' '|' < w.$i.out)"
	echo "W${i}_ERR=$(tr '\n' '|' < w.$i.err)"
	i=$((i+1))
done
echo "LEFT=$(cd /sys/fs/cgroup && ls -d w* 2>/dev/null | tr '\n' ' ')"
`
)

// inPodWorkers: a script in a writable pod starts 20 workers with
// cgdelegate-init run, each in its own cgroup with its own memory and pids
// limits; one is OOM-killed and reported, the others exit 0, and every
// cgroup is removed. A worker that leaves a process behind is cleaned up
// (cgroup.kill). The delegate package's kernel tests (CLONE_INTO_CGROUP
// without fallback, removal, cgroup.kill) pass in the pod. Then a fork-bomb
// of cgroups stops at the pod bound with the helper's message.
func inPodWorkers(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := inPodCtx(t)
	const bound = 40
	ann := writable()
	ann[maxDescendantsAnnotation] = strconv.Itoa(bound)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: ann})
	c := runContainer(ctx, t, pod, sleeper("workers", 0))
	assertWritableMount(ctx, t, c)

	t.Run("Workers", func(t *testing.T) {
		start := time.Now()
		out := shLong(ctx, t, c, 5*time.Minute, workerScript)
		t.Logf("20 workers took %s", time.Since(start).Round(100*time.Millisecond))
		got := inspect.Markers(out)
		for i := 1; i <= workers; i++ {
			w := fmt.Sprintf("W%d_", i)
			rc, stdout, stderr := got[w+"RC"], got[w+"OUT"], got[w+"ERR"]
			if i == oomWorker {
				t.Logf("w%d (OOM): rc=%s stderr=%q", i, rc, stderr)
				if rc == "0" || rc == "" {
					t.Errorf("w%d exceeded its memory: exit status %q, want non-zero", i, rc)
				}
				if !strings.Contains(stderr, "OOM") || !strings.Contains(stderr, "memory.max="+strconv.Itoa(16<<20)) {
					t.Errorf("w%d stderr %q, want OOM and memory.max=%d", i, stderr, 16<<20)
				}
				continue
			}
			want := fmt.Sprintf("0::/w%d|%d|%d|", i, (16+i)<<20, 8+i)
			if rc != "0" || stdout != want || stderr != "" {
				t.Errorf("w%d: rc=%q stdout=%q stderr=%q; want rc 0, stdout %q, no stderr", i, rc, stdout, stderr, want)
			}
		}
		if left := strings.TrimSpace(got["LEFT"]); left != "" {
			t.Errorf("worker cgroups left after their workers ended: %s", left)
		}
	})

	t.Run("LeftoverKilled", func(t *testing.T) {
		r := sh(ctx, t, c, initBin+` run --cgroup leftover -- sh -c 'sleep 600 >/dev/null 2>&1 & echo $! >/tmp/leftover.pid'
echo "RC=$?"
pid=$(cat /tmp/leftover.pid)
echo "DIR=$(ls -d /sys/fs/cgroup/leftover 2>/dev/null)"
echo "STATE=$(cut -d' ' -f3 /proc/$pid/stat 2>/dev/null)"`)
		got := inspect.Markers(r.Stdout)
		if got["RC"] != "0" || got["DIR"] != "" || (got["STATE"] != "" && got["STATE"] != "Z") {
			t.Errorf("worker leaving a process behind: %s; want RC=0, no DIR, the process gone (or a zombie)", r)
		}
	})

	t.Run("KernelTests", func(t *testing.T) {
		r, err := c.Exec(ctx, 3*time.Minute, "env", "CGDELEGATE_TEST_CGROUP_ROOT=/sys/fs/cgroup",
			delegateTest, "-test.run", "^TestKernel", "-test.v", "-test.count=1")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("delegate.test in the pod:\n%s%s", r.Stdout, r.Stderr)
		if r.ExitCode != 0 || strings.Contains(r.Stdout, "SKIP") {
			t.Errorf("delegate kernel tests: exit %d, want 0 and nothing skipped", r.ExitCode)
		}
		for _, name := range []string{"TestKernelStart/CLONE_INTO_CGROUP", "TestKernelStart/Start", "TestKernelRemoveKillsLeftovers"} {
			if !strings.Contains(r.Stdout, "--- PASS: "+name) {
				t.Errorf("%s did not pass", name)
			}
		}
	})

	t.Run("ForkBomb", func(t *testing.T) {
		// The bound in force is the pod's cap (the annotation) less the
		// dying cgroups the workers above left, as cgdelegate last set it
		// (every second): never above the cap.
		podCg := e.podCgroup(pod)
		inForce, err := strconv.Atoi(readCgroupFile(t, podCg, "cgroup.max.descendants"))
		if err != nil || inForce > bound || inForce < 0 {
			t.Fatalf("pod cgroup.max.descendants = %d (%v), want 0 to %d (annotation %s, less the pod's dying cgroups)", inForce, err, bound, maxDescendantsAnnotation)
		}
		stat := inspect.KeyValues(readCgroupFile(t, podCg, "cgroup.stat"))
		before, err := strconv.Atoi(stat["nr_descendants"])
		if err != nil {
			t.Fatalf("cgroup.stat: %v", err)
		}
		out := shLong(ctx, t, c, 5*time.Minute, `echo "ENV=$CGDELEGATE_MAX_DESCENDANTS"
i=0
while [ $i -lt 500 ] && `+initBin+` run --keep --cgroup bomb$i -- true 2>/tmp/bomb.err; do i=$((i+1)); done
echo "COUNT=$i"
echo "ERR=$(cat /tmp/bomb.err)"
j=0; while [ $j -lt $i ]; do rmdir /sys/fs/cgroup/bomb$j; j=$((j+1)); done`)
		got := inspect.Markers(out)
		t.Logf("fork-bomb: bound in force %d of cap %d (%s dying), %d descendants before, %s made, %q",
			inForce, bound, stat["nr_dying_descendants"], before, got["COUNT"], got["ERR"])
		if got["ENV"] != strconv.Itoa(bound) {
			t.Errorf("CGDELEGATE_MAX_DESCENDANTS = %q, want %d", got["ENV"], bound)
		}
		// The bomb's cgroups stay live (--keep): the kernel stops it at the
		// bound in force, which dying cgroups freed meanwhile may raise,
		// never past the cap.
		if n, err := strconv.Atoi(got["COUNT"]); err != nil || n < 1 || n > bound-before {
			t.Errorf("made %s cgroups, want 1 to %d (cap %d - %d existing)", got["COUNT"], bound-before, bound, before)
		}
		if want := "pod cgroup bound reached (cgroup.max.descendants="; !strings.Contains(got["ERR"], want) {
			t.Errorf("the helper stopped with %q, want it to say %q", got["ERR"], want)
		}
	})
}

// inPodExecAfterLeafMove: the container runs cgdelegate-init as its
// entrypoint, which moves its processes into the leaf init and enables the
// controllers in the root. The root can then hold no process, yet CRI
// ExecSync works (runc joins the init process's cgroup instead), and so do
// probe-shaped calls: a 1 s timeout, as a kubelet exec probe's default.
func inPodExecAfterLeafMove(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := scenarioCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	c := runContainer(ctx, t, pod, cri.ContainerSpec{
		Name: "entry", Image: busyboxImage, Command: []string{initBin, "--", "sleep", "3600"},
	})
	cg := e.containerCgroup(t, pod, c)
	prepared := func() bool {
		procs, err1 := readFileTrim(filepath.Join(cg, "cgroup.procs"))
		leaf, err2 := readFileTrim(filepath.Join(cg, "init", "cgroup.procs"))
		ctl, err3 := readFileTrim(filepath.Join(cg, "cgroup.subtree_control"))
		return err1 == nil && err2 == nil && err3 == nil && procs == "" && leaf != "" && strings.Contains(ctl, "memory")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !prepared() {
		if time.Now().After(deadline) {
			t.Fatalf("cgdelegate-init did not prepare %s in 30 s: procs %q, subtree_control %q", cg,
				readCgroupFile(t, cg, "cgroup.procs"), readCgroupFile(t, cg, "cgroup.subtree_control"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("root prepared: subtree_control %q, leaf init holds %q", readCgroupFile(t, cg, "cgroup.subtree_control"),
		readCgroupFile(t, filepath.Join(cg, "init"), "cgroup.procs"))

	r, err := c.Exec(ctx, 60*time.Second, "cat", "/proc/self/cgroup")
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("ExecSync after the leaf move: %v %s", err, r)
	}
	if got := inspect.CgroupPath(r.Stdout); got != "/init" {
		t.Errorf("exec landed in %q, want /init (the init process's cgroup)", got)
	}
	for i := range 3 {
		start := time.Now()
		r, err := c.Exec(ctx, time.Second, "sh", "-c", "test -d /sys/fs/cgroup/init && grep -qw memory /sys/fs/cgroup/cgroup.subtree_control")
		if err != nil || r.ExitCode != 0 {
			t.Errorf("probe %d (ExecSync, timeout 1s): %v %s", i+1, err, r)
			continue
		}
		t.Logf("probe %d passed in %s", i+1, time.Since(start).Round(time.Millisecond))
	}
	out := shOK(ctx, t, c, "echo PID1=$(tr '\\0' ' ' < /proc/1/cmdline); echo LEAF=$(cat /sys/fs/cgroup/init/cgroup.procs | tr '\\n' ' '); "+initBin+" tree")
	got := inspect.Markers(out)
	if !strings.HasPrefix(got["PID1"], initBin+" -- sleep") || !strings.Contains(" "+got["LEAF"], " 1 ") {
		t.Errorf("PID 1 %q in leaf %q: want cgdelegate-init, in init", got["PID1"], got["LEAF"])
	}
	if !strings.Contains(out, "\ninit ") {
		t.Errorf("cgdelegate-init tree does not list init:\n%s", out)
	}
	if procs := readCgroupFile(t, cg, "cgroup.procs"); procs != "" {
		t.Errorf("the container's root cgroup holds %q after the execs, want nothing", procs)
	}
	st, err := c.Status(ctx)
	if err != nil || st.GetState().String() != "CONTAINER_RUNNING" {
		t.Errorf("container state %v (%v), want running", st.GetState(), err)
	}
}

// readFileTrim reads a file, trimmed, without failing the test.
func readFileTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// The nested container of InPodNestedRunc: busybox's /bin copied into a
// bundle under /tmp, its own pid, ipc, uts, mount and cgroup namespaces
// (the pod's user and network namespaces), a fresh /proc and cgroup2 mount,
// /sys bound read-only, and memory.max and pids.max that runc writes into
// the delegated subtree at /nested. Its process reports what it sees, then
// hits both limits: a fork loop stops at pids.max, and dd reading 64 MiB in
// one buffer is OOM-killed.
const (
	nestedMemory = 32 << 20
	nestedPids   = 32
	nestedConfig = `{
  "ociVersion": "1.2.0",
  "process": {
    "terminal": false,
    "user": {"uid": 0, "gid": 0},
    "args": ["sh", "-c", "echo CG=$(cat /proc/self/cgroup); echo MEM=$(cat /sys/fs/cgroup/memory.max); echo PIDS=$(cat /sys/fs/cgroup/pids.max); echo PID=$$; dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null; echo DDRC=$?; echo OOMKILL=$(grep oom_kill /sys/fs/cgroup/memory.events); sh -c 'i=0; while [ $i -lt 60 ]; do sleep 300 & i=$((i+1)); done' 2>/dev/null; read cur < /sys/fs/cgroup/pids.current; echo PIDSCUR=$cur; while read k v; do [ $k = max ] && echo PIDSEVENTS=max $v; done < /sys/fs/cgroup/pids.events; echo READY; exec sleep 600"],
    "env": ["PATH=/bin"],
    "cwd": "/",
    "capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]},
    "noNewPrivileges": true
  },
  "root": {"path": "rootfs"},
  "hostname": "nested",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/sys", "type": "none", "source": "/sys", "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]},
    {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
  ],
  "linux": {
    "cgroupsPath": "/nested",
    "resources": {"memory": {"limit": 33554432}, "pids": {"limit": 32}},
    "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "cgroup"}]
  }
}`
	// nestedSetup writes the bundle and starts the nested container in the
	// background; its output, then runc's exit status (EXIT), go to
	// /tmp/nested.log.
	nestedSetup = `set -e
B=/tmp/nested
rm -rf $B && mkdir -p $B/rootfs/proc $B/rootfs/sys $B/rootfs/dev $B/rootfs/tmp
cp -a /bin $B/rootfs/
cat > $B/config.json <<'CONFIG'
` + nestedConfig + `
CONFIG
( runc --root /tmp/runc --log /tmp/runc.log run --no-pivot --no-new-keyring -b $B nested1
  echo "EXIT=$?" ) </dev/null >/tmp/nested.log 2>&1 &
echo "RC=0"
`
)

// nestedDiag says what became of the nested container.
const nestedDiag = `runc --root /tmp/runc list
n=/sys/fs/cgroup/nested; cat $n/cgroup.procs $n/memory.events $n/pids.events
ps -o pid,ppid,stat,args
for p in $(cat $n/cgroup.procs); do echo "== $p: $(tr '\0' ' ' < /proc/$p/cmdline)"; grep State /proc/$p/status; cat /proc/$p/wchan; echo; ls -l /proc/$p/fd; done
tail -30 /tmp/runc.log`

// waitNested waits until the nested container reported (READY) or runc
// ended (EXIT), and returns /tmp/nested.log.
func waitNested(ctx context.Context, t *testing.T, c *cri.Container) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		log := shOK(ctx, t, c, "cat /tmp/nested.log")
		if strings.Contains(log, "READY") || strings.Contains(log, "EXIT=") {
			return log
		}
		if time.Now().After(deadline) {
			diag, _ := c.Sh(ctx, nestedDiag)
			t.Fatalf("the nested container never reported; log:\n%s\ndiagnosis: %s", log, diag)
		}
		time.Sleep(time.Second)
	}
}

// nestedRuncContainer is the pod securityContext InPodNestedRunc proves
// sufficient, and docs/in-pod.md shows: SYS_ADMIN (in the pod's user
// namespace), the runtime's default seccomp profile, and the /proc masks a
// kubelet sends by default (procMount: Default). The masks do not stop the
// nested /proc mount: they were made inside the pod's user namespace, so
// the kernel does not lock them.
func nestedRuncContainer(name string) cri.ContainerSpec {
	return cri.ContainerSpec{
		Name: name, Image: busyboxImage, Command: []string{initBin, "--", "sleep", "3600"},
		CapAdd: []string{"SYS_ADMIN"}, SeccompRuntimeDefault: true, ProcMount: cri.ProcMountDefault,
	}
}

// inPodNestedRunc: a user-namespaced (hostUsers: false), unprivileged,
// writable pod runs the static runc, whose nested container gets memory.max
// and pids.max through the delegated subtree, and hits both.
func inPodNestedRunc(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := inPodCtx(t)
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable(), UserNS: cri.UserNSPod(131072), PodNetwork: true})
	spec := nestedRuncContainer("nested")
	if e.variant.AppArmor {
		nestedRuncDeniedByDefaultProfile(ctx, t, pod)
		e.loadEngineProfiles(ctx, t)
		spec.AppArmorLocalhost = enginesAppArmorProfile
	}
	c := runContainer(ctx, t, pod, spec)
	if e.variant.AppArmor {
		if got, want := appArmorLabel(ctx, t, c), enginesAppArmorProfile+" (enforce)"; got != want {
			t.Errorf("the nested runc's container runs as %q, want %q", got, want)
		}
	}
	out := shOK(ctx, t, c, `echo "UIDMAP=$(cat /proc/self/uid_map)"; echo "SECCOMP=$(grep '^Seccomp:' /proc/self/status | tr -dc 0-9)"`)
	got := inspect.Markers(out)
	if f := strings.Fields(got["UIDMAP"]); len(f) != 3 || f[0] != "0" || f[1] != "131072" {
		t.Errorf("uid_map %q, want 0 131072 ...: not a user-namespaced pod", got["UIDMAP"])
	}
	if got["SECCOMP"] != "2" {
		t.Errorf("Seccomp = %q, want 2 (filter: the runtime's default profile)", got["SECCOMP"])
	}
	t.Logf("pod container: %s", out)

	r, err := c.Exec(ctx, 2*time.Minute, "sh", "-c", nestedSetup)
	if err != nil || inspect.Markers(r.Stdout)["RC"] != "0" {
		log, _ := c.Sh(ctx, "cat /tmp/nested.log")
		t.Fatalf("runc run in the pod: %v %s\nlog: %s", err, r, log.Stdout)
	}
	t.Cleanup(func() {
		_, _ = c.Sh(context.Background(), "runc --root /tmp/runc delete -f nested1")
	})
	log := waitNested(ctx, t, c)
	t.Logf("nested container:\n%s", log)
	if !strings.Contains(log, "READY") {
		diag, _ := c.Sh(ctx, nestedDiag)
		t.Fatalf("the nested container ended early; diagnosis: %s", diag)
	}
	nested := inspect.Markers(log)
	// Seen from the host: runc wrote the limits in the pod's subtree.
	hostDir := filepath.Join(e.containerCgroup(t, pod, c), "nested")
	if got := readCgroupFile(t, hostDir, "memory.max"); got != strconv.Itoa(nestedMemory) {
		t.Errorf("host %s/memory.max = %s, want %d", hostDir, got, nestedMemory)
	}
	if got := readCgroupFile(t, hostDir, "pids.max"); got != strconv.Itoa(nestedPids) {
		t.Errorf("host %s/pids.max = %s, want %d", hostDir, got, nestedPids)
	}
	want := map[string]string{"CG": "0::/", "MEM": strconv.Itoa(nestedMemory), "PIDS": strconv.Itoa(nestedPids), "PID": "1", "DDRC": "137"}
	for k, v := range want {
		if nested[k] != v {
			t.Errorf("nested %s = %q, want %q", k, nested[k], v)
		}
	}
	if cur, err := strconv.Atoi(nested["PIDSCUR"]); err != nil || cur > nestedPids {
		t.Errorf("nested pids.current %q after a fork loop, want at most %d", nested["PIDSCUR"], nestedPids)
	}
	if nested["PIDSEVENTS"] == "max 0" || !strings.HasPrefix(nested["PIDSEVENTS"], "max ") {
		t.Errorf("nested pids.events %q, want forks refused at pids.max", nested["PIDSEVENTS"])
	}
	if nested["OOMKILL"] == "oom_kill 0" || !strings.HasPrefix(nested["OOMKILL"], "oom_kill ") {
		t.Errorf("nested memory.events %q, want an OOM kill", nested["OOMKILL"])
	}
	// runc run ends when its container does, and removes the cgroup.
	shOK(ctx, t, c, "runc --root /tmp/runc kill nested1 KILL; i=0; while [ $i -lt 100 ] && ! grep -q EXIT= /tmp/nested.log; do sleep 0.2; i=$((i+1)); done; test ! -e /sys/fs/cgroup/nested")
}

// nestedRuncDeniedByDefaultProfile: on an AppArmor node, the same
// container under containerd's default AppArmor profile (no
// appArmorProfile) cannot run runc: the profile's "deny mount" refuses
// runc's first mount with EACCES, which runc reports as "permission
// denied", and cgdelegate-init, the container's PID 1, says at its start
// that the profile denies mounts and names the fix.
func nestedRuncDeniedByDefaultProfile(ctx context.Context, t *testing.T, pod *cri.Pod) {
	t.Helper()
	c := runContainer(ctx, t, pod, nestedRuncContainer("nested-default"))
	if got := appArmorLabel(ctx, t, c); got != defaultAppArmorLabel {
		t.Errorf("a container without appArmorProfile runs as %q, want %q", got, defaultAppArmorLabel)
	}
	if r, err := c.Exec(ctx, 2*time.Minute, "sh", "-c", nestedSetup); err != nil || inspect.Markers(r.Stdout)["RC"] != "0" {
		t.Fatalf("nested setup: %v %s", err, r)
	}
	deadline := time.Now().Add(60 * time.Second)
	var log string
	for !strings.Contains(log, "permission denied") && !strings.Contains(log, "READY") {
		if time.Now().After(deadline) {
			t.Fatalf("runc under the default profile: neither refused nor ready after 60 s:\n%s", log)
		}
		time.Sleep(time.Second)
		log = shOK(ctx, t, c, "cat /tmp/nested.log")
	}
	t.Logf("runc under %s: %s", defaultAppArmorLabel, strings.TrimSpace(log))
	if !strings.Contains(log, "permission denied") {
		t.Errorf("runc ran under containerd's default AppArmor profile; want its mounts denied:\n%s", log)
	}
	initLog := waitContainerLine(ctx, t, pod, c, 10*time.Second, "AppArmor", enginesAppArmorProfile)
	t.Logf("cgdelegate-init under the default profile:\n%s", initLog)
	if err := c.Stop(ctx, 0); err != nil {
		t.Error(err)
	}
}

// systemdDeniedByDefaultProfile: on an AppArmor node, systemd as PID 1
// under containerd's default AppArmor profile (spec without
// appArmorProfile) cannot mount its API file systems ("deny mount": EACCES)
// and its container ends at once, with status 255 and an empty log (seen
// on Debian's systemd 252): there is no message to name AppArmor, so
// docs/in-pod.md names the profile to use.
func systemdDeniedByDefaultProfile(ctx context.Context, t *testing.T, pod *cri.Pod, spec cri.ContainerSpec) {
	t.Helper()
	spec.Name = "systemd-default"
	c := runContainer(ctx, t, pod, spec)
	deadline := time.Now().Add(90 * time.Second)
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			log, lerr := os.ReadFile(containerLogPath(pod, c))
			t.Logf("systemd under %s exited with %d after %s; its log (%v): %q", defaultAppArmorLabel, st.GetExitCode(),
				time.Duration(st.GetFinishedAt()-st.GetStartedAt()).Round(time.Millisecond), lerr, log)
			if st.GetExitCode() == 0 {
				t.Errorf("systemd under containerd's default AppArmor profile exited 0; want it refused")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("systemd under containerd's default AppArmor profile still %s after 90 s; want it to end", st.GetState())
			break
		}
		time.Sleep(2 * time.Second)
	}
	if err := c.Stop(ctx, 0); err != nil {
		t.Error(err)
	}
}

// The systemd image (integration/vm systemdPodImage), imported only by the
// scenario that runs it.
const (
	systemdImage        = "cgd.local/systemd:1"
	systemdPodImagePath = "/cgd/pod-images/systemd.tar"
)

// inPodSystemd: systemd from Debian packages is PID 1 of a writable,
// user-namespaced pod; it reaches running (or degraded), and systemd-run
// makes a scope with MemoryMax inside the pod's cgroup subtree.
func inPodSystemd(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	ctx := inPodCtx(t)
	if out, err := exec.CommandContext(ctx, "ctr", "--address", e.paths.ContainerdSocket, "-n", "k8s.io",
		"images", "import", systemdPodImagePath).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import %s: %v\n%s", systemdPodImagePath, err, out)
	}
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable(), UserNS: cri.UserNSPod(262144), PodNetwork: true})
	spec := cri.ContainerSpec{
		Name: "systemd", Image: systemdImage,
		CapAdd: []string{"SYS_ADMIN"}, SeccompRuntimeDefault: true,
	}
	if e.variant.AppArmor {
		systemdDeniedByDefaultProfile(ctx, t, pod, spec)
		e.loadEngineProfiles(ctx, t)
		spec.AppArmorLocalhost = enginesAppArmorProfile
	}
	c := runContainer(ctx, t, pod, spec)
	// systemctl needs systemd's private socket, which appears a few
	// seconds after the start.
	start := time.Now()
	var r cri.ExecResult
	for {
		var err error
		r, err = c.Exec(ctx, 4*time.Minute, "systemctl", "is-system-running", "--wait")
		if err != nil {
			t.Fatalf("systemctl is-system-running: %v", err)
		}
		if !strings.Contains(r.Stderr, "Failed to connect to bus") || time.Since(start) > 2*time.Minute {
			break
		}
		time.Sleep(2 * time.Second)
	}
	state := strings.TrimSpace(r.Stdout)
	t.Logf("systemctl is-system-running: %q after %s (exit %d, stderr %q)", state, time.Since(start).Round(time.Second), r.ExitCode, r.Stderr)
	if state != "running" {
		failed, _ := c.Exec(ctx, time.Minute, "systemctl", "--failed", "--no-legend", "--plain")
		t.Logf("failed units:\n%s%s", failed.Stdout, failed.Stderr)
	}
	if state != "running" && state != "degraded" {
		jr, _ := c.Exec(ctx, time.Minute, "journalctl", "-b", "--no-pager", "-n", "60")
		t.Fatalf("systemd state %q, want running or degraded; journal:\n%s", state, jr.Stdout)
	}

	// A scope with a memory limit, seen from inside and from the node.
	shOK(ctx, t, c, "systemd-run --scope --unit=cgd-probe -p MemoryMax=64M sleep 300 >/dev/null 2>&1 &")
	var scope string
	deadline := time.Now().Add(30 * time.Second)
	for scope == "" {
		matches, _ := filepath.Glob(filepath.Join(e.containerCgroup(t, pod, c), "*", "cgd-probe.scope"))
		if len(matches) == 1 {
			scope = matches[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cgd-probe.scope below the container's cgroup %s after 30 s", e.containerCgroup(t, pod, c))
		}
		time.Sleep(500 * time.Millisecond)
	}
	rel, _ := filepath.Rel(e.containerCgroup(t, pod, c), scope)
	t.Logf("scope on the node: %s", scope)
	if got := readCgroupFile(t, scope, "memory.max"); got != strconv.Itoa(64<<20) {
		t.Errorf("%s/memory.max = %s, want %d", scope, got, 64<<20)
	}
	inside := inspect.Markers(shOK(ctx, t, c, `echo "PROPS=$(systemctl show -p MemoryMax -p ControlGroup cgd-probe.scope | tr '\n' ' ')"`))
	if want := "ControlGroup=/" + rel; !strings.Contains(inside["PROPS"], want) || !strings.Contains(inside["PROPS"], "MemoryMax=67108864") {
		t.Errorf("systemctl show cgd-probe.scope: %q, want %s and MemoryMax=67108864", inside["PROPS"], want)
	}
	shOK(ctx, t, c, "systemctl stop cgd-probe.scope")
}
