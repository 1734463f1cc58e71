package policy

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
)

// stamped is a container of a snapshot with a stamp and the cpuset it runs
// on.
func stamped(spec ContainerSpec, stamp, cpus string) ContainerState {
	return ContainerState{Spec: spec, Stamp: stamp, CPUs: set(cpus), Mems: set("0-1")}
}

// admitSnapshot runs Rebuild's first step on a snapshot.
func admitSnapshot(pods []PodSpec, ctrs []ContainerState) (*state, snapshot, conflicts) {
	var log conflicts
	st := admitPods(pods, &log)
	snap := admitContainers(st, ctrs, &log)
	return st, snap, log
}

// TestKeepStampedBubbles: step 2 keeps a stamped bubble only when it has
// the budget's size, lies in the usable cpus and overlaps no bubble kept
// before it; it claims what it keeps and returns the other budget pods.
func TestKeepStampedBubbles(t *testing.T) {
	pod := func(id string) PodSpec { return PodSpec{ID: id, Name: "ns/" + id, Budget: podBudget(4000)} }
	shared := func(id, pod, bubble, cpus string) ContainerState {
		return stamped(ctr(id, pod, burstable(500)), "v=1;pool=pod-shared;bubble="+bubble+";cpus="+cpus+";mems=0", cpus)
	}
	for _, tc := range []struct {
		name     string
		reserved string
		pods     []PodSpec
		ctrs     []ContainerState
		// kept is the bubble each pod keeps ("" for none); fresh the pods
		// that need a fresh one; note a part of the only conflict, "" for
		// none.
		kept  map[string]string
		fresh []string
		note  string
	}{
		{
			name: "a valid stamped bubble is kept and claimed",
			pods: []PodSpec{pod("a")},
			ctrs: []ContainerState{shared("a1", "a", "4-7", "4-7")},
			kept: map[string]string{"a": "4-7"},
		},
		{
			name:  "a pod without a stamp needs a fresh bubble",
			pods:  []PodSpec{pod("a")},
			ctrs:  []ContainerState{stamped(ctr("a1", "a", burstable(500)), "", "0-15")},
			kept:  map[string]string{"a": ""},
			fresh: []string{"a"},
		},
		{
			name:  "a bubble of the wrong size is reallocated",
			pods:  []PodSpec{pod("a")},
			ctrs:  []ContainerState{shared("a1", "a", "4-6", "4-6")},
			kept:  map[string]string{"a": ""},
			fresh: []string{"a"},
			note:  "has 3 cpus, its budget needs 4",
		},
		{
			name:     "a bubble on reserved cpus is reallocated",
			reserved: "0",
			pods:     []PodSpec{pod("a")},
			ctrs:     []ContainerState{shared("a1", "a", "0-3", "0-3")},
			kept:     map[string]string{"a": ""},
			fresh:    []string{"a"},
			note:     "includes unusable cpus 0",
		},
		{
			name:  "of two pods stamped with the same cpus, the first by id keeps them",
			pods:  []PodSpec{pod("b"), pod("a")},
			ctrs:  []ContainerState{shared("b1", "b", "4-7", "4-7"), shared("a1", "a", "4-7", "4-7")},
			kept:  map[string]string{"a": "4-7", "b": ""},
			fresh: []string{"b"},
			note:  "cpus 4-7 claimed twice: pod b",
		},
		{
			name: "a pod whose containers say it is not guaranteed gets no bubble",
			pods: []PodSpec{pod("a")},
			ctrs: []ContainerState{func() ContainerState {
				c := shared("a1", "a", "4-7", "4-7")
				c.Spec.PodQoS = budget.QoSBurstable
				return c
			}()},
			kept: map[string]string{"a": ""},
		},
		{
			name: "a pod without a whole-cpu budget is not looked at",
			pods: []PodSpec{{ID: "a", Budget: podBudget(1500)}},
			ctrs: []ContainerState{shared("a1", "a", "4-7", "4-7")},
			kept: map[string]string{"a": ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{Reserved: set(tc.reserved)})
			st, snap, log := admitSnapshot(tc.pods, tc.ctrs)
			cl := newClaims()
			fresh := p.keepStampedBubbles(st, snap, cl, &log)
			if !slices.Equal(fresh, tc.fresh) {
				t.Errorf("fresh %v, want %v", fresh, tc.fresh)
			}
			claimed := cpuset.New()
			for id, want := range tc.kept {
				if got := st.pods[id].bubble; !got.Equals(set(want)) {
					t.Errorf("pod %s bubble %q, want %q", id, got.String(), want)
				}
				claimed = claimed.Union(set(want))
			}
			if !cl.node.Equals(claimed) {
				t.Errorf("claimed %q, want %q", cl.node.String(), claimed.String())
			}
			checkNote(t, log, tc.note)
		})
	}
}

