package policy

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

func memBudget(milli, mem int64) budget.Budget {
	return budget.Budget{CPURequest: milli, CPULimit: milli, MemoryLimit: mem}
}

// TestBubbleMemory: the bubble's NUMA nodes hold the pod's memory limit
// (dualHT: two nodes of 16 GiB).
func TestBubbleMemory(t *testing.T) {
	type pod struct {
		id string
		b  budget.Budget
	}
	tests := []struct {
		name   string
		before []pod
		pod    pod
		// wantMems is the pod's memory nodes; wantCPUNodes the nodes of
		// its CPUs; wantShare the memory reserved per node.
		wantMems, wantCPUNodes string
		wantShare              map[int]int64
		wantErr                []string
	}{
		{
			name: "fits one node", pod: pod{"a", memBudget(4000, 8*gib)},
			wantMems: "0", wantCPUNodes: "0", wantShare: map[int]int64{0: 8 * gib},
		},
		{
			name:   "prefers the node with room",
			before: []pod{{"a", memBudget(2000, 12*gib)}},
			// The allocator's best fit for 2 cpus is node 0 next to a;
			// node 0 has 4 GiB left, node 1 all of its 16.
			pod:      pod{"b", memBudget(2000, 8*gib)},
			wantMems: "1", wantCPUNodes: "1", wantShare: map[int]int64{1: 8 * gib},
		},
		{
			name: "widens to a second node", pod: pod{"a", memBudget(2000, 20*gib)},
			wantMems: "0-1", wantCPUNodes: "0", wantShare: map[int]int64{0: 16 * gib, 1: 4 * gib},
		},
		{
			name:   "widens around a full node",
			before: []pod{{"a", memBudget(2000, 16*gib)}},
			pod:    pod{"b", memBudget(2000, 10*gib)},
			// Node 0 is full; the cpus go to node 1 with the memory.
			wantMems: "1", wantCPUNodes: "1", wantShare: map[int]int64{1: 10 * gib},
		},
		{
			name: "larger than the machine", pod: pod{"a", memBudget(2000, 40*gib)},
			wantErr: []string{
				"insufficient memory", "memory limit 40Gi does not fit, 32Gi free in all NUMA nodes together",
				"node 0: 16Gi of 16Gi free, node 1: 16Gi of 16Gi free",
			},
		},
		{
			name:   "larger than what the bubbles left",
			before: []pod{{"a", memBudget(2000, 20*gib)}},
			pod:    pod{"b", memBudget(2000, 13*gib)},
			wantErr: []string{
				"memory limit 13Gi does not fit, 12Gi free in all NUMA nodes together",
				"node 0: 0 of 16Gi free, node 1: 12Gi of 16Gi free",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{})
			for _, b := range tc.before {
				mustAddPod(t, p, b.id, b.b)
			}
			before := p.Snapshot()
			_, err := p.AddPod(PodSpec{ID: tc.pod.id, Budget: tc.pod.b})
			if tc.wantErr != nil {
				if !errors.Is(err, ErrInsufficientMemory) {
					t.Fatalf("err = %v, want ErrInsufficientMemory", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v\nwant it to contain %q", err, w)
					}
				}
				if after := p.Snapshot(); after.NodeSharedPool != before.NodeSharedPool || len(after.Pods) != len(before.Pods) {
					t.Errorf("refusal changed the state: %+v", after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ps := p.st.pods[tc.pod.id]
			if got := p.podMems(ps).String(); got != tc.wantMems {
				t.Errorf("memory nodes = %s, want %s", got, tc.wantMems)
			}
			if got := p.topo.MemsOf(ps.bubble).String(); got != tc.wantCPUNodes {
				t.Errorf("bubble %s on nodes %s, want %s", ps.bubble, got, tc.wantCPUNodes)
			}
			if len(ps.memShare) != len(tc.wantShare) {
				t.Errorf("share = %v, want %v", ps.memShare, tc.wantShare)
			}
			for n, v := range tc.wantShare {
				if ps.memShare[n] != v {
					t.Errorf("share = %v, want %v", ps.memShare, tc.wantShare)
				}
			}
			// A pinned container of the pod gets its memory nodes.
			a, _ := mustAdd(t, p, ctr("c", tc.pod.id, guaranteed(1000)))
			if want := p.topo.MemsOf(a.CPUs).Union(ps.extraMems); !a.Mems.Equals(want) || !a.Mems.IsSubsetOf(p.podMems(ps)) {
				t.Errorf("container mems %s on cpus %s, want %s", a.Mems, a.CPUs, want)
			}
		})
	}
}

// TestBubbleMemoryReleased: removing a pod frees its memory for the next.
func TestBubbleMemoryReleased(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "a", memBudget(2000, 30*gib))
	if _, err := p.AddPod(PodSpec{ID: "b", Budget: memBudget(2000, 16*gib)}); !errors.Is(err, ErrInsufficientMemory) {
		t.Fatalf("b admitted next to a 30Gi pod: %v", err)
	}
	p.RemovePod("a")
	mustAddPod(t, p, "b", memBudget(2000, 16*gib))
	if got := p.podMems(p.st.pods["b"]); got.Size() != 1 {
		t.Errorf("b on memory nodes %s after a left, want one node", got)
	}
}

// TestBubbleMemoryUnknown: without MemTotal (no node reports it) memory
// is not checked.
func TestBubbleMemoryUnknown(t *testing.T) {
	topo := dualHT()
	for id, n := range topo.NUMANodes {
		n.MemoryBytes = 0
		topo.NUMANodes[id] = n
	}
	p := mustNew(t, topo, Options{})
	mustAddPod(t, p, "a", memBudget(2000, 1<<50))
	if ps := p.st.pods["a"]; ps.memShare != nil || !ps.extraMems.IsEmpty() {
		t.Errorf("unknown memory reserved %v / widened %s", ps.memShare, ps.extraMems)
	}
}

// TestRebuildKeepsWidenedMemory: a rebuild finds a widened bubble's memory
// nodes in its containers' stamps and reserves its memory again within
// the nodes' capacity, whatever the order of the pods.
func TestRebuildKeepsWidenedMemory(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "a-wide", memBudget(2000, 20*gib))
	mustAddPod(t, p, "b-narrow", memBudget(2000, 10*gib))
	aw, _ := mustAdd(t, p, ctr("aw", "a-wide", guaranteed(1000)))
	bn, _ := mustAdd(t, p, ctr("bn", "b-narrow", guaranteed(1000)))
	want := map[string]cpuset.CPUSet{"a-wide": p.podMems(p.st.pods["a-wide"]), "b-narrow": p.podMems(p.st.pods["b-narrow"])}

	q := mustNew(t, dualHT(), Options{})
	res := q.Rebuild(
		[]PodSpec{{ID: "a-wide", Budget: memBudget(2000, 20*gib)}, {ID: "b-narrow", Budget: memBudget(2000, 10*gib)}},
		[]ContainerState{
			{Spec: ctr("aw", "a-wide", guaranteed(1000)), Stamp: aw.Stamp(), CPUs: aw.CPUs, Mems: aw.Mems, CPUQuota: -1},
			{Spec: ctr("bn", "b-narrow", guaranteed(1000)), Stamp: bn.Stamp(), CPUs: bn.CPUs, Mems: bn.Mems, CPUQuota: -1},
		})
	if len(res.Conflicts) != 0 || len(res.Updates) != 0 {
		t.Fatalf("rebuild: conflicts %v, updates %v", res.Conflicts, ids(res.Updates))
	}
	for id, m := range want {
		if got := q.podMems(q.st.pods[id]); !got.Equals(m) {
			t.Errorf("pod %s memory nodes %s after rebuild, want %s", id, got, m)
		}
	}
	for n, used := range memUsed(q.st) {
		if used > q.mem.capacity[n] {
			t.Errorf("node %d: %d bytes reserved of %d", n, used, q.mem.capacity[n])
		}
	}
	if _, err := q.AddPod(PodSpec{ID: "c", Budget: memBudget(1000, 3*gib)}); !errors.Is(err, ErrInsufficientMemory) {
		t.Errorf("2Gi left, a 3Gi pod: err = %v, want ErrInsufficientMemory", err)
	}
}

