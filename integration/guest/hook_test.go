//go:build integration_guest

package guest

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

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

// hookRefusesAfterRemount (S07): nsdelegate is dropped after the plugin
// admitted the container; the start is refused by cgdelegate-hook, and its
// message reaches the CRI client.
func hookRefusesAfterRemount(t *testing.T, e *guestEnv) {
	e.requirePlugin(t)
	if !e.variant.NSDelegate {
		t.Fatalf("variant %s has no nsdelegate to drop", e.variant.Name)
	}
	ctx := scenarioCtx(t)
	e.mountCheckAgrees(t, true)
	if rep, raw := e.cgdelegateStatus(t); e.variant.Plugin == variant.PluginExternal {
		// A host process with the host's privileges: statmount(2).
		requireMountCheck(t, rep, raw, true)
	}
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
	e.mountCheckAgrees(t, false)
	err = ct.Start(ctx)
	requireErrContains(t, "StartContainer after nsdelegate was dropped", err, "nsdelegate")
	t.Logf("refusal seen by the CRI client: %v", err)
	if st, serr := ct.Status(ctx); serr == nil && st.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container is running although the hook refused it")
	}
}

// mountCheckAgrees: the mount check the plugin and the hook make on every
// writable container, by statmount(2) where the kernel answers (Linux
// 6.11+, the guest's 6.12), says what the whole host mount table says, and
// a Checker uses statmount once the host is safe.
func (e *guestEnv) mountCheckAgrees(t *testing.T, safe bool) {
	t.Helper()
	const table = "/proc/1/mountinfo"
	data, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	want, err := host.ParseMountinfo(bytes.NewReader(data), e.paths.CgroupRoot)
	if err != nil {
		t.Fatal(err)
	}
	if (want.Err() == nil) != safe {
		t.Fatalf("the mount table says %v, want safe %t", want.Err(), safe)
	}
	c := host.NewChecker(table, e.paths.CgroupRoot)
	defer c.Close()
	// Every Check asks again: the first reads the table (and tries the
	// probe against it), the second uses the probe when it agreed.
	c.MaxAge = 0
	for i := range 2 {
		if got, err := c.Check(); err != nil || got != want {
			t.Errorf("Checker, check %d: %+v, %v; the table says %+v", i, got, err, want)
		}
	}
	if mode := c.Mode(); (mode == "statmount") != safe {
		t.Errorf("Checker mode %q with the host safe %t: statmount answers exactly the safe verdicts", mode, safe)
	}
	if got, err := host.CheckMounts(table, e.paths.CgroupRoot); err != nil || got != want {
		t.Errorf("CheckMounts (the hook's check): %+v, %v; the table says %+v", got, err, want)
	}
}

// requireMountCheck checks how the running plugin reads the mount check
// (status.Report.MountCheck): by statmount(2), or by the whole table with
// the reason why not.
func requireMountCheck(t *testing.T, rep status.Report, raw string, statmount bool) {
	t.Helper()
	switch {
	case statmount && rep.MountCheck != "statmount":
		t.Errorf("cgdelegate status: mountCheck %q, want statmount:\n%s", rep.MountCheck, raw)
	case !statmount && !strings.HasPrefix(rep.MountCheck, "mountinfo (statmount: "):
		t.Errorf("cgdelegate status: mountCheck %q, want the mount table with the reason statmount is not used:\n%s", rep.MountCheck, raw)
	}
	t.Logf("the plugin's mount check: %s", rep.MountCheck)
}
