package policy

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
)

func TestStamp(t *testing.T) {
	a := Assignment{Pool: PoolExclusive, Bubble: set("0-3"), CPUs: set("2-3"), Mems: set("0")}
	if got, want := a.Stamp(), "v=1;pool=exclusive;bubble=0-3;cpus=2-3;mems=0"; got != want {
		t.Fatalf("Stamp %q, want %q", got, want)
	}
	tests := []struct {
		name    string
		in      string
		want    Stamp
		wantErr string
	}{
		{
			name: "exclusive", in: "v=1;pool=exclusive;bubble=0-3;cpus=2-3;mems=0",
			want: Stamp{Pool: PoolExclusive, Bubble: set("0-3"), CPUs: set("2-3"), Mems: set("0")},
		},
		{
			name: "node shared without bubble", in: "v=1;pool=node-shared;bubble=;cpus=0-15;mems=0-1",
			want: Stamp{Pool: PoolNodeShared, Bubble: set(""), CPUs: set("0-15"), Mems: set("0-1")},
		},
		{
			name: "field order is free", in: "cpus=4,6;pool=pod-shared;mems=1;bubble=4-7;v=1",
			want: Stamp{Pool: PoolPodShared, Bubble: set("4-7"), CPUs: set("4,6"), Mems: set("1")},
		},
		{name: "empty", in: "", wantErr: `field "" is not key=value`},
		{name: "no version", in: "pool=exclusive;bubble=;cpus=1;mems=0", wantErr: `version "" is not 1`},
		{name: "future version", in: "v=2;pool=exclusive;bubble=;cpus=1;mems=0", wantErr: `version "2"`},
		{name: "bad pool", in: "v=1;pool=shared;bubble=;cpus=1;mems=0", wantErr: `pool "shared"`},
		{name: "bad cpus", in: "v=1;pool=exclusive;bubble=;cpus=1-x;mems=0", wantErr: `cpus "1-x"`},
		{name: "bad bubble", in: "v=1;pool=exclusive;bubble=3-1;cpus=1;mems=0", wantErr: `bubble "3-1"`},
		{name: "missing mems", in: "v=1;pool=exclusive;bubble=;cpus=1", wantErr: `field "mems" missing`},
		{name: "duplicate", in: "v=1;v=1;pool=exclusive;bubble=;cpus=1;mems=0", wantErr: `field "v" given twice`},
		{name: "unknown field", in: "v=1;pool=exclusive;bubble=;cpus=1;mems=0;x=1", wantErr: "unknown fields"},
		{name: "exclusive without cpus", in: "v=1;pool=exclusive;bubble=;cpus=;mems=", wantErr: "exclusive stamp without cpus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStamp(tc.in)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrStamp) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.in) {
					t.Fatalf("error %v, want ErrStamp naming %q and %q", err, tc.in, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Pool != tc.want.Pool || !got.Bubble.Equals(tc.want.Bubble) || !got.CPUs.Equals(tc.want.CPUs) || !got.Mems.Equals(tc.want.Mems) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// snapshotOf turns a policy's state into a Synchronize-like snapshot, as
// the NRI layer would: pods with budgets, containers with the stamps they
// got at creation and their current cpusets.
type fakeRuntime struct {
	pods  map[string]PodSpec
	ctrs  map[string]ContainerSpec
	stamp map[string]string
	cpus  map[string]cpuset.CPUSet
	mems  map[string]cpuset.CPUSet
	// live holds the plain init containers that still run beside their
	// pod's app containers.
	live map[string]bool
}

// remove forgets a container that stopped.
func (r *fakeRuntime) remove(id string) {
	delete(r.ctrs, id)
	delete(r.live, id)
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		pods: map[string]PodSpec{}, ctrs: map[string]ContainerSpec{}, stamp: map[string]string{},
		cpus: map[string]cpuset.CPUSet{}, mems: map[string]cpuset.CPUSet{}, live: map[string]bool{},
	}
}

func (r *fakeRuntime) apply(as ...Assignment) {
	for _, a := range as {
		r.cpus[a.ContainerID], r.mems[a.ContainerID] = a.CPUs, a.Mems
	}
}

func (r *fakeRuntime) addPod(t testing.TB, p *Policy, ps PodSpec) {
	t.Helper()
	u, err := p.AddPod(ps)
	if err != nil {
		t.Fatal(err)
	}
	r.pods[ps.ID] = ps
	r.apply(u...)
}

func (r *fakeRuntime) addCtr(t testing.TB, p *Policy, c ContainerSpec) Assignment {
	t.Helper()
	a, u, err := p.AddContainer(c)
	if err != nil {
		t.Fatal(err)
	}
	r.ctrs[c.ID], r.stamp[c.ID] = c, a.Stamp()
	r.apply(a)
	r.apply(u...)
	return a
}

func (r *fakeRuntime) snapshot() ([]PodSpec, []ContainerState) {
	var pods []PodSpec
	for _, ps := range r.pods {
		pods = append(pods, ps)
	}
	var ctrs []ContainerState
	for id, c := range r.ctrs {
		ctrs = append(ctrs, ContainerState{Spec: c, Stamp: r.stamp[id], CPUs: r.cpus[id], Mems: r.mems[id]})
	}
	return pods, ctrs
}

func buildSample(t *testing.T, scope config.TopologyScope) (*Policy, *fakeRuntime) {
	p := mustNew(t, dualHT(), Options{Scope: scope, StrictReservation: true, Reserved: set("0")})
	r := newFakeRuntime()
	r.addPod(t, p, PodSpec{ID: "nb"})
	r.addCtr(t, p, ctr("nb-1", "nb", bestEffort()))
	r.addPod(t, p, PodSpec{ID: "p1", Budget: podBudget(4000)})
	r.addCtr(t, p, ctr("p1-g", "p1", guaranteed(2000)))
	r.addCtr(t, p, ctr("p1-s", "p1", burstable(1000)))
	r.addPod(t, p, PodSpec{ID: "p2", Budget: podBudget(3000)})
	r.addCtr(t, p, ctr("p2-s", "p2", bestEffort()))
	r.addCtr(t, p, ctr("p2-g", "p2", guaranteed(1000)))
	return p, r
}

func TestRebuildRoundTrip(t *testing.T) {
	for _, scope := range []config.TopologyScope{config.ScopePod, config.ScopeContainer} {
		t.Run(string(scope), func(t *testing.T) {
			p, r := buildSample(t, scope)
			want := p.Snapshot()
			q := mustNew(t, dualHT(), Options{Scope: scope, StrictReservation: true, Reserved: set("0")})
			pods, ctrs := r.snapshot()
			res := q.Rebuild(pods, ctrs)
			if len(res.Conflicts) != 0 || len(res.Updates) != 0 {
				t.Errorf("conflicts %v, updates %v", res.Conflicts, ids(res.Updates))
			}
			if got := q.Snapshot(); !reflect.DeepEqual(got, want) {
				t.Errorf("rebuilt state differs:\n%+v\n%+v", got, want)
			}
			// Rebuild over a non-empty state replaces it.
			res = p.Rebuild(pods, ctrs)
			if len(res.Conflicts) != 0 || len(res.Updates) != 0 || !reflect.DeepEqual(p.Snapshot(), want) {
				t.Errorf("rebuild over itself: %+v", res)
			}
		})
	}
}

func TestRebuildRepairs(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(r *fakeRuntime)
		conflict string
		updated  []string
		check    func(t *testing.T, p *Policy)
	}{
		{
			name:     "cpuset disagrees with stamp",
			mutate:   func(r *fakeRuntime) { r.cpus["p1-g"] = set("0-15") },
			conflict: `container p1-g: its stamp says exclusive cpus 1,9, but it runs on cpus "0-15"; stamp ignored`,
			updated:  []string{"p1-g"},
		},
		{
			name: "shared container drifted",
			mutate: func(r *fakeRuntime) {
				r.cpus["nb-1"] = set("1")
			},
			updated: []string{"nb-1"},
		},
		{
			name: "two bubbles claim the same cpus",
			mutate: func(r *fakeRuntime) {
				b, _ := ParseStamp(r.stamp["p1-g"])
				for _, id := range []string{"p2-s", "p2-g"} {
					s, _ := ParseStamp(r.stamp[id])
					r.stamp[id] = Assignment{Pool: s.Pool, Bubble: firstN(b.Bubble, 3), CPUs: s.CPUs, Mems: s.Mems}.Stamp()
				}
			},
			conflict: "claimed twice: pod p2 stamped bubble",
			check: func(t *testing.T, p *Policy) {
				b1, b2 := p.st.pods["p1"].bubble, p.st.pods["p2"].bubble
				if !b1.Intersection(b2).IsEmpty() || b2.Size() != 3 {
					t.Errorf("bubbles %s and %s", b1, b2)
				}
			},
		},
		{
			name: "two slices claim the same cpus",
			mutate: func(r *fakeRuntime) {
				r.ctrs["p1-g2"] = ctr("p1-g2", "p1", guaranteed(1000))
				s, _ := ParseStamp(r.stamp["p1-g"])
				r.stamp["p1-g2"] = Assignment{Pool: PoolExclusive, Bubble: s.Bubble, CPUs: firstN(s.CPUs, 1), Mems: s.Mems}.Stamp()
				r.cpus["p1-g2"], r.mems["p1-g2"] = firstN(s.CPUs, 1), s.Mems
				r.ctrs["p1-s"] = ctr("p1-s", "p1", bestEffort()) // keep the budget sum at 3000m
			},
			conflict: "claimed twice: container p1-g2 stamped slice",
			updated:  []string{"p1-g2", "p1-s"},
		},
		{
			name:     "malformed stamp",
			mutate:   func(r *fakeRuntime) { r.stamp["p1-g"] = "garbage" },
			conflict: "malformed assignment stamp",
		},
		{
			name: "stamped bubble now reserved",
			mutate: func(r *fakeRuntime) {
				s, _ := ParseStamp(r.stamp["p1-g"])
				r.stamp["p1-g"] = Assignment{Pool: s.Pool, Bubble: firstN(s.Bubble, 3).Union(set("0")), CPUs: s.CPUs, Mems: s.Mems}.Stamp()
				r.stamp["p1-s"] = r.stamp["p1-g"]
			},
			conflict: "includes unusable cpus 0",
			check: func(t *testing.T, p *Policy) {
				if p.st.pods["p1"].bubble.Contains(0) {
					t.Error("bubble took reserved cpu 0")
				}
			},
		},
		{
			name: "stamped bubble of the wrong size",
			mutate: func(r *fakeRuntime) {
				ps := r.pods["p1"]
				ps.Budget = podBudget(5000)
				r.pods["p1"] = ps
			},
			conflict: "has 4 cpus, its budget needs 5; reallocated",
			check: func(t *testing.T, p *Policy) {
				if p.st.pods["p1"].bubble.Size() != 5 {
					t.Error("bubble not resized")
				}
			},
		},
		{
			name:     "container of an unknown pod",
			mutate:   func(r *fakeRuntime) { delete(r.pods, "nb") },
			conflict: "refers to unknown pod nb",
		},
		{
			name: "stamped slice of the wrong size",
			mutate: func(r *fakeRuntime) {
				c := r.ctrs["p1-g"]
				c.Resources = guaranteed(1000)
				r.ctrs["p1-g"] = c
			},
			conflict: "container p1-g stamped slice",
			updated:  []string{"p1-g", "p1-s"},
		},
		{
			name: "no stamps at all (pods created before the plugin)",
			mutate: func(r *fakeRuntime) {
				for id := range r.stamp {
					r.stamp[id] = ""
				}
			},
			check: func(t *testing.T, p *Policy) {
				if p.st.pods["p1"].bubble.Size() != 4 || p.st.ctrs["p1-g"].pool != PoolExclusive {
					t.Error("fresh allocation missing")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, r := buildSample(t, config.ScopePod)
			tc.mutate(r)
			q := mustNew(t, dualHT(), Options{StrictReservation: true, Reserved: set("0")})
			pods, ctrs := r.snapshot()
			res := q.Rebuild(pods, ctrs)
			joined := strings.Join(res.Conflicts, "\n")
			if tc.conflict != "" && !strings.Contains(joined, tc.conflict) {
				t.Errorf("conflicts %q lack %q", joined, tc.conflict)
			}
			for _, id := range tc.updated {
				if !slices.Contains(ids(res.Updates), id) {
					t.Errorf("updates %v lack %s", ids(res.Updates), id)
				}
			}
			if tc.check != nil {
				tc.check(t, q)
			}
			// Whatever the damage, the result is consistent and applying the
			// updates makes the runtime agree with it.
			checkInvariants(t, q)
			r.apply(res.Updates...)
			for _, a := range q.Assignments() {
				if !r.cpus[a.ContainerID].Equals(a.CPUs) {
					t.Errorf("%s runs on %s after the updates, assigned %s", a.ContainerID, r.cpus[a.ContainerID], a.CPUs)
				}
			}
		})
	}
}

func firstN(s cpuset.CPUSet, n int) cpuset.CPUSet { return cpuset.New(s.List()[:n]...) }

func TestRebuildDegraded(t *testing.T) {
	// Two 6-cpu pods cannot both fit in 15 usable cpus with one kept: with no
	// stamps, the second (by id) runs in the node shared pool.
	p := mustNew(t, dualHT(), Options{StrictReservation: true, Reserved: set("0")})
	res := p.Rebuild(
		[]PodSpec{{ID: "a", Budget: podBudget(8000)}, {ID: "b", Budget: podBudget(7000)}},
		[]ContainerState{
			{Spec: ctr("a1", "a", guaranteed(2000))},
			{Spec: ctr("b1", "b", guaranteed(2000))},
			{Spec: ctr("b2", "b", bestEffort())},
		})
	if !strings.Contains(strings.Join(res.Conflicts, "\n"), "pod b gets no bubble") {
		t.Fatalf("conflicts %v", res.Conflicts)
	}
	s := p.Snapshot()
	if s.Pods[1].Degraded == "" || s.Pods[1].Bubble != "" {
		t.Errorf("pod b status %+v", s.Pods[1])
	}
	if a, _ := p.Assignment("b1"); a.Pool != PoolNodeShared {
		t.Errorf("b1 %+v", a)
	}
	if len(res.Updates) != 3 {
		t.Errorf("updates %v (every container was unpinned)", ids(res.Updates))
	}
	checkInvariants(t, p)
}

func TestRebuildInitContainers(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	init := ContainerSpec{ID: "i", PodID: "a", Resources: guaranteed(2000), Lifecycle: LifecycleInit}
	side := ContainerSpec{ID: "s", PodID: "a", Resources: guaranteed(1000), Lifecycle: LifecycleSidecar}
	res := p.Rebuild([]PodSpec{{ID: "a", Budget: podBudget(4000)}},
		[]ContainerState{{Spec: init}, {Spec: side}, {Spec: ctr("app", "a", guaranteed(2000))}})
	// Listed, the init container has not stopped: it runs in the node
	// shared pool, its CPUs are the app container's.
	if a, ok := p.Assignment("i"); !ok || a.Pool != PoolNodeShared {
		t.Errorf("init container listed beside its app container: %+v, want it kept in the node shared pool", a)
	}
	if a, _ := p.Assignment("app"); a.Pool != PoolExclusive || a.CPUs.Size() != 2 {
		t.Errorf("app %+v", a)
	}
	if st := p.Snapshot(); !st.Pods[0].Containers[1].Released {
		t.Errorf("status %+v does not say the init container was released", st.Pods[0].Containers)
	}
	if a, _ := p.Assignment("s"); a.Pool != PoolExclusive {
		t.Errorf("sidecar %+v", a)
	}
	if len(res.Conflicts) != 0 {
		t.Errorf("conflicts %v", res.Conflicts)
	}
	// Only init containers: they keep their CPUs.
	q := mustNew(t, dualHT(), Options{})
	q.Rebuild([]PodSpec{{ID: "a", Budget: podBudget(4000)}}, []ContainerState{{Spec: init}})
	if a, _ := q.Assignment("i"); a.Pool != PoolExclusive {
		t.Errorf("running init container %+v", a)
	}
}

func TestRebuildBadInput(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	res := p.Rebuild(
		[]PodSpec{{ID: "a"}, {ID: "a"}, {Name: "noid"}, {ID: "bad", Budget: budget.Budget{CPURequest: 2, CPULimit: 1}}},
		[]ContainerState{
			{Spec: ctr("c", "a", bestEffort())},
			{Spec: ctr("c", "a", bestEffort())},
			{Spec: ctr("", "a", bestEffort())},
			{Spec: ContainerSpec{ID: "l", PodID: "a", Lifecycle: "weird"}},
			{Spec: ctr("r", "a", budget.NewContainer(budget.Budget{CPURequest: 5, CPULimit: 1}))},
		})
	joined := strings.Join(res.Conflicts, "\n")
	for _, w := range []string{
		"pod a listed twice", `pod "noid" without id`, "pod bad budget ignored",
		"container c listed twice", `container "" without id`, `lifecycle "weird" treated as regular`, "container r resources ignored",
	} {
		if !strings.Contains(joined, w) {
			t.Errorf("conflicts lack %q:\n%s", w, joined)
		}
	}
	checkInvariants(t, p)
}

// TestRebuildKeepsUnstampedSlices is the VM's plugin restart during churn:
// a Guaranteed container created while the plugin was down has no stamp
// (an update can not add annotations), gets a fresh slice at the first
// rebuild, and must keep it at every later rebuild instead of being moved.
func TestRebuildKeepsUnstampedSlices(t *testing.T) {
	topo := literalTopo(2, 1, 2, 1) // node 0: 0-1, node 1: 2-3
	p := mustNew(t, topo, Options{Scope: config.ScopePod})
	r := newFakeRuntime()
	r.addPod(t, p, PodSpec{ID: "p", Budget: podBudget(3000)})
	r.addCtr(t, p, ctr("p-1first", "p", guaranteed(1000)))
	r.addCtr(t, p, ctr("p-2shared", "p", burstable(500)))

	// Down: the first slice goes, an unpinned Guaranteed container comes.
	delete(r.ctrs, "p-1first")
	r.ctrs["p-0down"] = ctr("p-0down", "p", guaranteed(1000))
	r.cpus["p-0down"], r.mems["p-0down"] = set("0-3"), set("0-1")

	q := mustNew(t, topo, Options{Scope: config.ScopePod})
	pods, ctrs := r.snapshot()
	r.apply(q.Rebuild(pods, ctrs).Updates...)
	down, _ := q.Assignment("p-0down")
	if down.Pool != PoolExclusive {
		t.Fatalf("unstamped Guaranteed container after the first rebuild: %+v", down)
	}
	r.addCtr(t, q, ctr("p-3after", "p", guaranteed(1000)))
	want := q.Snapshot()

	for i := range 3 {
		q2 := mustNew(t, topo, Options{Scope: config.ScopePod})
		pods, ctrs := r.snapshot()
		res := q2.Rebuild(pods, ctrs)
		if len(res.Updates) != 0 || len(res.Conflicts) != 0 {
			t.Errorf("rebuild %d moved running containers: updates %v, conflicts %v", i+2, ids(res.Updates), res.Conflicts)
		}
		if got := q2.Snapshot(); !reflect.DeepEqual(got, want) {
			t.Errorf("rebuild %d state differs:\n%+v\n%+v", i+2, got, want)
		}
		r.apply(res.Updates...)
	}
}

// TestRebuildAdoption: an unstamped exclusive-eligible container keeps its
// current cpuset only when that is a valid slice; a stamp always wins.
func TestRebuildAdoption(t *testing.T) {
	topo := literalTopo(2, 1, 2, 1) // node 0: 0-1, node 1: 2-3
	// cur picks the unstamped container's current cpus from the pod's
	// bubble (empty in container scope) and the stamped slice.
	type pick func(bubble, stamped cpuset.CPUSet) cpuset.CPUSet
	first := func(s cpuset.CPUSet) cpuset.CPUSet { return cpuset.New(s.List()[0]) }
	tests := []struct {
		name  string
		scope config.TopologyScope
		cur   pick
		kept  bool
	}{
		{
			name: "pod scope, free cpu of the bubble", scope: config.ScopePod, kept: true,
			cur: func(b, s cpuset.CPUSet) cpuset.CPUSet { return first(b.Difference(s)) },
		},
		{
			name: "pod scope, the stamped slice", scope: config.ScopePod,
			cur: func(_, s cpuset.CPUSet) cpuset.CPUSet { return s },
		},
		{
			name: "pod scope, outside the bubble", scope: config.ScopePod,
			cur: func(b, _ cpuset.CPUSet) cpuset.CPUSet { return first(set("0-3").Difference(b)) },
		},
		{
			name: "pod scope, wrong size", scope: config.ScopePod,
			cur: func(b, s cpuset.CPUSet) cpuset.CPUSet { return b.Difference(s) },
		},
		{
			name: "pod scope, unpinned", scope: config.ScopePod,
			cur: func(_, _ cpuset.CPUSet) cpuset.CPUSet { return cpuset.New() },
		},
		{
			name: "container scope, free node cpu", scope: config.ScopeContainer, kept: true,
			cur: func(_, s cpuset.CPUSet) cpuset.CPUSet { return first(set("0-3").Difference(s)) },
		},
		{
			name: "container scope, the stamped slice", scope: config.ScopeContainer,
			cur: func(_, s cpuset.CPUSet) cpuset.CPUSet { return s },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, topo, Options{Scope: tc.scope})
			r := newFakeRuntime()
			r.addPod(t, p, PodSpec{ID: "p", Budget: podBudget(3000)})
			a := r.addCtr(t, p, ctr("p-a", "p", guaranteed(1000)))
			r.addCtr(t, p, ctr("p-s", "p", burstable(500)))
			cur := tc.cur(a.Bubble, a.CPUs)
			r.ctrs["p-0"] = ctr("p-0", "p", guaranteed(1000))
			r.cpus["p-0"] = cur

			q := mustNew(t, topo, Options{Scope: tc.scope})
			pods, ctrs := r.snapshot()
			res := q.Rebuild(pods, ctrs)
			got, _ := q.Assignment("p-0")
			stamped, _ := q.Assignment("p-a")
			if got.Pool != PoolExclusive || !stamped.CPUs.Equals(a.CPUs) || !got.CPUs.Intersection(stamped.CPUs).IsEmpty() {
				t.Fatalf("p-0 %s %s, stamped p-a %s (was %s)", got.Pool, got.CPUs, stamped.CPUs, a.CPUs)
			}
			if kept := got.CPUs.Equals(cur); kept != tc.kept {
				t.Errorf("p-0 on %s, current %q: kept %v, want %v", got.CPUs, cur, kept, tc.kept)
			}
			if len(res.Conflicts) != 0 {
				t.Errorf("conflicts %v", res.Conflicts)
			}
		})
	}
}

// TestRestoreLimit: Rebuild gives an exclusive container back the CPU limit
// cgdelegate removed with its quota, and only that one.
func TestRestoreLimit(t *testing.T) {
	// A Guaranteed 2-CPU container after cgdelegate set its quota to -1:
	// request 2000m from shares, no limit.
	unlimited := budget.NewContainer(budget.Budget{CPURequest: 2000, MemoryLimit: 1 << 30})
	excl := Assignment{Pool: PoolExclusive, CPUs: cpuset.New(1, 9), Mems: cpuset.New(0), Bubble: cpuset.New(0, 1, 8, 9)}.Stamp()
	shared := Assignment{Pool: PoolPodShared, CPUs: cpuset.New(0, 8), Mems: cpuset.New(0), Bubble: cpuset.New(0, 1, 8, 9)}.Stamp()
	// The runtime reports an unknown quota as 0.
	const unknown = 0
	tests := []struct {
		name  string
		stamp string
		quota int64
		want  int
	}{
		{"exclusive stamp restores the limit", excl, -1, 2},
		{"exclusive stamp, quota unknown", excl, unknown, 2},
		{"shared stamp leaves it", shared, unknown, 0},
		{"shared stamp leaves it, even with quota -1", shared, -1, 0},
		{"no stamp leaves it", "", unknown, 0},
		{"no stamp, quota 0 leaves it", "", 0, 0},
		// Pinned by a Synchronize after it was created without the plugin:
		// the quota is -1, but there is no stamp.
		{"no stamp, quota -1 restores the limit", "", -1, 2},
		{"bad stamp leaves it", "v=9", unknown, 0},
		{"bad stamp, quota -1 restores the limit", "v=9", -1, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := ContainerState{Spec: ctr("c", "p", unlimited), Stamp: tc.stamp, CPUQuota: tc.quota}
			stamp, _ := cs.parsedStamp()
			if stamp != nil {
				cs.CPUs = stamp.CPUs // the runtime reports the cpus the stamp gave
			}
			got := restoreLimit(cs.Spec, stamp, cs.CPUQuota)
			if got.Resources.ExclusiveCPUs() != tc.want {
				t.Fatalf("ExclusiveCPUs = %d, want %d (%+v)", got.Resources.ExclusiveCPUs(), tc.want, got.Resources)
			}
			// The same through Rebuild: the restored container gets a slice.
			p := mustNew(t, dualHT(), Options{})
			p.Rebuild([]PodSpec{{ID: "p", Budget: podBudget(4000)}}, []ContainerState{cs})
			if a, _ := p.Assignment("c"); (a.Pool == PoolExclusive) != (tc.want > 0) {
				t.Errorf("rebuilt assignment %+v, want exclusive %v", a, tc.want > 0)
			}
		})
	}
}