// TestSpread: rebuild's reservation moves memory of a wide bubble out of
// the way of a narrow one found after it.
func TestSpread(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	got := p.mem.spread([]demand{
		{group: []int{0, 1}, first: cpuset.New(0), mem: 16 * gib},
		{group: []int{0}, first: cpuset.New(0), mem: 10 * gib},
		{group: []int{1}, first: cpuset.New(1), mem: 6 * gib},
	})
	// Greedy would give the wide one all of node 0; the narrow one on
	// node 0 pushes 10 GiB of it to node 1.
	want := []map[int]int64{{0: 6 * gib, 1: 10 * gib}, {0: 10 * gib}, {1: 6 * gib}}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("spread = %v, want %v", got, want)
		}
		for n, v := range want[i] {
			if got[i][n] != v {
				t.Fatalf("spread = %v, want %v", got, want)
			}
		}
	}

	// 34 GiB on 32: what fits nowhere stays on the demand's first node,
	// and every demand is reserved in full.
	over := p.mem.spread([]demand{
		{group: []int{0, 1}, first: cpuset.New(0), mem: 16 * gib},
		{group: []int{0}, first: cpuset.New(0), mem: 10 * gib},
		{group: []int{1}, first: cpuset.New(1), mem: 8 * gib},
	})
	for i, mem := range []int64{16 * gib, 10 * gib, 8 * gib} {
		var sum int64
		for _, v := range over[i] {
			sum += v
		}
		if sum != mem {
			t.Errorf("demand %d reserved %d, want %d (%v)", i, sum, mem, over)
		}
	}
}

