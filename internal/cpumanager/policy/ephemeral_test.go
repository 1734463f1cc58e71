package policy

import (
	"reflect"
	"slices"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
)

// debugger is container "dbg" of pod "p" as the kubelet sends an
// ephemeral container (kubectl debug) in a pod with pod-level resources:
// the pod's limits, nothing of its own (budget.PodLimitsOnly).
func debugger(podLimits budget.Budget) ContainerSpec {
	r := budget.NewContainer(budget.Budget{CPULimit: podLimits.CPULimit, MemoryLimit: podLimits.MemoryLimit})
	r.PodLimits = true
	return ctr("dbg", "p", r)
}

// TestNodeSharedOverflow: a regular container without CPUs of its own in a
// pod whose bubble is all exclusive is an ephemeral container (the kubelet
// would have refused a regular one): it runs in the node shared pool, as
// the kubelet runs every ephemeral container, and is never refused.
func TestNodeSharedOverflow(t *testing.T) {
	pb := podBudget(2000)
	tests := []struct {
		name  string
		first []ContainerSpec
		last  ContainerSpec
		want  Pool
		// moved are the containers the add moves (released init
		// containers that may still run).
		moved []string
	}{
		{
			name:  "debugger into an all-exclusive bubble",
			first: []ContainerSpec{ctr("a", "p", guaranteed(1000)), ctr("b", "p", guaranteed(1000))},
			last:  debugger(pb), want: PoolNodeShared,
		},
		{
			name:  "best-effort container into an all-exclusive bubble",
			first: []ContainerSpec{ctr("a", "p", guaranteed(2000))},
			last:  ctr("dbg", "p", bestEffort()), want: PoolNodeShared,
		},
		{
			name:  "debugger into a bubble with a shared pool",
			first: []ContainerSpec{ctr("a", "p", guaranteed(1000)), ctr("s", "p", burstable(0))},
			last:  debugger(pb), want: PoolPodShared,
		},
		{
			name:  "debugger into a bubble with free cpus",
			first: []ContainerSpec{ctr("a", "p", guaranteed(1000))},
			last:  debugger(pb), want: PoolPodShared,
		},
		{
			// The app container releases the init container's slice.
			name:  "first app container after an init container held the bubble",
			first: []ContainerSpec{lifecycle(ctr("i", "p", guaranteed(2000)), LifecycleInit)},
			last:  ctr("app", "p", bestEffort()), want: PoolPodShared, moved: []string{"i"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{})
			mustAddPod(t, p, "p", pb)
			for _, c := range tc.first {
				mustAdd(t, p, c)
			}
			a, u, err := p.AddContainer(tc.last)
			if err != nil {
				t.Fatalf("AddContainer: %v", err)
			}
			if !slices.Equal(ids(u), tc.moved) {
				t.Errorf("updates %v, want %v", ids(u), tc.moved)
			}
			bubble := p.st.pods["p"].bubble
			want := Assignment{ContainerID: tc.last.ID, PodID: "p", Pool: tc.want, Bubble: bubble}
			switch tc.want {
			case PoolNodeShared:
				want.CPUs, want.Mems = set("0-15").Difference(bubble), set("0-1")
			default:
				want.CPUs = p.v.pod["p"]
				want.Mems = p.topo.MemsOf(want.CPUs)
			}
			if !reflect.DeepEqual(a, want) {
				t.Errorf("assignment %+v, want %+v", a, want)
			}
			if want := "v=1;pool=" + string(tc.want) + ";bubble=" + bubble.String(); a.Stamp()[:len(want)] != want {
				t.Errorf("stamp %q, want it to start with %q", a.Stamp(), want)
			}
			checkInvariants(t, p)
		})
	}
}

