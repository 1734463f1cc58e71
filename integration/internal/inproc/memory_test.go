package inproc

import (
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// TestPinningContainerScopeMemory: in container scope an exclusive
// container's memory nodes hold its memory limit, through the real NRI
// adaptation: widened when one node is not enough, refused with the
// numbers when nothing holds it, given back when it stops, and
// reserved again after a restart (DualSocketHT: two nodes of 16 GiB).
func TestPinningContainerScopeMemory(t *testing.T) {
	e := setupPinning(t, func(c *config.Config) { c.TopologyScope = config.ScopeContainer })
	pod := Pod("p", "p1", guaranteedParent, nil)
	e.mustRunPod(pod)

	wide := Container(pod, "wide", WithGuaranteedCPUs(2, 20*gi))
	cpu := adjCPU(e.mustCreate(pod, wide))
	if cpus := mustSet(t, cpu.GetCpus()); cpus.Size() != 2 || numaOf(cpus).Size() != 1 || cpu.GetMems() != "0-1" {
		t.Fatalf("20Gi container: cpus %q mems %q, want 2 cpus of one node and mems 0-1", cpu.GetCpus(), cpu.GetMems())
	}

	fat := Container(pod, "fat", WithGuaranteedCPUs(2, 13*gi))
	_, err := e.create(pod, fat)
	for _, w := range []string{
		"insufficient memory", `container "fat"`, "memory limit 13Gi does not fit, 12Gi free in all NUMA nodes together",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("CreateContainer fat: err = %v\nwant it to contain %q", err, w)
		}
	}

	e.stopRemove(pod, wide)
	e.applyAsync()
	cpu = adjCPU(e.mustCreate(pod, fat))
	if cpus := mustSet(t, cpu.GetCpus()); numaOf(cpus).String() != cpu.GetMems() {
		t.Errorf("13Gi container after 20Gi left: cpus %q mems %q, want the mems of its cpus", cpu.GetCpus(), cpu.GetMems())
	}

	// A restart rebuilds from Synchronize: fat's 13Gi stay reserved.
	if ups := e.connect(); len(ups) != 0 {
		t.Errorf("restart sent updates: %v", ups)
	}
	_, err = e.create(pod, Container(pod, "big", WithGuaranteedCPUs(1, 20*gi)))
	if err == nil || !strings.Contains(err.Error(), "memory limit 20Gi does not fit, 19Gi free") {
		t.Errorf("after restart, 20Gi next to 13Gi: err = %v", err)
	}
}
