//go:build integration_guest

package guest

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
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
