//go:build integration_guest

package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

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

// pluginMode (S09): the plugin runs in the variant's mode (external: started
// by us on the NRI socket; pre-registered: started by containerd from
// /opt/nri/plugins) and works in it.
func pluginMode(t *testing.T, e *guestEnv) {
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
		t.Logf("mode %s: pid %d exe %s parent %d", e.variant.Plugin, pid, exe, ppid)
		switch e.variant.Plugin {
		case variant.PluginExternal:
			if exe != e.paths.PluginBinary || ppid != os.Getpid() {
				t.Errorf("external plugin: exe %s parent %d, want %s started by the suite (pid %d)", exe, ppid, e.paths.PluginBinary, os.Getpid())
			}
		case variant.PluginPreregistered:
			if exe != e.paths.PluginPreinstall || ppid != e.containerd.Pid() {
				t.Errorf("pre-registered plugin: exe %s parent %d, want %s started by containerd (pid %d)", exe, ppid, e.paths.PluginPreinstall, e.containerd.Pid())
			}
		default:
			t.Fatalf("unknown plugin mode %q", e.variant.Plugin)
		}
	}
	pod := e.runPod(ctx, t, cri.PodSpec{Annotations: writable()})
	c := runContainer(ctx, t, pod, sleeper("mode", 0))
	assertWritableMount(ctx, t, c)
	if _, err := strconv.Atoi(readCgroupFile(t, e.podCgroup(pod), "cgroup.max.descendants")); err != nil {
		t.Errorf("pod cgroup has no descendants bound: %v", err)
	}
}