// TestNodeSharedOverflowLifetime follows a debugger in the node shared pool
// beside its all-exclusive bubble: it follows the node pool, survives a
// plugin restart in the same place, and leaves nothing behind.
func TestNodeSharedOverflowLifetime(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	r := newFakeRuntime()
	pb := podBudget(2000)
	r.addPod(t, p, PodSpec{ID: "p", Budget: pb})
	r.addCtr(t, p, ctr("a", "p", guaranteed(2000)))
	dbg := r.addCtr(t, p, debugger(pb))
	bubble := p.st.pods["p"].bubble
	if dbg.Pool != PoolNodeShared || !dbg.CPUs.Equals(set("0-15").Difference(bubble)) {
		t.Fatalf("debugger %+v, want node-shared beside bubble %s", dbg, bubble)
	}

	// Another pod's bubble shrinks the node pool: the debugger follows.
	u, err := p.AddPod(PodSpec{ID: "q", Budget: podBudget(4000)})
	if err != nil {
		t.Fatal(err)
	}
	r.pods["q"] = PodSpec{ID: "q", Budget: podBudget(4000)}
	r.apply(u...)
	qb := p.st.pods["q"].bubble
	if len(u) != 1 || u[0].ContainerID != "dbg" || u[0].Pool != PoolNodeShared ||
		!u[0].CPUs.Equals(set("0-15").Difference(bubble).Difference(qb)) {
		t.Fatalf("updates %+v, want dbg on the node pool without bubbles %s and %s", u, bubble, qb)
	}

	// A restart rebuilds the same state, without updates.
	rebuildSame(t, p, r)

	// The exclusive container goes: the debugger stays where it is, and
	// a restart keeps it there (its stamp says so).
	if u := p.RemoveContainer("a"); len(u) != 0 {
		t.Errorf("remove a: updates %v", ids(u))
	}
	delete(r.ctrs, "a")
	if a, _ := p.Assignment("dbg"); a.Pool != PoolNodeShared {
		t.Errorf("debugger moved to %s", a.Pool)
	}
	want := p.Snapshot()
	q := mustNew(t, dualHT(), Options{})
	pods, ctrs := r.snapshot()
	// Its bubble is known from pinned stamps only: the pod gets one anew,
	// here the same, and the debugger stays beside it.
	q.Rebuild(pods, ctrs)
	if got := q.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Errorf("rebuilt state without pinned containers differs:\n%+v\n%+v", got, want)
	}
	checkInvariants(t, q)

	// Removing the debugger changes no pool; the state ends empty.
	if u := p.RemoveContainer("dbg"); len(u) != 0 {
		t.Errorf("remove dbg: updates %v", ids(u))
	}
	p.RemovePod("p")
	p.RemovePod("q")
	if len(p.st.ctrs) != 0 || len(p.st.pods) != 0 || len(p.st.byPod) != 0 || len(p.st.nodeShared) != 0 || len(p.v.pod) != 0 {
		t.Errorf("state after removing everything: %+v", p.st)
	}
	if !p.v.node.Equals(p.usable) {
		t.Errorf("node pool %s, want %s", p.v.node, p.usable)
	}
	checkInvariants(t, p)
}

// TestRebuildKeepsOverflow: a debugger stamped node-shared beside a bubble
// whose other containers are pinned stays node-shared after a restart,
// even when its pod's shared pool has CPUs again; an exclusive container's
// slice is kept although it leaves the pod pool empty.
func TestRebuildKeepsOverflow(t *testing.T) {
	tests := []struct {
		name string
		// exclusive are the pod's exclusive containers in a 4-cpu bubble.
		exclusive []int64
		// remove is an exclusive container gone while no plugin ran.
		remove string
	}{
		{name: "all exclusive", exclusive: []int64{2000, 2000}},
		{name: "pool back", exclusive: []int64{2000, 2000}, remove: "x1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{})
			r := newFakeRuntime()
			pb := podBudget(4000)
			r.addPod(t, p, PodSpec{ID: "p", Budget: pb})
			for i, milli := range tc.exclusive {
				r.addCtr(t, p, ctr("x"+string(rune('0'+i)), "p", guaranteed(milli)))
			}
			dbg := r.addCtr(t, p, debugger(pb))
			if dbg.Pool != PoolNodeShared {
				t.Fatalf("debugger %+v", dbg)
			}
			if tc.remove != "" {
				p.RemoveContainer(tc.remove)
				delete(r.ctrs, tc.remove)
			}
			checkInvariants(t, rebuildSame(t, p, r))
		})
	}
	// Without its stamp (created while no plugin ran) a regular container
	// without cpus goes where AddContainer would put it.
	p := mustNew(t, dualHT(), Options{})
	r := newFakeRuntime()
	r.addPod(t, p, PodSpec{ID: "p", Budget: podBudget(2000)})
	x := r.addCtr(t, p, ctr("x", "p", guaranteed(2000)))
	pods, ctrs := r.snapshot()
	ctrs = append(ctrs, ContainerState{Spec: debugger(podBudget(2000)), CPUs: set("0-15"), Mems: set("0-1")})
	res := p.Rebuild(pods, ctrs)
	a, _ := p.Assignment("dbg")
	if xa, _ := p.Assignment("x"); !xa.CPUs.Equals(x.CPUs) || a.Pool != PoolNodeShared || !a.CPUs.Equals(set("0-15").Difference(x.CPUs)) {
		t.Errorf("unstamped debugger %+v, x %+v (conflicts %v)", a, xa, res.Conflicts)
	}
	checkInvariants(t, p)
}

// rebuildSame rebuilds a new policy from what r holds and checks that it
// has p's state and sends no updates; it returns the new policy.
func rebuildSame(t *testing.T, p *Policy, r *fakeRuntime) *Policy {
	t.Helper()
	want := p.Snapshot()
	q := mustNew(t, dualHT(), Options{})
	pods, ctrs := r.snapshot()
	if res := q.Rebuild(pods, ctrs); len(res.Conflicts) != 0 || len(res.Updates) != 0 {
		t.Errorf("rebuild: conflicts %v, updates %v", res.Conflicts, ids(res.Updates))
	}
	if got := q.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Errorf("rebuilt state differs:\n%+v\n%+v", got, want)
	}
	return q
}
