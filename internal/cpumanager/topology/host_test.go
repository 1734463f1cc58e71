package topology

import (
	"os"
	"testing"
)

// TestDiscoverHost reads the real /sys. It is opt-in because containers and
// sandboxes often present a partial sysfs: set CGDELEGATE_HOST_SYSFS=1.
func TestDiscoverHost(t *testing.T) {
	if os.Getenv("CGDELEGATE_HOST_SYSFS") != "1" {
		t.Skip("reads the host's /sys; set CGDELEGATE_HOST_SYSFS=1 to run")
	}
	topo, err := Discover("/sys")
	if err != nil {
		t.Fatalf("Discover(/sys): %v", err)
	}
	checkInvariants(t, topo)
	for _, id := range topo.NUMANodeIDs() {
		n := topo.NUMANodes[id]
		t.Logf("node %d: cpus %s, %d MiB, distances %v", id, n.CPUs, n.MemoryBytes>>20, n.Distances)
	}
	t.Logf("online %s, offline %s, isolated %s", topo.AllCPUs(), topo.Offline, topo.Isolated)
}