// checkNote checks that log holds one conflict containing note, or none
// when note is "".
func checkNote(t *testing.T, log conflicts, note string) {
	t.Helper()
	switch {
	case note == "" && len(log) > 0:
		t.Errorf("conflicts %q, want none", log)
	case note != "" && (len(log) != 1 || !strings.Contains(log[0], note)):
		t.Errorf("conflicts %q, want one containing %q", log, note)
	}
}

// TestKeepAndAdoptSlices: in container scope, step 3 keeps a stamped
// exclusive slice that has the container's size, lies in the usable cpus
// and overlaps no slice kept before it; step 4 adopts the current cpuset
// of an unstamped container by the same rules, after every stamped slice,
// and only when the node shared pool keeps a cpu. What neither keeps needs
// a fresh slice.
func TestKeepAndAdoptSlices(t *testing.T) {
	excl := func(id, cpus string) ContainerState {
		return stamped(ctr(id, "p", guaranteed(2000)), "v=1;pool=exclusive;bubble=;cpus="+cpus+";mems=0", cpus)
	}
	unstamped := func(id, cpus string) ContainerState {
		return ContainerState{Spec: ctr(id, "p", guaranteed(2000)), CPUs: set(cpus), Mems: set("0"), CPUQuota: -1}
	}
	for _, tc := range []struct {
		name     string
		reserved string
		ctrs     []ContainerState
		// slices is the slice each container keeps ("" for none); fresh
		// the containers that need a fresh one; note a part of the only
		// conflict, "" for none.
		slices map[string]string
		fresh  []string
		note   string
	}{
		{
			name:   "a valid stamped slice is kept",
			ctrs:   []ContainerState{excl("c1", "2-3")},
			slices: map[string]string{"c1": "2-3"},
		},
		{
			name:   "a stamped slice of the wrong size is recarved",
			ctrs:   []ContainerState{excl("c1", "2-4")},
			slices: map[string]string{"c1": ""},
			fresh:  []string{"c1"},
			note:   "has 3 cpus, it needs 2",
		},
		{
			name:     "a stamped slice on reserved cpus is recarved",
			reserved: "0",
			ctrs:     []ContainerState{excl("c1", "0-1")},
			slices:   map[string]string{"c1": ""},
			fresh:    []string{"c1"},
			note:     "lies outside",
		},
		{
			name:   "of two overlapping stamped slices the first by id is kept",
			ctrs:   []ContainerState{excl("c2", "3-4"), excl("c1", "2-3")},
			slices: map[string]string{"c1": "2-3", "c2": ""},
			fresh:  []string{"c2"},
			note:   "cpus 3 claimed twice: container c2",
		},
		{
			name:   "an unstamped container's cpuset is adopted",
			ctrs:   []ContainerState{unstamped("c1", "2-3")},
			slices: map[string]string{"c1": "2-3"},
		},
		{
			name:   "a stamp wins over an adoption that comes first by id",
			ctrs:   []ContainerState{unstamped("c1", "2-3"), excl("c2", "3-4")},
			slices: map[string]string{"c1": "", "c2": "3-4"},
			fresh:  []string{"c1"},
		},
		{
			name:   "an unstamped cpuset of the wrong size is not adopted",
			ctrs:   []ContainerState{unstamped("c1", "2-4")},
			slices: map[string]string{"c1": ""},
			fresh:  []string{"c1"},
		},
		{
			name:     "an unstamped cpuset that would empty the node shared pool is not adopted",
			reserved: "0-13",
			ctrs:     []ContainerState{unstamped("c1", "14-15")},
			slices:   map[string]string{"c1": ""},
			fresh:    []string{"c1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{Scope: config.ScopeContainer, Reserved: set(tc.reserved), StrictReservation: true})
			st, snap, log := admitSnapshot([]PodSpec{{ID: "p", Name: "ns/p"}}, tc.ctrs)
			cl := newClaims()
			unstamped, fresh := p.keepStampedSlices(st, snap, cl, &log)
			fresh = append(fresh, p.adoptUnstampedSlices(st, snap, cl, unstamped)...)
			slices.Sort(fresh)
			if !slices.Equal(fresh, tc.fresh) {
				t.Errorf("fresh %v, want %v", fresh, tc.fresh)
			}
			claimed := cpuset.New()
			for id, want := range tc.slices {
				c := st.ctrs[id]
				if got := c.slice; got.String() != set(want).String() || (c.pool == PoolExclusive) != (want != "") {
					t.Errorf("container %s pool %s slice %q, want %q", id, c.pool, got.String(), want)
				}
				claimed = claimed.Union(set(want))
			}
			if !cl.node.Equals(claimed) {
				t.Errorf("claimed %q, want %q", cl.node.String(), claimed.String())
			}
			checkNote(t, log, tc.note)
		})
	}
}
