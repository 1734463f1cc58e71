package policy

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

func TestNew(t *testing.T) {
	topo := dualHT()
	topo.Isolated = set("15")
	tests := []struct {
		name    string
		topo    *topology.Topology
		o       Options
		usable  string
		wantErr string
	}{
		{name: "defaults", topo: topo, usable: "0-14"},
		{name: "reserved", topo: topo, o: Options{StrictReservation: true, Reserved: set("0,8")}, usable: "1-7,9-14"},
		{name: "reserved offline cpu ignored", topo: topo, o: Options{StrictReservation: true, Reserved: set("0,99")}, usable: "1-14"},
		{name: "container scope", topo: topo, o: Options{Scope: config.ScopeContainer}, usable: "0-14"},
		{name: "nil topology", wantErr: "nil topology"},
		{name: "bad scope", topo: topo, o: Options{Scope: "node"}, wantErr: `topology scope "node"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.topo, tc.o)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want ErrInvalid with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := p.Snapshot()
			if s.UsableCPUs != tc.usable || s.NodeSharedPool != tc.usable {
				t.Errorf("usable %s, shared %s, want %s", s.UsableCPUs, s.NodeSharedPool, tc.usable)
			}
		})
	}
}

func TestAddPod(t *testing.T) {
	tests := []struct {
		name     string
		scope    config.TopologyScope
		reserved string
		budget   budget.Budget
		bubble   int // expected bubble size
		sentinel error
		wantErr  string
	}{
		{name: "integer budget", budget: podBudget(4000), bubble: 4},
		// The kubelet's rule (budget.Budget.BubbleCPUs): only a Guaranteed
		// budget with whole CPUs gets a bubble, of its CPU request.
		{name: "fractional guaranteed budget gets none", budget: podBudget(2500)},
		{name: "burstable request only gets none", budget: budget.Budget{CPURequest: 1500}},
		{name: "burstable request below limit gets none", budget: budget.Budget{CPURequest: 1000, CPULimit: 3000, MemoryLimit: gib}},
		{name: "cpu guaranteed without memory limit gets none", budget: budget.Budget{CPURequest: 2000, CPULimit: 2000}},
		{
			name: "memory request below limit gets none", budget: budget.Budget{CPURequest: 2000, CPULimit: 2000, MemoryRequest: gib, MemoryLimit: 2 * gib},
		},
		{
			name: "annotated memory request equal to limit", budget: budget.Budget{CPURequest: 2000, CPULimit: 2000, MemoryRequest: gib, MemoryLimit: gib},
			bubble: 2,
		},
		{name: "no budget", budget: budget.Budget{}},
		{name: "memory only budget", budget: budget.Budget{MemoryLimit: gib}},
		{name: "container scope has no bubbles", scope: config.ScopeContainer, budget: podBudget(4000)},
		{name: "never takes reserved", reserved: "0-3,8-11", budget: podBudget(7000), bubble: 7},
		{
			name: "keeps one cpu for the node pool", budget: podBudget(16000), sentinel: ErrInsufficient,
			wantErr: "needs 16 cpus, the node pool has 16 free (0-15) and keeps at least one",
		},
		{name: "larger than usable", reserved: "0-7", budget: podBudget(9000), sentinel: ErrInsufficient, wantErr: "needs 9 cpus"},
		{
			name: "invalid budget", budget: budget.Budget{CPURequest: 2000, CPULimit: 1000}, sentinel: ErrInvalid,
			wantErr: "cpu request 2000m exceeds cpu limit 1000m",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{Scope: tc.scope, StrictReservation: true, Reserved: set(tc.reserved)})
			before := p.Snapshot()
			_, err := p.AddPod(PodSpec{ID: "p", Budget: tc.budget})
			if tc.sentinel != nil {
				if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %v with %q", err, tc.sentinel, tc.wantErr)
				}
				if after := p.Snapshot(); !reflect.DeepEqual(before, after) {
					t.Errorf("failed AddPod changed the state:\n%+v\n%+v", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b := p.st.pods["p"].bubble
			if b.Size() != tc.bubble {
				t.Fatalf("bubble %s, want %d cpus", b, tc.bubble)
			}
			if !b.Intersection(set(tc.reserved)).IsEmpty() {
				t.Errorf("bubble %s includes reserved %s", b, tc.reserved)
			}
			if tc.bubble > 0 && tc.bubble <= 8 && len(p.topo.NUMANodesOf(b)) != 1 {
				t.Errorf("bubble %s spans NUMA nodes %v", b, p.topo.NUMANodesOf(b))
			}
			if got := p.Snapshot().NodeSharedPool; got != p.usable.Difference(b).String() {
				t.Errorf("node shared pool %s, want usable minus bubble", got)
			}
		})
	}
}

func TestAddPodErrors(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "p", podBudget(2000))
	if _, err := p.AddPod(PodSpec{ID: "p"}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate pod: %v", err)
	}
	if _, err := p.AddPod(PodSpec{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty id: %v", err)
	}
}

func TestNodeSharedWithoutBudget(t *testing.T) {
	p := mustNew(t, dualHT(), Options{StrictReservation: true, Reserved: set("0")})
	mustAddPod(t, p, "nb", budget.Budget{})
	for _, c := range []ContainerSpec{ctr("g", "nb", guaranteed(2000)), ctr("b", "nb", burstable(500)), ctr("e", "nb", bestEffort())} {
		a, u := mustAdd(t, p, c)
		if a.Pool != PoolNodeShared || !a.CPUs.Equals(set("1-15")) || !a.Mems.Equals(set("0-1")) || a.QuotaDisabled() {
			t.Errorf("%s: %+v, want node shared 1-15", c.ID, a)
		}
		if len(u) != 0 {
			t.Errorf("%s: unexpected updates %v", c.ID, ids(u))
		}
	}
}

func TestPodBubbleContainers(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "nb", budget.Budget{})
	mustAdd(t, p, ctr("other", "nb", bestEffort()))

	// The bubble shrinks the node shared pool: "other" is updated.
	u := mustAddPod(t, p, "p", podBudget(4000))
	bubble := p.st.pods["p"].bubble
	if got := ids(u); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("AddPod updates %v, want [other]", got)
	}
	if !u[0].CPUs.Equals(set("0-15").Difference(bubble)) {
		t.Errorf("other now on %s, want everything but the bubble %s", u[0].CPUs, bubble)
	}
	node := p.topo.MemsOf(bubble)

	// A shared container gets the whole bubble.
	sh, u := mustAdd(t, p, ctr("shared", "p", burstable(1000)))
	if sh.Pool != PoolPodShared || !sh.CPUs.Equals(bubble) || !sh.Mems.Equals(node) || sh.QuotaDisabled() {
		t.Errorf("shared: %+v, want pod-shared %s", sh, bubble)
	}
	if len(u) != 0 {
		t.Errorf("shared add updated %v", ids(u))
	}
	if !sh.Bubble.Equals(bubble) {
		t.Errorf("assignment bubble %s, want %s", sh.Bubble, bubble)
	}

	// A Guaranteed integer container gets an exclusive slice from the bubble;
	// the shared container shrinks in the same response.
	ex, u := mustAdd(t, p, ctr("excl", "p", guaranteed(2000)))
	if ex.Pool != PoolExclusive || ex.CPUs.Size() != 2 || !ex.CPUs.IsSubsetOf(bubble) || !ex.QuotaDisabled() {
		t.Fatalf("excl: %+v, want a 2-cpu slice of %s with quota disabled", ex, bubble)
	}
	if !ex.Mems.Equals(p.topo.MemsOf(ex.CPUs)) {
		t.Errorf("excl mems %s, want %s", ex.Mems, p.topo.MemsOf(ex.CPUs))
	}
	if got := ids(u); !slices.Equal(got, []string{"shared"}) || !u[0].CPUs.Equals(bubble.Difference(ex.CPUs)) {
		t.Fatalf("updates %v, want shared on bubble minus slice", u)
	}
	if len(u) == 1 && (u[0].Pool != PoolPodShared || u[0].QuotaDisabled()) {
		t.Errorf("shared update %+v", u[0])
	}

	// A fractional Guaranteed container shares.
	fr, _ := mustAdd(t, p, ctr("frac", "p", guaranteed(500)))
	if fr.Pool != PoolPodShared {
		t.Errorf("fractional guaranteed: pool %s, want pod-shared", fr.Pool)
	}

	// Removing the exclusive container widens the shared ones.
	u = p.RemoveContainer("excl")
	if got := ids(u); !slices.Equal(got, []string{"frac", "shared"}) || !u[0].CPUs.Equals(bubble) {
		t.Fatalf("remove updates %v, want frac and shared widened to %s", u, bubble)
	}

	// Removing the pod returns the bubble; "other" widens.
	u = p.RemovePod("p")
	if got := ids(u); !slices.Equal(got, []string{"other"}) || !u[0].CPUs.Equals(set("0-15")) {
		t.Fatalf("RemovePod updates %v, want other widened to 0-15", u)
	}
	if _, ok := p.Assignment("shared"); ok {
		t.Error("RemovePod kept the pod's containers")
	}
}

func TestNoSharedCPUsRejection(t *testing.T) {
	const msg = "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"
	if ErrNoSharedCPUs.Error() != msg {
		t.Fatalf("message %q", ErrNoSharedCPUs)
	}
	tests := []struct {
		name  string
		first []ContainerSpec
		last  ContainerSpec
	}{
		{
			// A regular one goes to the node shared pool instead
			// (TestNodeSharedOverflow); init containers and sidecars are
			// refused, as the kubelet refuses their pod.
			name:  "sidecar without cpus after slices fill the bubble",
			first: []ContainerSpec{ctr("a", "p", guaranteed(1000)), ctr("b", "p", guaranteed(1000))},
			last:  lifecycle(ctr("s", "p", bestEffort()), LifecycleSidecar),
		},
		{
			name: "init container without cpus after sidecars fill the bubble",
			first: []ContainerSpec{
				lifecycle(ctr("a", "p", guaranteed(1000)), LifecycleSidecar),
				lifecycle(ctr("b", "p", guaranteed(1000)), LifecycleSidecar),
			},
			last: lifecycle(ctr("i", "p", burstable(0)), LifecycleInit),
		},
		{
			name:  "slice that would fill the bubble with a shared container present",
			first: []ContainerSpec{ctr("s", "p", bestEffort()), ctr("a", "p", guaranteed(1000))},
			last:  ctr("b", "p", guaranteed(1000)),
		},
		{
			name:  "single slice equal to the budget",
			first: []ContainerSpec{ctr("s", "p", burstable(0))},
			last:  ctr("a", "p", guaranteed(2000)),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{})
			mustAddPod(t, p, "p", podBudget(2000))
			for _, c := range tc.first {
				mustAdd(t, p, c)
			}
			before := p.Snapshot()
			_, u, err := p.AddContainer(tc.last)
			if err == nil || err.Error() != msg || !errors.Is(err, ErrNoSharedCPUs) {
				t.Fatalf("error %v, want exactly %q", err, msg)
			}
			if u != nil {
				t.Errorf("updates on error: %v", u)
			}
			if after := p.Snapshot(); !reflect.DeepEqual(before, after) {
				t.Errorf("rejected add changed the state:\n%+v\n%+v", before, after)
			}
		})
	}

	// Slices may fill the bubble when nobody needs the shared pool.
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "p", podBudget(2000))
	mustAdd(t, p, ctr("a", "p", guaranteed(1000)))
	if _, _, err := p.AddContainer(ctr("b", "p", guaranteed(1000))); err != nil {
		t.Fatalf("filling the bubble without shared containers: %v", err)
	}
}

func TestBudgetBoundsContainers(t *testing.T) {
	for _, scope := range []config.TopologyScope{config.ScopePod, config.ScopeContainer} {
		t.Run(string(scope), func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{Scope: scope})
			mustAddPod(t, p, "p", podBudget(4000))
			mustAdd(t, p, ctr("a", "p", guaranteed(3000)))
			before := p.Snapshot()
			_, _, err := p.AddContainer(ctr("b", "p", burstable(2000)))
			if !errors.Is(err, budget.ErrInconsistent) ||
				!strings.Contains(err.Error(), "container cpu requests sum 5000m exceed pod cpu budget 4000m") ||
				!strings.Contains(err.Error(), `container "b" in pod p`) {
				t.Fatalf("error %v", err)
			}
			if after := p.Snapshot(); !reflect.DeepEqual(before, after) {
				t.Error("rejected add changed the state")
			}
			// The removed container's request no longer counts.
			p.RemoveContainer("a")
			mustAdd(t, p, ctr("b", "p", burstable(2000)))
		})
	}
}

func TestContainerScope(t *testing.T) {
	p := mustNew(t, dualHT(), Options{Scope: config.ScopeContainer, StrictReservation: true, Reserved: set("0")})
	mustAddPod(t, p, "nb", budget.Budget{})
	mustAddPod(t, p, "p", podBudget(4000))
	sh, _ := mustAdd(t, p, ctr("sh", "nb", burstable(100)))
	if sh.Pool != PoolNodeShared || !sh.CPUs.Equals(set("1-15")) {
		t.Fatalf("shared %+v", sh)
	}
	// Guaranteed containers get node-level exclusive CPUs, in budget pods
	// and in pods without a budget alike; the node shared pool shrinks.
	for _, c := range []ContainerSpec{ctr("g1", "p", guaranteed(2000)), ctr("g2", "nb", guaranteed(3000))} {
		before := p.Snapshot().NodeSharedPool
		a, u := mustAdd(t, p, c)
		if a.Pool != PoolExclusive || a.CPUs.Size() != c.Resources.ExclusiveCPUs() || a.CPUs.Contains(0) || !a.QuotaDisabled() {
			t.Fatalf("%s: %+v", c.ID, a)
		}
		if len(p.topo.NUMANodesOf(a.CPUs)) != 1 {
			t.Errorf("%s: slice %s spans nodes", c.ID, a.CPUs)
		}
		if got := ids(u); !slices.Equal(got, []string{"sh"}) || !u[0].CPUs.Equals(set(before).Difference(a.CPUs)) {
			t.Errorf("%s: updates %v", c.ID, u)
		}
	}
	// Burstable containers of a budget pod share the node pool.
	b, _ := mustAdd(t, p, ctr("b", "p", burstable(1000)))
	if b.Pool != PoolNodeShared {
		t.Errorf("burstable in container scope: %s", b.Pool)
	}
	// The node pool keeps one CPU.
	mustAddPod(t, p, "big", budget.Budget{})
	free := set(p.Snapshot().NodeSharedPool).Size()
	_, _, err := p.AddContainer(ctr("huge", "big", guaranteed(int64(free)*1000)))
	if !errors.Is(err, ErrInsufficient) || !strings.Contains(err.Error(), "keeps at least one") {
		t.Fatalf("taking the whole node pool: %v", err)
	}
	// Removing a slice widens the node shared containers.
	u := p.RemoveContainer("g1")
	if got := ids(u); !slices.Equal(got, []string{"b", "sh"}) {
		t.Errorf("remove updates %v", got)
	}
}

func TestInitContainers(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "p", podBudget(4000))
	initC := ctr("init", "p", guaranteed(3000))
	initC.Lifecycle = LifecycleInit
	side := ctr("side", "p", guaranteed(1000))
	side.Lifecycle = LifecycleSidecar
	ia, _ := mustAdd(t, p, initC)
	sa, _ := mustAdd(t, p, side)
	if ia.Pool != PoolExclusive || sa.Pool != PoolExclusive {
		t.Fatalf("init %s, sidecar %s", ia.Pool, sa.Pool)
	}
	// A second init container (init containers run one at a time, but the
	// runtime may not have reported the first one's exit) does not release.
	init2 := ctr("init2", "p", bestEffort())
	init2.Lifecycle = LifecycleInit
	if _, _, err := p.AddContainer(init2); !errors.Is(err, ErrNoSharedCPUs) {
		t.Fatalf("init2: %v", err)
	}
	// The app container reuses the completed init container's CPUs: 3 CPUs
	// are free again although the budget was fully used by init + sidecar.
	app, u := mustAdd(t, p, ctr("app", "p", guaranteed(2000)))
	if app.Pool != PoolExclusive || app.CPUs.Intersection(sa.CPUs).Size() != 0 {
		t.Fatalf("app %+v overlaps sidecar %s", app, sa.CPUs)
	}
	// The init container, should it still run, moves off them in the same
	// step, to the node shared pool, its quota back.
	want := Assignment{
		ContainerID: "init", PodID: "p", Pool: PoolNodeShared, CPUs: p.usable.Difference(p.st.pods["p"].bubble), Mems: set("0-1"),
		Bubble: p.st.pods["p"].bubble, RestoreQuota: 300000,
	}
	if len(u) != 1 || !reflect.DeepEqual(u[0], want) {
		t.Errorf("updates %+v, want %+v", u, want)
	}
	if got, ok := p.Assignment("init"); !ok || !got.CPUs.Intersection(ia.CPUs).IsEmpty() {
		t.Errorf("released init container %+v still on its slice %s", got, ia.CPUs)
	}
	if got, ok := p.Assignment("side"); !ok || !got.CPUs.Equals(sa.CPUs) {
		t.Errorf("sidecar lost its slice: %+v", got)
	}
	// The init container's late Stop/Remove is a no-op.
	if u := p.RemoveContainer("init"); u != nil {
		t.Errorf("late remove: %v", u)
	}
}

func TestAddContainerErrors(t *testing.T) {
	failTake := func(cpuset.CPUSet, int) (cpuset.CPUSet, error) {
		return cpuset.New(), errors.New("allocator says no")
	}
	badTake := func(a cpuset.CPUSet, _ int) (cpuset.CPUSet, error) { return a, nil }
	tests := []struct {
		name     string
		take     takeFunc
		c        ContainerSpec
		sentinel error
		wantErr  string
	}{
		{name: "unknown pod", c: ctr("c", "nope", bestEffort()), sentinel: ErrUnknownPod, wantErr: "nope"},
		{name: "duplicate", c: ctr("x", "p", bestEffort()), sentinel: ErrExists, wantErr: "container x"},
		{name: "no id", c: ctr("", "p", bestEffort()), sentinel: ErrInvalid, wantErr: "without id"},
		{name: "no pod id", c: ctr("c", "", bestEffort()), sentinel: ErrInvalid, wantErr: "without id"},
		{name: "bad lifecycle", c: ContainerSpec{ID: "c", PodID: "p", Lifecycle: "ephemeral"}, sentinel: ErrInvalid, wantErr: `lifecycle "ephemeral"`},
		{name: "invalid resources", c: ctr("c", "p", budget.NewContainer(budget.Budget{CPURequest: 2, CPULimit: 1})), sentinel: ErrInvalid, wantErr: "exceeds cpu limit"},
		{name: "allocator failure", take: failTake, c: ctr("c", "p", guaranteed(1000)), sentinel: ErrInsufficient, wantErr: "allocator says no"},
		{name: "allocator misbehaves", take: badTake, c: ctr("c", "p", guaranteed(1000)), sentinel: ErrInvalid, wantErr: "allocator returned"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{})
			mustAddPod(t, p, "p", podBudget(3000))
			mustAdd(t, p, ctr("x", "p", bestEffort()))
			p.take = cmpOr(tc.take, p.take)
			before := p.Snapshot()
			_, u, err := p.AddContainer(tc.c)
			if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %v with %q", err, tc.sentinel, tc.wantErr)
			}
			if u != nil {
				t.Errorf("updates on error")
			}
			if after := p.Snapshot(); !reflect.DeepEqual(before, after) {
				t.Error("failed add changed the state")
			}
		})
	}
}

func cmpOr(a, b takeFunc) takeFunc {
	if a != nil {
		return a
	}
	return b
}

func TestRemoveUnknown(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	if u := p.RemoveContainer("nope"); u != nil {
		t.Errorf("RemoveContainer: %v", u)
	}
	if u := p.RemovePod("nope"); u != nil {
		t.Errorf("RemovePod: %v", u)
	}
}

func TestSnapshotJSON(t *testing.T) {
	p := mustNew(t, dualHT(), Options{StrictReservation: true, Reserved: set("0")})
	mustAddPod(t, p, "p", podBudget(2000))
	mustAdd(t, p, ctr("a", "p", guaranteed(1000)))
	mustAdd(t, p, ctr("s", "p", bestEffort()))
	s := p.Snapshot()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, back) {
		t.Errorf("JSON round trip:\n%+v\n%+v", s, back)
	}
	if s.ReservedCPUs != "0" || len(s.Pods) != 1 || len(s.Pods[0].Containers) != 2 || s.Pods[0].Bubble == "" ||
		s.Pods[0].Budget != "cpu=2000m/2000m,memory=-/8Gi" {
		t.Errorf("snapshot %s", data)
	}
	if c := s.Pods[0].Containers; c[0].Pool != PoolExclusive || c[1].Pool != PoolPodShared || c[1].CPUs != s.Pods[0].SharedPool {
		t.Errorf("containers %+v", c)
	}
	if all := p.Assignments(); len(all) != 2 || all[0].ContainerID != "a" {
		t.Errorf("Assignments %+v", all)
	}
}

// TestPodQoSFromContainers: a container's oom_score_adj showing its pod is
// not Guaranteed takes the bubble back (first container) or is refused
// (later), and never gets exclusive CPUs (container scope).
func TestPodQoSFromContainers(t *testing.T) {
	burst := func(c ContainerSpec) ContainerSpec { c.PodQoS = budget.QoSBurstable; return c }
	t.Run("first container returns the bubble", func(t *testing.T) {
		p := mustNew(t, dualHT(), Options{})
		mustAddPod(t, p, "plain", budget.Budget{})
		mustAdd(t, p, ctr("n", "plain", bestEffort()))
		mustAddPod(t, p, "p", podBudget(4000))
		a, u, err := p.AddContainer(burst(ctr("c", "p", guaranteed(1000))))
		if err != nil {
			t.Fatal(err)
		}
		if a.Pool != PoolNodeShared || !a.CPUs.Equals(p.usable) {
			t.Errorf("assignment %+v, want node-shared on every usable cpu", a)
		}
		if len(u) != 1 || u[0].ContainerID != "n" || !u[0].CPUs.Equals(p.usable) {
			t.Errorf("updates %+v, want n widened to %s", u, p.usable)
		}
		if st := p.Snapshot(); st.Pods[0].Bubble != "" || !strings.Contains(st.Pods[0].Degraded, "says the pod is Burstable") {
			t.Errorf("pod status %+v, want no bubble and the reason", st.Pods[0])
		}
		checkInvariants(t, p)
	})
	t.Run("later container is refused", func(t *testing.T) {
		p := mustNew(t, dualHT(), Options{})
		mustAddPod(t, p, "p", podBudget(4000))
		mustAdd(t, p, ctr("g", "p", guaranteed(1000)))
		before := p.Snapshot()
		_, _, err := p.AddContainer(burst(ctr("b", "p", burstable(500))))
		if !errors.Is(err, ErrQoS) || !strings.Contains(err.Error(), "resources.cgdelegate.io/pod") {
			t.Fatalf("err = %v, want ErrQoS naming the annotation", err)
		}
		if after := p.Snapshot(); !reflect.DeepEqual(before, after) {
			t.Errorf("refusal changed the state")
		}
	})
	t.Run("container scope: no exclusive cpus in a pod that is not guaranteed", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			budget budget.Budget
			spec   ContainerSpec
		}{
			{"burstable pod budget", budget.Budget{CPURequest: 1000, CPULimit: 4000, MemoryLimit: gib}, ctr("c", "p", guaranteed(1000))},
			{"oom_score_adj", budget.Budget{}, burst(ctr("c", "p", guaranteed(1000)))},
		} {
			p := mustNew(t, dualHT(), Options{Scope: "container"})
			mustAddPod(t, p, "p", tc.budget)
			if a, _ := mustAdd(t, p, tc.spec); a.Pool != PoolNodeShared {
				t.Errorf("%s: pool %s, want node-shared", tc.name, a.Pool)
			}
		}
	})
}

// TestLiveInitContainer plays a pod author who annotates a Guaranteed
// container as an init container and lets it run forever. When its
// regular sibling comes, its exclusive CPUs are reused (by the sibling in
// pod scope, by the next tenant in container scope); the container must
// be moved off them in the same step, not forgotten on them.
func TestLiveInitContainer(t *testing.T) {
	tests := []struct {
		name    string
		scope   config.TopologyScope
		sibling ContainerSpec
		// tenant, when set, is another pod's exclusive container added
		// after the sibling.
		tenant bool
	}{
		{name: "pod scope: the sibling reuses the cpus", scope: config.ScopePod, sibling: ctr("app", "a", guaranteed(2000))},
		{name: "container scope: the next tenant gets the cpus", scope: config.ScopeContainer, sibling: ctr("app", "a", burstable(100)), tenant: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{Scope: tc.scope})
			r := newFakeRuntime()
			r.addPod(t, p, PodSpec{ID: "a", Budget: podBudget(2000)})
			liar := r.addCtr(t, p, lifecycle(ctr("liar", "a", guaranteed(2000)), LifecycleInit))
			if liar.Pool != PoolExclusive {
				t.Fatalf("liar %+v", liar)
			}
			r.addCtr(t, p, tc.sibling)
			if tc.tenant {
				r.addPod(t, p, PodSpec{ID: "b", Budget: podBudget(2000)})
				if b := r.addCtr(t, p, ctr("b", "b", guaranteed(2000))); !b.CPUs.Equals(liar.CPUs) {
					t.Fatalf("tenant got %s, not the cpus %s the liar gave back: the test plays nothing", b.CPUs, liar.CPUs)
				}
			} else if a, _ := p.Assignment("app"); !a.CPUs.Equals(liar.CPUs) {
				t.Fatalf("sibling got %s, not the cpus %s the liar gave back: the test plays nothing", a.CPUs, liar.CPUs)
			}
			// The liar still runs.
			checkExclusive(t, p, r, nil)
			checkRuntime(t, p, r)
			checkInvariants(t, p)
			if a, _ := p.Assignment("liar"); a.Pool != PoolNodeShared {
				t.Errorf("liar %+v, want the node shared pool", a)
			}
			// Its stop is an ordinary node-shared container's.
			if u := p.RemoveContainer("liar"); len(u) != 0 {
				t.Errorf("liar's stop updates %v", ids(u))
			}
			r.remove("liar")
			checkRuntime(t, p, r)
		})
	}
}
