package advert

import (
	"fmt"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// BenchmarkRefresh compares, in one run, a refresh that publishes the
// allocation table (Refresh: the 10 s tick, Configure, a kubelet change)
// with one after a mount table change that leaves the readiness alone
// (every container started or removed), at n node-shared containers in
// pods of five. The table is built once here: the plugin's Snapshot, which
// a full refresh also pays, is not in these numbers.
func BenchmarkRefresh(b *testing.B) {
	for _, n := range []int{0, 100, 250} {
		src := newSource(b)
		src.pinning = &status.Pinning{Active: true, Allocations: fleetTable(n)}
		a := New(src, nil)
		a.Refresh()
		b.Run(fmt.Sprintf("n=%d/table", n), func(b *testing.B) {
			for range b.N {
				a.Refresh()
			}
		})
		b.Run(fmt.Sprintf("n=%d/mount-change", n), func(b *testing.B) {
			for range b.N {
				a.refresh(StatusRefresh)
			}
		})
	}
}

// fleetTable is an allocation table of n node-shared containers in pods of
// five, as policy.Snapshot writes it.
func fleetTable(n int) *policy.Status {
	s := policy.Status{Scope: "container", UsableCPUs: "0-3", ReservedCPUs: "", NodeSharedPool: "0-3", NodeSharedMems: "0-1"}
	for i := range n {
		if i%5 == 0 {
			s.Pods = append(s.Pods, policy.PodStatus{ID: fmt.Sprintf("%064x", i/5), Name: fmt.Sprintf("fleet-%d", i/5)})
		}
		pod := &s.Pods[len(s.Pods)-1]
		pod.Containers = append(pod.Containers, policy.ContainerStatus{ID: fmt.Sprintf("%064x", 1000+i), Name: "sleep", Pool: policy.PoolNodeShared, CPUs: "0-3", Mems: "0-1"})
	}
	return &s
}
