package policy

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

// TestReservedCPUs: reserved CPUs never go to a bubble or an exclusive
// slice; they are in the node shared pool unless StrictReservation, like
// the kubelet's strict-cpu-reservation.
func TestReservedCPUs(t *testing.T) {
	tests := []struct {
		name     string
		scope    config.TopologyScope
		strict   bool
		reserved string
	}{
		{"pod scope, shared reservation", config.ScopePod, false, "0,8"},
		{"pod scope, strict reservation", config.ScopePod, true, "0,8"},
		{"container scope, shared reservation", config.ScopeContainer, false, "0,8"},
		{"container scope, strict reservation", config.ScopeContainer, true, "0,8"},
		{"no reservation", config.ScopePod, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reserved := set(tc.reserved)
			p := mustNew(t, dualHT(), Options{Scope: tc.scope, Reserved: reserved, StrictReservation: tc.strict})
			mustAddPod(t, p, "nb", budget.Budget{})
			sh, _ := mustAdd(t, p, ctr("sh", "nb", bestEffort()))
			want := set("0-15")
			if tc.strict {
				want = want.Difference(reserved)
			}
			if !sh.CPUs.Equals(want) {
				t.Fatalf("node shared %s, want %s", sh.CPUs, want)
			}

			// Take every usable cpu but one (a bubble in pod scope, a slice
			// in container scope).
			n := int64(15 - reserved.Size())
			var pinned cpuset.CPUSet
			if tc.scope == config.ScopePod {
				mustAddPod(t, p, "big", podBudget(n*1000))
				pinned = p.st.pods["big"].bubble
			} else {
				a, _ := mustAdd(t, p, ctr("big", "nb", guaranteed(n*1000)))
				pinned = a.CPUs
			}
			if !pinned.Intersection(reserved).IsEmpty() {
				t.Errorf("pinned cpus %s include reserved %s", pinned, reserved)
			}
			left := set("0-15").Difference(reserved).Difference(pinned)
			if left.Size() != 1 {
				t.Fatalf("%s left unpinned, want one cpu", left)
			}
			node := left
			if !tc.strict {
				node = node.Union(reserved)
			}
			got, _ := p.Assignment("sh")
			if !got.CPUs.Equals(node) {
				t.Errorf("node shared after pinning %s, want %s", got.CPUs, node)
			}
			if s := p.Snapshot(); s.NodeSharedPool != node.String() {
				t.Errorf("status node shared pool %q, want %q", s.NodeSharedPool, node)
			}
			// The last usable cpu can be pinned only when the reserved cpus
			// stay in the node shared pool (as the kubelet's static policy
			// pins every cpu but the reserved ones); never a reserved one.
			lastOK := !tc.strict && !reserved.IsEmpty()
			if tc.scope == config.ScopePod {
				_, err := p.AddPod(PodSpec{ID: "more", Budget: podBudget(1000)})
				if lastOK != (err == nil) {
					t.Fatalf("bubble from the last usable cpu %s: err %v, want success %v", left, err, lastOK)
				}
			} else {
				_, _, err := p.AddContainer(ctr("more", "nb", guaranteed(1000)))
				if lastOK != (err == nil) {
					t.Fatalf("slice of the last usable cpu %s: err %v, want success %v", left, err, lastOK)
				}
			}
			if lastOK {
				got, _ := p.Assignment("sh")
				if !got.CPUs.Equals(reserved) {
					t.Errorf("node shared with every usable cpu pinned: %s, want the reserved %s", got.CPUs, reserved)
				}
				// And nothing more: the reserved cpus are never pinned.
				if tc.scope == config.ScopePod {
					if _, err := p.AddPod(PodSpec{ID: "even-more", Budget: podBudget(1000)}); err == nil {
						t.Errorf("a bubble was carved from a reserved cpu")
					}
				} else if _, _, err := p.AddContainer(ctr("even-more", "nb", guaranteed(1000))); err == nil {
					t.Errorf("a slice was carved from a reserved cpu")
				}
			}
			checkInvariants(t, p)
		})
	}
}

// TestNodeSharedMems: node-shared containers keep every memory node when a
// bubble narrows their CPUs to one NUMA node; pinned containers get the
// nodes of their CPUs.
func TestNodeSharedMems(t *testing.T) {
	topo := dualHT()
	topo.NUMANodes[2] = topology.NUMANode{ID: 2, CPUs: cpuset.New(), MemoryBytes: 4 << 30} // memory only
	p := mustNew(t, topo, Options{})
	mustAddPod(t, p, "nb", budget.Budget{})
	sh, _ := mustAdd(t, p, ctr("sh", "nb", bestEffort()))
	if !sh.Mems.Equals(set("0-2")) {
		t.Fatalf("node-shared mems %s, want every memory node 0-2", sh.Mems)
	}
	// An 8-cpu bubble fills one NUMA node; the node pool is the other node.
	u := mustAddPod(t, p, "p", podBudget(8000))
	bubble := p.st.pods["p"].bubble
	if len(u) != 1 || topo.MemsOf(u[0].CPUs).Size() != 1 {
		t.Fatalf("updates %+v, want sh on one NUMA node's cpus", u)
	}
	if !u[0].Mems.Equals(set("0-2")) {
		t.Errorf("node-shared mems after the bubble %s, want 0-2 (never narrowed)", u[0].Mems)
	}
	ex, _ := mustAdd(t, p, ctr("ex", "p", guaranteed(1000)))
	ps, _ := mustAdd(t, p, ctr("ps", "p", burstable(500)))
	for _, a := range []Assignment{ex, ps} {
		if want := topo.MemsOf(bubble); !a.Mems.Equals(want) {
			t.Errorf("%s (%s) mems %s, want the bubble's node %s", a.ContainerID, a.Pool, a.Mems, want)
		}
	}
	if s := p.Snapshot(); s.NodeSharedMems != "0-2" {
		t.Errorf("status node shared mems %q, want 0-2", s.NodeSharedMems)
	}
	checkInvariants(t, p)
}

// TestPodLimitsContainer: a container with no resources of its own in a
// pod with pod-level resources (budget: CPU request 0, the pod's limits)
// runs in the pod shared pool next to an exclusive container and adds
// nothing to the pod's request sum.
func TestPodLimitsContainer(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "p", budget.Budget{CPURequest: 2000, CPULimit: 2000, MemoryLimit: 256 << 20})
	g, _ := mustAdd(t, p, ctr("g", "p", budget.NewContainer(budget.Budget{CPURequest: 1000, CPULimit: 1000, MemoryLimit: 64 << 20})))
	s := budget.NewContainer(budget.Budget{CPULimit: 2000, MemoryLimit: 256 << 20})
	s.PodLimits = true
	a, _ := mustAdd(t, p, ctr("s", "p", s))
	bubble := p.st.pods["p"].bubble
	if g.Pool != PoolExclusive || a.Pool != PoolPodShared || !a.CPUs.Equals(bubble.Difference(g.CPUs)) {
		t.Errorf("g %+v, s %+v; want g exclusive and s on the rest of bubble %s", g, a, bubble)
	}
	checkInvariants(t, p)
}
