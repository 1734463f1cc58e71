//go:build integration_guest

package guest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
)

// enginesAppArmorProfile is the AppArmor profile cgdelegate ships for
// nested runtimes, systemd and container engines in a pod
// (docs/engine-profiles.md).
const enginesAppArmorProfile = "cgdelegate-engines"

// seccompDir is where the kubelet reads Localhost seccomp profiles
// (<root-dir>/seccomp), and enginesSeccomp is cgdelegate's below it.
const (
	seccompDir     = "/var/lib/kubelet/seccomp"
	enginesSeccomp = "cgdelegate/engines.json"
)

// loadEngineProfiles installs cgdelegate's engine profiles on the node
// with the command the chart's init container runs (cgdelegate
// install-profiles), once per boot, and checks the kernel has the AppArmor
// one loaded.
func (e *guestEnv) loadEngineProfiles(ctx context.Context, t *testing.T) {
	t.Helper()
	if !e.engineProfiles {
		start := time.Now()
		out, err := exec.CommandContext(ctx, e.paths.PluginBinary, "install-profiles",
			"-apparmor", "-host-root", "/", "-seccomp-dir", filepath.Join(seccompDir, filepath.Dir(enginesSeccomp))).CombinedOutput()
		if err != nil {
			t.Fatalf("cgdelegate install-profiles: %v\n%s", err, out)
		}
		t.Logf("cgdelegate install-profiles took %s: %s", time.Since(start).Round(100*time.Millisecond), strings.TrimSpace(string(out)))
		e.engineProfiles = true
	}
	loaded, err := os.ReadFile("/sys/kernel/security/apparmor/profiles")
	if err != nil || !strings.Contains(string(loaded), enginesAppArmorProfile+" (enforce)") {
		t.Fatalf("the kernel's AppArmor profiles (%v):\n%s\nwant %s (enforce)", err, loaded, enginesAppArmorProfile)
	}
	if _, err := os.Stat(filepath.Join(seccompDir, enginesSeccomp)); err != nil {
		t.Fatalf("the engines' seccomp profile: %v", err)
	}
}

// appArmorLabel is the AppArmor label of the container's processes.
func appArmorLabel(ctx context.Context, t *testing.T, c *cri.Container) string {
	t.Helper()
	return strings.TrimSpace(shOK(ctx, t, c, "cat /proc/self/attr/apparmor/current 2>/dev/null || cat /proc/self/attr/current"))
}

// containerLogPath is the container's CRI log file.
func containerLogPath(pod *cri.Pod, c *cri.Container) string {
	return filepath.Join(pod.Config.GetLogDirectory(), c.Name+".log")
}

// waitContainerLine waits up to timeout for a line of the container's CRI
// log that has every one of words, and returns the log.
func waitContainerLine(ctx context.Context, t *testing.T, pod *cri.Pod, c *cri.Container, timeout time.Duration, words ...string) string {
	t.Helper()
	path := containerLogPath(pod, c)
	err := waitLog(ctx, path, 0, timeout, func(l string) bool {
		for _, w := range words {
			if !strings.Contains(l, w) {
				return false
			}
		}
		return true
	}, func() error { return nil })
	log, _ := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no line with %q in the log of %s: %v\n%s", words, c.Name, err, log)
	}
	return string(log)
}

// assertEngineProfilesInstalled: the chart's install-profiles init
// container (engineProfiles) put the seccomp profile where the kubelet
// reads Localhost ones and loaded the AppArmor
// profile with the node's parser and left its source in /etc/apparmor.d,
// where apparmor.service loads it at the next boot.
func assertEngineProfilesInstalled(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(seccompDir, enginesSeccomp)); err != nil {
		t.Errorf("the engines' seccomp profile on the node: %v", err)
	}
	if _, err := os.Stat(filepath.Join("/etc/apparmor.d", enginesAppArmorProfile)); err != nil {
		t.Errorf("the engines' AppArmor profile's source on the node: %v", err)
	}
	loaded, err := os.ReadFile("/sys/kernel/security/apparmor/profiles")
	if err != nil || !strings.Contains(string(loaded), enginesAppArmorProfile+" (enforce)") {
		t.Errorf("the kernel's AppArmor profiles (%v):\n%s\nwant %s (enforce)", err, loaded, enginesAppArmorProfile)
	}
}

// assertPluginConfinement: the chart's plugin pod, which is not
// privileged, runs under containerd's default AppArmor profile on an
// AppArmor node (and works there: the scenario goes on to use it), and
// unconfined elsewhere.
func assertPluginConfinement(t *testing.T, pid int, appArmor bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "attr/apparmor/current"))
	label := strings.TrimSpace(string(b))
	t.Logf("the plugin (PID %d) runs as %q (%v)", pid, label, err)
	if appArmor && label != defaultAppArmorLabel {
		t.Errorf("the plugin's AppArmor label %q (%v), want %q on an AppArmor node", label, err, defaultAppArmorLabel)
	}
}
