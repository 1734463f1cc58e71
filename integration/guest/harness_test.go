//go:build integration_guest

package guest

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// harness checks the proving ground itself, without cgdelegate: the
// host is pure cgroup v2 as the variant says, containerd answers the CRI,
// the images are there, and a pod's busybox container runs and can be
// exec'd into. With cgdelegate on the node, it also checks that cgdelegate
// reports whether containerd fails closed as the variant configured it.
func harness(t *testing.T, e *guestEnv) {
	ctx := scenarioCtx(t)

	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, " /sys/fs/cgroup ") {
			line = l
		}
	}
	if !strings.Contains(line, " - cgroup2 ") {
		t.Fatalf("host /sys/fs/cgroup is not cgroup2: %q", line)
	}
	if got := strings.Contains(line, "nsdelegate"); got != e.variant.NSDelegate {
		t.Errorf("host nsdelegate = %v, variant wants %v: %q", got, e.variant.NSDelegate, line)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.subtree_control"); err != nil {
		t.Errorf("no cgroup v2 root: %v", err)
	}
	// PID 1 is what the variant says: systemd, or the busybox init.sh.
	if comm, err := os.ReadFile("/proc/1/comm"); err != nil {
		t.Errorf("PID 1: %v", err)
	} else if got := strings.TrimSpace(string(comm)) == "systemd"; got != e.variant.Systemd {
		t.Errorf("PID 1 is %q, variant wants systemd %v", strings.TrimSpace(string(comm)), e.variant.Systemd)
	}

	v, err := e.cri.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("CRI Version: %v", err)
	}
	t.Logf("runtime %s %s (CRI %s)", v.GetRuntimeName(), v.GetRuntimeVersion(), v.GetRuntimeApiVersion())
	if want := strings.TrimPrefix(e.variant.Containerd, "v"); !strings.HasPrefix(v.GetRuntimeVersion(), want) &&
		!strings.HasPrefix(v.GetRuntimeVersion(), "v"+want) {
		t.Errorf("containerd version %q, variant wants %s", v.GetRuntimeVersion(), e.variant.Containerd)
	}
	// The CRI image store learns of `ctr images import` from containerd's
	// events, a moment after the import returns: once on
	// ctd24-preregistered (2026-11-28) the pause image was not there yet.
	for _, img := range []string{busyboxImage, pauseImage} {
		deadline := time.Now().Add(15 * time.Second)
		for {
			st, err := e.cri.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: img}})
			if err == nil && st.GetImage() != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("image %s not in the CRI image store 15 s after its import: %v", img, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	pod := e.runPod(ctx, t, cri.PodSpec{})
	c := runContainer(ctx, t, pod, sleeper("box", 0))
	r := sh(ctx, t, c, "echo hello from $(hostname); id -u; cat /proc/self/cgroup")
	if r.ExitCode != 0 || !strings.Contains(r.Stdout, "hello from") {
		t.Fatalf("exec in a busybox container: %s", r)
	}
	t.Logf("exec: %q", r.Stdout)
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container state %s, want RUNNING", st.GetState())
	}
	// The node's AppArmor is what the variant says: on an AppArmor node
	// containerd gives a container that asks for no profile its default
	// one; elsewhere the container is unconfined.
	checkAppArmorNode(t, e.variant.AppArmor)
	label := strings.TrimSpace(shOK(ctx, t, c, "cat /proc/self/attr/apparmor/current 2>/dev/null || echo none"))
	t.Logf("the container's AppArmor label: %q", label)
	if got := label == defaultAppArmorLabel; got != e.variant.AppArmor {
		t.Errorf("a container without a profile runs as %q; want %q exactly on an AppArmor node (%v)", label, defaultAppArmorLabel, e.variant.AppArmor)
	}
	// The pod cgroup is where the cgroup driver was told to put it (the
	// slice, expanded, with the systemd driver).
	if _, err := os.Stat(e.podCgroup(pod) + "/cgroup.procs"); err != nil {
		t.Errorf("pod cgroup %s: %v", e.podCgroup(pod), err)
	}
	// The plugin on the node (not in a pod) says whether containerd fails
	// closed.
	if e.variant.Plugin == variant.PluginExternal || e.variant.Plugin == variant.PluginPreregistered {
		checkFailClosedReport(t, e)
	}
}

// defaultAppArmorLabel is the label of a container confined by
// containerd's default AppArmor profile.
const defaultAppArmorLabel = "cri-containerd.apparmor.d (enforce)"

// checkAppArmorNode checks the node's LSMs: on an AppArmor node the kernel
// lists apparmor (and not selinux) in securityfs, the module is enabled and
// containerd finds apparmor_parser; on any other node the module is off or
// securityfs is absent (the busybox init mounts none), so containerd
// treats AppArmor as off.
func checkAppArmorNode(t *testing.T, want bool) {
	t.Helper()
	lsm, lerr := os.ReadFile("/sys/kernel/security/lsm")
	enabled, eerr := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	_, perr := exec.LookPath("apparmor_parser")
	t.Logf("LSMs %q (%v); apparmor enabled %q (%v); apparmor_parser on PATH: %v", strings.TrimSpace(string(lsm)), lerr, strings.TrimSpace(string(enabled)), eerr, perr == nil)
	on := lerr == nil && eerr == nil && strings.TrimSpace(string(enabled)) == "Y"
	if on != want {
		t.Errorf("AppArmor on the node: %v, variant wants %v", on, want)
	}
	if !want {
		return
	}
	lsms := strings.Split(strings.TrimSpace(string(lsm)), ",")
	if !slices.Contains(lsms, "apparmor") || slices.Contains(lsms, "selinux") {
		t.Errorf("LSMs %q; want apparmor and not selinux", lsm)
	}
	if perr != nil {
		t.Errorf("apparmor_parser: %v; containerd applies no profile without it", perr)
	}
}