// TestRebuildForgedStamp plays a pod author who copies another pod's
// stamp onto their own container (a runtime that copies pod annotations
// to containers does it for them), created while no plugin pinned: the
// runtime reports it on no cpuset, or on the whole node. Its id sorts
// first, so a trusted stamp would be kept first and move the victim.
func TestRebuildForgedStamp(t *testing.T) {
	tests := []struct {
		name  string
		scope config.TopologyScope
		// forge is the stamp, from the victim's container's.
		forge func(victim Stamp) Stamp
		cur   cpuset.CPUSet
	}{
		{name: "pod scope, exclusive, no cpuset", scope: config.ScopePod, forge: func(v Stamp) Stamp { return v }, cur: cpuset.New()},
		{name: "pod scope, exclusive, whole node", scope: config.ScopePod, forge: func(v Stamp) Stamp { return v }, cur: set("0-15")},
		{
			name: "pod scope, pod-shared", scope: config.ScopePod, cur: cpuset.New(),
			forge: func(v Stamp) Stamp { v.Pool = PoolPodShared; return v },
		},
		{name: "container scope, exclusive", scope: config.ScopeContainer, forge: func(v Stamp) Stamp { return v }, cur: set("0-15")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{Scope: tc.scope})
			r := newFakeRuntime()
			r.addPod(t, p, PodSpec{ID: "victim", Budget: podBudget(3000)})
			r.addCtr(t, p, ctr("victim-g", "victim", guaranteed(2000)))
			r.addCtr(t, p, ctr("victim-s", "victim", burstable(500)))
			// The victim's exclusive CPUs, and in pod scope its whole
			// bubble, must stay (in container scope its shared container
			// is in the node shared pool, which the attacker's own fresh
			// slice may narrow).
			victim := map[string]cpuset.CPUSet{"victim-g": r.cpus["victim-g"]}
			if tc.scope == config.ScopePod {
				victim["victim-s"] = r.cpus["victim-s"]
			}
			v, err := ParseStamp(r.stamp["victim-g"])
			if err != nil {
				t.Fatal(err)
			}
			f := tc.forge(v)
			r.pods["attacker"] = PodSpec{ID: "attacker", Budget: podBudget(3000)}
			r.ctrs["attacker-g"] = ctr("attacker-g", "attacker", guaranteed(2000))
			r.stamp["attacker-g"] = Assignment{Pool: f.Pool, Bubble: f.Bubble, CPUs: f.CPUs, Mems: f.Mems}.Stamp()
			r.cpus["attacker-g"], r.mems["attacker-g"] = tc.cur, cpuset.New()

			pods, ctrs := r.snapshot()
			res := p.Rebuild(pods, ctrs)
			r.apply(res.Updates...)
			for id, was := range victim {
				if a, _ := p.Assignment(id); !a.CPUs.Equals(was) || !r.cpus[id].Equals(was) {
					t.Errorf("the forged stamp moved %s from %s to %s (conflicts %q)", id, was, a.CPUs, res.Conflicts)
				}
			}
			a, _ := p.Assignment("attacker-g")
			if held := v.Bubble.Union(v.CPUs); !a.CPUs.Intersection(held).IsEmpty() {
				t.Errorf("attacker runs on %s, in the victim's %s", a.CPUs, held)
			}
			if !strings.Contains(strings.Join(res.Conflicts, "\n"), "container attacker-g: its stamp says") {
				t.Errorf("conflicts %q do not name the ignored stamp", res.Conflicts)
			}
			checkInvariants(t, p)
		})
	}
}