// BenchmarkPlaceBubble256 is the bubble allocation alone (CPUs and memory
// nodes, no updates) on the 256-CPU, 8-NUMA bench node: "fits" on the
// nodes of its CPUs, "widened" through the memory group search. Target:
// at most 50µs. cpu-ns/op is the process CPU time per op, which a loaded
// machine does not inflate the way it does wall time.
func BenchmarkPlaceBubble256(b *testing.B) {
	for _, tc := range []struct {
		name string
		mem  int64
	}{{"fits", 8 * gib}, {"widened", 24 * gib}} {
		b.Run(tc.name, func(b *testing.B) {
			p := benchPolicy(b)
			b.ReportAllocs()
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			n := 0
			for b.Loop() {
				if _, _, _, err := p.placeBubble(p.st, p.v.node, 8, tc.mem, "bench"); err != nil {
					b.Fatal(err)
				}
				n++
			}
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(n), "cpu-ns/op")
		})
	}
}

// TestReservedMemoryOption: reservedMemory is checked against the
// topology when the policy is built.
func TestReservedMemoryOption(t *testing.T) {
	noMemTotal := dualHT()
	n := noMemTotal.NUMANodes[1]
	n.MemoryBytes = 0
	noMemTotal.NUMANodes[1] = n
	tests := []struct {
		name     string
		topo     *topology.Topology
		reserved map[int]int64
		wantErr  []string
	}{
		{name: "none", topo: dualHT()},
		{name: "some on both nodes", topo: dualHT(), reserved: map[int]int64{0: gib, 1: 512 << 20}},
		{name: "a whole node", topo: dualHT(), reserved: map[int]int64{1: 16 * gib}},
		{
			name: "unknown node", topo: dualHT(), reserved: map[int]int64{2: gib},
			wantErr: []string{"reservedMemory: NUMA node 2 does not exist on this machine (NUMA nodes 0-1)"},
		},
		{
			name: "more than the node has", topo: dualHT(), reserved: map[int]int64{0: 17 * gib},
			wantErr: []string{"reservedMemory: NUMA node 0: 17Gi is more than the node has (MemTotal 16Gi)"},
		},
		{
			name: "negative", topo: dualHT(), reserved: map[int]int64{0: -1},
			wantErr: []string{"reservedMemory: NUMA node 0: -1 bytes is negative"},
		},
		{
			name: "node without MemTotal", topo: noMemTotal, reserved: map[int]int64{1: gib},
			wantErr: []string{"reservedMemory: NUMA node 1 reports no MemTotal, so 1Gi can not be reserved on it"},
		},
		{
			name: "every problem", topo: dualHT(), reserved: map[int]int64{0: 20 * gib, 5: gib},
			wantErr: []string{"NUMA node 0: 20Gi is more than", "NUMA node 5 does not exist"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.topo, Options{ReservedMemory: tc.reserved})
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				for id, r := range tc.reserved {
					if got, want := p.mem.capacity[id], int64(tc.topo.NUMANodes[id].MemoryBytes)-r; got != want {
						t.Errorf("node %d capacity %d, want %d", id, got, want)
					}
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestReservedMemoryPlacement: bubbles get MemTotal minus reservedMemory
// on each node (dualHT: 16 GiB per node).
func TestReservedMemoryPlacement(t *testing.T) {
	tests := []struct {
		name     string
		reserved map[int]int64
		mem      int64
		// wantMems is the pod's memory nodes and wantShare what it holds
		// on each; wantErr the refusal.
		wantMems  string
		wantShare map[int]int64
		wantErr   []string
	}{
		{
			name: "fits next to the reservation", reserved: map[int]int64{0: 4 * gib}, mem: 12 * gib,
			wantMems: "0", wantShare: map[int]int64{0: 12 * gib},
		},
		{
			name: "moves away from a reserved node", reserved: map[int]int64{0: 8 * gib}, mem: 12 * gib,
			wantMems: "1", wantShare: map[int]int64{1: 12 * gib},
		},
		{
			name: "widens because of the reservation", reserved: map[int]int64{0: 8 * gib, 1: 8 * gib}, mem: 12 * gib,
			wantMems: "0-1", wantShare: map[int]int64{0: 8 * gib, 1: 4 * gib},
		},
		{
			name: "refused with the numbers", reserved: map[int]int64{0: gib, 1: 2 * gib}, mem: 30 * gib,
			wantErr: []string{
				"memory limit 30Gi does not fit, 29Gi free in all NUMA nodes together",
				"node 0: 15Gi of 15Gi free (MemTotal 16Gi, reservedMemory 1Gi), node 1: 14Gi of 14Gi free (MemTotal 16Gi, reservedMemory 2Gi)",
				"free is MemTotal minus reservedMemory minus the memory of the bubbles)",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{ReservedMemory: tc.reserved})
			_, err := p.AddPod(PodSpec{ID: "a", Budget: memBudget(2000, tc.mem)})
			if tc.wantErr != nil {
				if !errors.Is(err, ErrInsufficientMemory) {
					t.Fatalf("err = %v, want ErrInsufficientMemory", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v\nwant it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ps := p.st.pods["a"]
			if got := p.podMems(ps).String(); got != tc.wantMems {
				t.Errorf("memory nodes = %s, want %s", got, tc.wantMems)
			}
			if !maps.Equal(ps.memShare, tc.wantShare) {
				t.Errorf("share = %v, want %v", ps.memShare, tc.wantShare)
			}
			if got, want := p.Snapshot().ReservedMemory, reservedText(tc.reserved); got != want {
				t.Errorf("status reservedMemory = %q, want %q", got, want)
			}
		})
	}
}

func reservedText(r map[int]int64) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(r)) {
		parts = append(parts, fmt.Sprintf("%d:memory=%dGi", id, r[id]/gib))
	}
	return strings.Join(parts, ";")
}

func memCtr(id string, cpus int, mem int64) ContainerSpec {
	milli := int64(cpus) * 1000
	return ctr(id, "pod", budget.NewContainer(budget.Budget{CPURequest: milli, CPULimit: milli, MemoryLimit: mem}))
}

// TestContainerScopeMemory: in container scope an exclusive container's
// NUMA nodes hold its memory limit, by the bubbles' rules (dualHT: two
// nodes of 16 GiB).
func TestContainerScopeMemory(t *testing.T) {
	tests := []struct {
		name     string
		reserved map[int]int64
		before   []ContainerSpec
		ctr      ContainerSpec
		// wantMems is the container's cpuset.mems, wantCPUNodes the
		// nodes of its cpus, wantShare the memory it reserves per node.
		wantMems, wantCPUNodes string
		wantShare              map[int]int64
		wantErr                []string
	}{
		{
			name: "fits one node", ctr: memCtr("a", 4, 8*gib),
			wantMems: "0", wantCPUNodes: "0", wantShare: map[int]int64{0: 8 * gib},
		},
		{
			name:   "prefers the node with room",
			before: []ContainerSpec{memCtr("a", 2, 12*gib)},
			ctr:    memCtr("b", 2, 8*gib),
			// The allocator's best fit is node 0 next to a, which has 4 GiB left.
			wantMems: "1", wantCPUNodes: "1", wantShare: map[int]int64{1: 8 * gib},
		},
		{
			name: "widens to a second node", ctr: memCtr("a", 2, 20*gib),
			wantMems: "0-1", wantCPUNodes: "0", wantShare: map[int]int64{0: 16 * gib, 1: 4 * gib},
		},
		{
			name: "reservedMemory kept back", reserved: map[int]int64{0: 10 * gib}, ctr: memCtr("a", 2, 8*gib),
			wantMems: "1", wantCPUNodes: "1", wantShare: map[int]int64{1: 8 * gib},
		},
		{
			name: "larger than the machine", ctr: memCtr("a", 2, 40*gib),
			wantErr: []string{
				`container "a" in pod pod exclusive cpus: memory limit 40Gi does not fit, 32Gi free in all NUMA nodes together`,
				"node 0: 16Gi of 16Gi free, node 1: 16Gi of 16Gi free",
			},
		},
		{
			name:   "larger than what the others left",
			before: []ContainerSpec{memCtr("a", 2, 20*gib)},
			ctr:    memCtr("b", 2, 13*gib),
			wantErr: []string{
				"memory limit 13Gi does not fit, 12Gi free in all NUMA nodes together",
				"node 0: 0 of 16Gi free, node 1: 12Gi of 16Gi free",
				"minus the memory of the exclusive containers)",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{Scope: config.ScopeContainer, ReservedMemory: tc.reserved})
			mustAddPod(t, p, "pod", budget.Budget{})
			for _, c := range tc.before {
				mustAdd(t, p, c)
			}
			before := p.Snapshot()
			a, _, err := p.AddContainer(tc.ctr)
			if tc.wantErr != nil {
				if !errors.Is(err, ErrInsufficientMemory) {
					t.Fatalf("err = %v, want ErrInsufficientMemory", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v\nwant it to contain %q", err, w)
					}
				}
				if after := p.Snapshot(); !reflect.DeepEqual(before, after) {
					t.Errorf("refusal changed the state: %+v", after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := p.st.ctrs[tc.ctr.ID]
			if a.Pool != PoolExclusive || a.Mems.String() != tc.wantMems {
				t.Errorf("assignment %s mems %s, want exclusive on %s", a.Pool, a.Mems, tc.wantMems)
			}
			if got := p.topo.MemsOf(a.CPUs).String(); got != tc.wantCPUNodes {
				t.Errorf("cpus %s on nodes %s, want %s", a.CPUs, got, tc.wantCPUNodes)
			}
			if !maps.Equal(c.memShare, tc.wantShare) {
				t.Errorf("share = %v, want %v", c.memShare, tc.wantShare)
			}
			if st := a.Stamp(); !strings.Contains(st, "mems="+tc.wantMems) {
				t.Errorf("stamp %q does not record mems %s", st, tc.wantMems)
			}
		})
	}
}

// TestContainerScopeMemoryReleased: a removed container, a removed pod and
// a completed init container give their memory back.
func TestContainerScopeMemoryReleased(t *testing.T) {
	newP := func() *Policy {
		p := mustNew(t, dualHT(), Options{Scope: config.ScopeContainer})
		mustAddPod(t, p, "pod", budget.Budget{})
		return p
	}
	refused := func(p *Policy, c ContainerSpec) {
		t.Helper()
		if _, _, err := p.AddContainer(c); !errors.Is(err, ErrInsufficientMemory) {
			t.Fatalf("%s admitted: err = %v", c.ID, err)
		}
	}
	t.Run("container removed", func(t *testing.T) {
		p := newP()
		mustAdd(t, p, memCtr("a", 2, 30*gib))
		refused(p, memCtr("b", 2, 16*gib))
		p.RemoveContainer("a")
		mustAdd(t, p, memCtr("b", 2, 16*gib))
		if len(memUsed(p.st)) != 1 {
			t.Errorf("reserved %v, want b's 16Gi on one node", memUsed(p.st))
		}
	})
	t.Run("pod removed", func(t *testing.T) {
		p := newP()
		mustAdd(t, p, memCtr("a", 2, 30*gib))
		p.RemovePod("pod")
		if used := memUsed(p.st); len(used) != 0 {
			t.Errorf("pod removed, memory still reserved: %v", used)
		}
	})
	t.Run("init container completed", func(t *testing.T) {
		p := newP()
		init := memCtr("init", 2, 30*gib)
		init.Lifecycle = LifecycleInit
		mustAdd(t, p, init)
		// The app container starts once init has completed: init's 30Gi
		// are free for it.
		mustAdd(t, p, memCtr("app", 2, 30*gib))
		if c := p.st.ctrs["init"]; !c.released || c.pool != PoolNodeShared || len(c.memShare) != 0 {
			t.Fatalf("init container %+v, want it released to the node shared pool, holding no memory", c)
		}
		var sum int64
		for _, b := range memUsed(p.st) {
			sum += b
		}
		if sum != 30*gib {
			t.Errorf("reserved %d bytes, want app's 30Gi", sum)
		}
	})
}

// TestContainerScopeRebuildKeepsMemory: a rebuild finds a widened
// container's memory nodes in its stamp (or, unstamped, its current mems)
// and reserves its memory again, so the same refusal follows.
func TestContainerScopeRebuildKeepsMemory(t *testing.T) {
	for _, stamped := range []bool{true, false} {
		t.Run(fmt.Sprintf("stamped=%v", stamped), func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{Scope: config.ScopeContainer})
			mustAddPod(t, p, "pod", budget.Budget{})
			wide, _ := mustAdd(t, p, memCtr("a-wide", 2, 20*gib))
			narrow, _ := mustAdd(t, p, memCtr("b-narrow", 2, 10*gib))
			var cs []ContainerState
			for _, a := range []Assignment{wide, narrow} {
				c := ContainerState{Spec: memCtr(a.ContainerID, 2, p.st.ctrs[a.ContainerID].spec.Resources.MemoryLimit), CPUs: a.CPUs, Mems: a.Mems, CPUQuota: -1}
				if stamped {
					c.Stamp = a.Stamp()
				}
				cs = append(cs, c)
			}
			q := mustNew(t, dualHT(), Options{Scope: config.ScopeContainer})
			res := q.Rebuild([]PodSpec{{ID: "pod"}}, cs)
			if len(res.Conflicts) != 0 || len(res.Updates) != 0 {
				t.Fatalf("rebuild: conflicts %v, updates %v", res.Conflicts, ids(res.Updates))
			}
			for _, a := range []Assignment{wide, narrow} {
				got, _ := q.Assignment(a.ContainerID)
				if !got.Mems.Equals(a.Mems) || !got.CPUs.Equals(a.CPUs) {
					t.Errorf("%s on %s/%s after rebuild, want %s/%s", a.ContainerID, got.CPUs, got.Mems, a.CPUs, a.Mems)
				}
			}
			var sum int64
			for n, b := range memUsed(q.st) {
				sum += b
				if b > q.mem.capacity[n] {
					t.Errorf("node %d: %d bytes reserved of %d", n, b, q.mem.capacity[n])
				}
			}
			if sum != 30*gib {
				t.Errorf("rebuild reserved %d bytes, want 30Gi", sum)
			}
			if _, _, err := q.AddContainer(memCtr("c", 1, 3*gib)); !errors.Is(err, ErrInsufficientMemory) {
				t.Errorf("2Gi left, a 3Gi container: err = %v, want ErrInsufficientMemory", err)
			}
		})
	}
}

// TestRebuildRecomputesSplit: after a restart the memory nodes of a
// widened bubble are kept (stamps), and the split of its memory over them
// is recomputed: the nodes of its CPUs first, as a fresh placement would,
// not where room happened to be when it was placed. Total and nodes stay.
func TestRebuildRecomputesSplit(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "b", memBudget(2000, 10*gib))
	mustAddPod(t, p, "a", memBudget(2000, 20*gib))
	a, _ := mustAdd(t, p, ctr("ac", "a", guaranteed(1000)))
	ps := p.st.pods["a"]
	cpuNode := p.topo.MemsOf(ps.bubble).List()
	if len(cpuNode) != 1 || p.podMems(ps).Size() != 2 {
		t.Fatalf("a: bubble %s on nodes %v, memory nodes %s; want one cpu node, widened to two", ps.bubble, cpuNode, p.podMems(ps))
	}
	first, other := cpuNode[0], 1-cpuNode[0]
	// b held 10Gi of a's cpu node when a was placed.
	if want := map[int]int64{first: 6 * gib, other: 14 * gib}; !maps.Equal(ps.memShare, want) {
		t.Fatalf("a placed next to b: share %v, want %v", ps.memShare, want)
	}
	p.RemovePod("b")

	q := mustNew(t, dualHT(), Options{})
	res := q.Rebuild([]PodSpec{{ID: "a", Budget: memBudget(2000, 20*gib)}},
		[]ContainerState{{Spec: ctr("ac", "a", guaranteed(1000)), Stamp: a.Stamp(), CPUs: a.CPUs, Mems: a.Mems, CPUQuota: -1}})
	if len(res.Conflicts) != 0 || len(res.Updates) != 0 {
		t.Fatalf("rebuild: conflicts %v, updates %v", res.Conflicts, ids(res.Updates))
	}
	qs := q.st.pods["a"]
	if !q.podMems(qs).Equals(p.podMems(ps)) {
		t.Errorf("memory nodes %s after rebuild, want %s", q.podMems(qs), p.podMems(ps))
	}
	if want := map[int]int64{first: 16 * gib, other: 4 * gib}; !maps.Equal(qs.memShare, want) {
		t.Errorf("recomputed share %v, want %v", qs.memShare, want)
	}
}
