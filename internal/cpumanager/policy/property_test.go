package policy

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

// checkInvariants checks the allocation rules on the whole state:
//   - exclusive slices are pairwise disjoint;
//   - no CPU is in two bubbles, and node-level slices stay out of bubbles;
//   - reserved and isolated CPUs are never in a bubble or a slice, and no
//     pinned (exclusive or pod-shared) container runs on them;
//   - node-shared containers run on the node pool plus, without
//     StrictReservation, the online non-isolated reserved CPUs;
//   - in a pod with a bubble, every container's cpuset is inside it;
//   - every shared container has a non-empty pool;
//   - pinned containers' mems are the NUMA nodes of their cpus and those
//     their bubble or node-level slice was widened to; node-shared
//     containers' mems are every memory node;
//   - bubbles and node-level slices reserve their memory within the
//     nodes' capacity (MemTotal minus reservedMemory) and on their own
//     memory nodes, and nothing else reserves any;
//   - the node pool is the usable CPUs minus bubbles and node-level slices.
func checkInvariants(t testing.TB, p *Policy) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	forbidden := p.reserved.Union(p.topo.Isolated)
	nodeShared := reservedShared(p)
	seenBubble := cpuset.New()
	for id, ps := range p.st.pods {
		if !ps.bubble.Intersection(seenBubble).IsEmpty() {
			t.Fatalf("cpus %s in two bubbles (pod %s)", ps.bubble.Intersection(seenBubble), id)
		}
		if !ps.bubble.Intersection(forbidden).IsEmpty() {
			t.Fatalf("pod %s bubble %s has reserved/isolated cpus", id, ps.bubble)
		}
		if p.scope == config.ScopeContainer && !ps.bubble.IsEmpty() {
			t.Fatalf("pod %s has a bubble in container scope", id)
		}
		seenBubble = seenBubble.Union(ps.bubble)
		var shared int64
		for n, b := range ps.memShare {
			shared += b
			if !p.podMems(ps).Contains(n) {
				t.Fatalf("pod %s reserves memory on node %d outside its memory nodes %s", id, n, p.podMems(ps))
			}
		}
		if want := podMemory(ps.spec.Budget); !ps.bubble.IsEmpty() && shared != want {
			t.Fatalf("pod %s reserves %d bytes, its memory is %d", id, shared, want)
		}
	}
	for n, used := range memUsed(p.st) {
		if c := p.mem.capacity[n]; used > c {
			t.Fatalf("node %d: bubbles reserve %d bytes of %d", n, used, c)
		}
	}
	seenSlice := cpuset.New()
	nodeSlices := cpuset.New()
	v := newView(p.usable, p.st)
	if !v.node.Equals(p.v.node) {
		t.Fatalf("cached node pool %s, derived %s", p.v.node, v.node)
	}
	if len(v.pod) != len(p.v.pod) {
		t.Fatalf("cached pod pools %v, derived %v", p.v.pod, v.pod)
	}
	for id, pool := range v.pod {
		if !pool.Equals(p.v.pod[id]) {
			t.Fatalf("pod %s cached shared pool %s, derived %s", id, p.v.pod[id], pool)
		}
	}
	indexed := 0
	for pid, ids := range p.st.byPod {
		if _, ok := p.st.pods[pid]; !ok {
			t.Fatalf("index has missing pod %s", pid)
		}
		for id := range ids {
			if c, ok := p.st.ctrs[id]; !ok || c.spec.PodID != pid {
				t.Fatalf("index has container %s under pod %s", id, pid)
			}
			indexed++
		}
	}
	if indexed != len(p.st.ctrs) || len(p.st.byPod) != len(p.st.pods) {
		t.Fatalf("pod index holds %d containers of %d, %d pods of %d", indexed, len(p.st.ctrs), len(p.st.byPod), len(p.st.pods))
	}
	for id := range p.st.memHolders {
		if len(p.st.ctrs[id].memShare) == 0 {
			t.Fatalf("memory index has %s, which reserves none", id)
		}
	}
	for id, c := range p.st.ctrs {
		if _, ok := p.st.memHolders[id]; ok != (len(c.memShare) > 0) {
			t.Fatalf("memory index and container %s (%v) disagree", id, c.memShare)
		}
	}
	for id := range p.st.nodeShared {
		if p.st.ctrs[id].pool != PoolNodeShared {
			t.Fatalf("node-shared index has %s (%s)", id, p.st.ctrs[id].pool)
		}
	}
	for id, c := range p.st.ctrs {
		if _, ok := p.st.nodeShared[id]; ok != (c.pool == PoolNodeShared) {
			t.Fatalf("node-shared index and container %s (%s) disagree", id, c.pool)
		}
	}
	for id, c := range p.st.ctrs {
		ps, ok := p.st.pods[c.spec.PodID]
		if !ok {
			t.Fatalf("container %s of missing pod %s", id, c.spec.PodID)
		}
		a := p.assign(p.st, v, c)
		if a.CPUs.IsEmpty() {
			t.Fatalf("container %s (%s) has no cpus", id, c.pool)
		}
		if c.pool == PoolNodeShared {
			if want := v.node.Union(nodeShared); !a.CPUs.Equals(want) {
				t.Fatalf("node-shared container %s cpus %s, want %s (strict reservation %v)", id, a.CPUs, want, p.sharedReserved.IsEmpty())
			}
			if want := p.topo.MemoryNodes(); !a.Mems.Equals(want) {
				t.Fatalf("node-shared container %s mems %s, want every memory node %s", id, a.Mems, want)
			}
		} else {
			if !a.CPUs.Intersection(forbidden).IsEmpty() {
				t.Fatalf("container %s runs on reserved/isolated cpus %s", id, a.CPUs.Intersection(forbidden))
			}
			if !a.Mems.Equals(p.topo.MemsOf(a.CPUs).Union(ps.extraMems).Union(c.extraMems)) {
				t.Fatalf("container %s mems %s for cpus %s", id, a.Mems, a.CPUs)
			}
		}
		checkCtrMemory(t, p, ps, c, a)
		// A regular container without CPUs of its own whose pod shared
		// pool was empty (an ephemeral one) runs beside its bubble.
		// So does an init container released while it may still run.
		overflow := c.pool == PoolNodeShared && !ps.bubble.IsEmpty()
		if overflow && !c.released && (c.spec.Lifecycle != LifecycleRegular || p.exclusiveCPUs(ps, c.spec) > 0) {
			t.Fatalf("container %s (%s, %d exclusive cpus) in the node shared pool beside pod %s bubble %s",
				id, c.spec.Lifecycle, p.exclusiveCPUs(ps, c.spec), c.spec.PodID, ps.bubble)
		}
		if !overflow && !ps.bubble.IsEmpty() && !a.CPUs.IsSubsetOf(ps.bubble) {
			t.Fatalf("container %s cpus %s outside pod %s bubble %s", id, a.CPUs, c.spec.PodID, ps.bubble)
		}
		if c.pool == PoolPodShared && ps.bubble.IsEmpty() {
			t.Fatalf("container %s pod-shared without a bubble", id)
		}
		if c.released && (c.pool != PoolNodeShared || c.spec.Lifecycle != LifecycleInit) {
			t.Fatalf("released container %s (%s) is %s", id, c.spec.Lifecycle, c.pool)
		}
		if c.pool != PoolExclusive {
			continue
		}
		if c.slice.Size() != c.spec.Resources.ExclusiveCPUs() {
			t.Fatalf("container %s slice %s for %d cpus", id, c.slice, c.spec.Resources.ExclusiveCPUs())
		}
		if !c.slice.Intersection(seenSlice).IsEmpty() {
			t.Fatalf("cpus %s in two slices (container %s)", c.slice.Intersection(seenSlice), id)
		}
		seenSlice = seenSlice.Union(c.slice)
		if ps.bubble.IsEmpty() {
			nodeSlices = nodeSlices.Union(c.slice)
		}
	}
	if !nodeSlices.Intersection(seenBubble).IsEmpty() {
		t.Fatalf("node-level slices %s overlap bubbles", nodeSlices.Intersection(seenBubble))
	}
	if want := p.usable.Difference(seenBubble).Difference(nodeSlices); !want.Equals(v.node) {
		t.Fatalf("node pool %s, want %s", v.node, want)
	}
}

// checkCtrMemory: only an exclusive container with a node-level slice
// (container scope) reserves memory, all of its memory limit when memory
// is known, on its own memory nodes; only such a container is widened.
func checkCtrMemory(t testing.TB, p *Policy, ps podState, c ctrState, a Assignment) {
	t.Helper()
	nodeLevel := c.pool == PoolExclusive && ps.bubble.IsEmpty()
	if !nodeLevel {
		if len(c.memShare) > 0 || !c.extraMems.IsEmpty() {
			t.Fatalf("container %s (%s, pod bubble %s) reserves memory %v / widened to %s", c.spec.ID, c.pool, ps.bubble, c.memShare, c.extraMems)
		}
		return
	}
	var sum int64
	for n, b := range c.memShare {
		sum += b
		if !a.Mems.Contains(n) {
			t.Fatalf("container %s reserves memory on node %d outside its mems %s", c.spec.ID, n, a.Mems)
		}
	}
	if want := podMemory(c.spec.Resources.Budget); p.mem.known && sum != want {
		t.Fatalf("container %s reserves %d bytes, its memory is %d", c.spec.ID, sum, want)
	}
}

// reservedShared is what the reserved CPUs add to the node shared pool,
// derived from the options rather than from the policy's cache: the online
// non-isolated reserved CPUs, or none with StrictReservation.
func reservedShared(p *Policy) cpuset.CPUSet {
	if p.strict {
		return cpuset.New()
	}
	return p.reserved.Intersection(p.topo.AllCPUs()).Difference(p.topo.Isolated)
}

// randomTopo builds a random literal topology of up to 2x4x6x2 = 96 CPUs,
// with a random reserved set and sometimes isolated CPUs.
func randomTopo(rng *rand.Rand) (*topology.Topology, cpuset.CPUSet) {
	topo := literalTopo(1+rng.IntN(2), 1+rng.IntN(4), 1+rng.IntN(6), 1+rng.IntN(2))
	all := topo.AllCPUs().List()
	var reserved []int
	for range rng.IntN(3) {
		reserved = append(reserved, all[rng.IntN(len(all))])
	}
	if rng.IntN(5) == 0 {
		topo.Isolated = cpuset.New(all[len(all)-1])
	}
	if rng.IntN(3) == 0 { // a memory-only node
		id := len(topo.NUMANodes)
		topo.NUMANodes[id] = topology.NUMANode{ID: id, CPUs: cpuset.New(), MemoryBytes: 8 << 30}
	}
	return topo, cpuset.New(reserved...)
}

func randomContainer(rng *rand.Rand) budget.Container {
	switch rng.IntN(6) {
	case 0, 1:
		// Up to 20 GiB: in container scope some widen past a 16 GiB node
		// or find no room.
		milli := int64(1+rng.IntN(3)) * 1000
		return budget.NewContainer(budget.Budget{CPURequest: milli, CPULimit: milli, MemoryLimit: int64(1+rng.IntN(20)) * gib})
	case 2:
		return guaranteed(int64(100 + rng.IntN(1900)))
	case 3:
		return burstable(int64(rng.IntN(1500)))
	default:
		return bestEffort()
	}
}

func randomBudget(rng *rand.Rand) budget.Budget {
	switch rng.IntN(5) {
	case 0:
		return budget.Budget{}
	case 1:
		return budget.Budget{CPURequest: int64(500 + rng.IntN(4000))}
	default:
		b := podBudget(int64(1+rng.IntN(6)) * 1000)
		b.MemoryLimit = int64(1+rng.IntN(24)) * gib // nodes hold 16 GiB: some need two
		return b
	}
}

// checkRuntime checks that applying every returned assignment and update
// kept the fake runtime in line with the policy.
func checkRuntime(t testing.TB, p *Policy, r *fakeRuntime) {
	t.Helper()
	all := p.Assignments()
	for _, a := range all {
		if !r.cpus[a.ContainerID].Equals(a.CPUs) || !r.mems[a.ContainerID].Equals(a.Mems) {
			t.Fatalf("container %s runs on %s/%s but is assigned %s/%s: an update was missed",
				a.ContainerID, r.cpus[a.ContainerID], r.mems[a.ContainerID], a.CPUs, a.Mems)
		}
	}
	if len(all) != len(r.ctrs) {
		t.Fatalf("policy has %d containers, runtime %d", len(all), len(r.ctrs))
	}
}

// checkExclusive checks exclusivity where it counts, in the cpusets the
// fake runtime's containers run on: no CPU of an exclusive container is in
// the cpuset of any other container still running (every container of r
// but those in exited), of its pod or of another.
func checkExclusive(t testing.TB, p *Policy, r *fakeRuntime, exited map[string]bool) {
	t.Helper()
	owner := map[int]string{}
	for _, a := range p.Assignments() {
		if _, running := r.ctrs[a.ContainerID]; !running || a.Pool != PoolExclusive || exited[a.ContainerID] {
			continue
		}
		for _, cpu := range a.CPUs.UnsortedList() {
			owner[cpu] = a.ContainerID
		}
	}
	for _, other := range slices.Sorted(mapKeys(r.ctrs)) {
		if exited[other] {
			continue
		}
		for _, cpu := range r.cpus[other].List() {
			if id, ok := owner[cpu]; ok && id != other {
				t.Fatalf("cpu %d of exclusive container %s (pod %s) is in the cpuset %s of container %s (pod %s, %q), which still runs",
					cpu, id, r.ctrs[id].PodID, r.cpus[other], other, r.ctrs[other].PodID, r.ctrs[other].Lifecycle)
			}
		}
	}
}

func TestPropertyRandomOps(t *testing.T) {
	const (
		topologies = 25
		opsPerTopo = 600 // 15,000 operations in all
	)
	total := 0
	// seen counts the new rules' outcomes, so the run is known to reach them.
	seen := map[string]int{}
	for seed := range uint64(topologies) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			topo, reserved := randomTopo(rng)
			scope := config.ScopePod
			if seed%4 == 3 {
				scope = config.ScopeContainer
			}
			strict := seed%3 == 1 // both reservation modes, in both scopes
			var reservedMem map[int]int64
			if seed%2 == 1 { // reservedMemory on some nodes
				reservedMem = map[int]int64{}
				for _, id := range topo.NUMANodeIDs() {
					if rng.IntN(2) == 0 {
						reservedMem[id] = int64(1+rng.IntN(4)) * gib
					}
				}
			}
			p := mustNew(t, topo, Options{Scope: scope, Reserved: reserved, StrictReservation: strict, ReservedMemory: reservedMem})
			initial := p.Snapshot()
			r := newFakeRuntime()
			next := 0
			for op := range opsPerTopo {
				total++
				before := p.Snapshot()
				var err error
				podIDs := slices.Sorted(mapKeys(r.pods))
				ctrIDs := slices.Sorted(mapKeys(r.ctrs))
				switch k := rng.IntN(100); {
				case k < 15 || len(podIDs) == 0:
					next++
					ps := PodSpec{ID: fmt.Sprintf("pod%d", next), Budget: randomBudget(rng)}
					var u []Assignment
					if u, err = p.AddPod(ps); err == nil {
						r.pods[ps.ID] = ps
						r.apply(u...)
					}
				case k < 65:
					next++
					c := ContainerSpec{
						ID: fmt.Sprintf("ctr%d", next), PodID: podIDs[rng.IntN(len(podIDs))],
						Name: fmt.Sprintf("c%d", next), Resources: randomContainer(rng),
					}
					if rng.IntN(12) == 0 { // the kubelet says the pod is Burstable
						c.PodQoS = budget.QoSBurstable
					}
					switch rng.IntN(10) {
					case 0:
						// Plain init containers run before the app containers.
						if !slices.ContainsFunc(ctrIDs, func(id string) bool {
							return r.ctrs[id].PodID == c.PodID && r.ctrs[id].Lifecycle == LifecycleRegular
						}) {
							c.Lifecycle = LifecycleInit
						}
					case 1:
						c.Lifecycle = LifecycleSidecar
					}
					// Before a regular container, the pod's plain init
					// containers have exited and their StopContainer came
					// first (the usual order), or it comes after the new
					// container's (a race), or, annotated init by a pod
					// author who lied, they never exit.
					late := map[string]bool{}
					if c.Lifecycle == LifecycleRegular {
						for _, id := range ctrIDs {
							if rc := r.ctrs[id]; rc.PodID != c.PodID || rc.Lifecycle != LifecycleInit || r.live[id] {
								continue
							}
							switch rng.IntN(3) {
							case 0:
								r.apply(p.RemoveContainer(id)...)
								r.remove(id)
							case 1:
								late[id] = true
							default:
								r.live[id] = true
								seen["init container still running"]++
							}
						}
					}
					var (
						a Assignment
						u []Assignment
					)
					before = p.Snapshot()
					if a, u, err = p.AddContainer(c); err == nil {
						r.ctrs[c.ID], r.stamp[c.ID] = c, a.Stamp()
						r.apply(a)
						r.apply(u...)
					} else if after := p.Snapshot(); !reflect.DeepEqual(before, after) {
						t.Fatalf("op %d failed (%v) but changed the state", op, err)
					}
					for _, id := range slices.Sorted(mapKeys(late)) {
						if err == nil {
							checkExclusive(t, p, r, late) // they exited: their cpusets do not count
						}
						r.apply(p.RemoveContainer(id)...)
						r.remove(id)
						before = p.Snapshot()
					}
				case k < 90 && len(ctrIDs) > 0:
					id := ctrIDs[rng.IntN(len(ctrIDs))]
					u := p.RemoveContainer(id)
					r.remove(id)
					r.apply(u...)
				case k < 98:
					id := podIDs[rng.IntN(len(podIDs))]
					u := p.RemovePod(id)
					delete(r.pods, id)
					for cid, c := range r.ctrs {
						if c.PodID == id {
							r.remove(cid)
						}
					}
					r.apply(u...)
				default:
					// A plugin restart: rebuild from the runtime's view.
					checkRebuild(t, p, r)
				}
				switch {
				case errors.Is(err, ErrInsufficientMemory) && scope == config.ScopeContainer:
					seen["container memory refused"]++
				case errors.Is(err, ErrInsufficientMemory):
					seen["memory refused"]++
				case errors.Is(err, ErrQoS):
					seen["qos refused"]++
				}
				for _, c := range p.st.ctrs {
					if !c.extraMems.IsEmpty() {
						seen["container widened"]++
					}
				}
				for _, ps := range p.st.pods {
					if !ps.extraMems.IsEmpty() {
						seen["widened"]++
					}
					if strings.HasPrefix(ps.degraded, "no bubble: oom_score_adj") {
						seen["qos demoted"]++
					}
				}
				if err != nil {
					if after := p.Snapshot(); !reflect.DeepEqual(before, after) {
						t.Fatalf("op %d failed (%v) but changed the state", op, err)
					}
				}
				checkInvariants(t, p)
				checkExclusive(t, p, r, nil)
				checkRuntime(t, p, r)
			}
			for _, id := range slices.Sorted(mapKeys(r.pods)) {
				p.RemovePod(id)
			}
			if final := p.Snapshot(); !reflect.DeepEqual(initial, final) || len(p.st.ctrs) != 0 {
				t.Fatalf("after removing everything:\n%+v\nwant\n%+v", final, initial)
			}
			for n, b := range memUsed(p.st) {
				if b != 0 {
					t.Fatalf("after removing everything node %d still has %d bytes reserved", n, b)
				}
			}
			if len(p.st.memHolders) != 0 {
				t.Fatalf("after removing everything the memory index holds %v", p.st.memHolders)
			}
		})
	}
	t.Logf("%d random operations; %v", total, seen)
	for _, k := range []string{
		"memory refused", "qos refused", "widened", "qos demoted", "container memory refused", "container widened",
		"init container still running",
	} {
		if seen[k] == 0 {
			t.Errorf("no %s in the run", k)
		}
	}
	if total < 10000 {
		t.Fatalf("only %d operations", total)
	}
}

// checkRebuild rebuilds p from r's snapshot. When every bubble can be
// recovered from a stamp, the result must be the same state with nothing
// to repair; in any case the updates bring the runtime in line.
func checkRebuild(t testing.TB, p *Policy, r *fakeRuntime) {
	t.Helper()
	want := p.Snapshot()
	recoverable := true
	for _, ps := range want.Pods {
		// A bubble is known from its pinned containers' stamps only.
		if ps.Bubble != "" && !slices.ContainsFunc(ps.Containers, func(c ContainerStatus) bool { return c.Pool != PoolNodeShared }) {
			recoverable = false
		}
		if ps.Degraded != "" {
			recoverable = false
		}
		// A released init container whose app containers all stopped is
		// an init container again, to a rebuild.
		if slices.ContainsFunc(ps.Containers, func(c ContainerStatus) bool { return c.Released }) &&
			!slices.ContainsFunc(ps.Containers, func(c ContainerStatus) bool { return c.Lifecycle == string(LifecycleRegular) }) {
			recoverable = false
		}
	}
	// A container that should be exclusive but is not (a rebuild found no
	// room for its slice) gets another chance.
	p.mu.Lock()
	for _, c := range p.st.ctrs {
		ps := p.st.pods[c.spec.PodID]
		if !c.released && c.pool != PoolExclusive && p.exclusiveCPUs(ps, c.spec) > 0 &&
			(!ps.bubble.IsEmpty() || p.scope == config.ScopeContainer) {
			recoverable = false
		}
	}
	p.mu.Unlock()
	shares := memShares(p)
	pods, ctrs := r.snapshot()
	res := p.Rebuild(pods, ctrs)
	if recoverable {
		if len(res.Conflicts) != 0 || len(res.Updates) != 0 {
			t.Fatalf("rebuild of a clean state: conflicts %v, updates %v\n%+v", res.Conflicts, ids(res.Updates), want)
		}
		if got := p.Snapshot(); !reflect.DeepEqual(got, want) {
			t.Fatalf("rebuild changed the state:\n%+v\n%+v", got, want)
		}
		// The per-node split is recomputed, not remembered: a holder on
		// one memory node reserves exactly what it did there, one on
		// several the same amount (on its nodes: checkInvariants).
		after := memShares(p)
		for id, before := range shares {
			if before.nodes == 1 && !maps.Equal(before.share, after[id].share) {
				t.Fatalf("rebuild moved %s's memory %v to %v", id, before.share, after[id].share)
			}
			if before.sum() != after[id].sum() {
				t.Fatalf("rebuild reserved %d bytes for %s, was %d", after[id].sum(), id, before.sum())
			}
		}
	}
	r.apply(res.Updates...)
}

// held is what one bubble or node-level slice reserves, and on how many
// memory nodes it lives.
type held struct {
	share map[int]int64
	nodes int
}

func (h held) sum() int64 {
	var s int64
	for _, b := range h.share {
		s += b
	}
	return s
}

// memShares returns what every bubble ("pod/<id>") and node-level slice
// ("ctr/<id>") reserves.
func memShares(p *Policy) map[string]held {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]held{}
	for id, ps := range p.st.pods {
		if len(ps.memShare) > 0 {
			out["pod/"+id] = held{maps.Clone(ps.memShare), p.podMems(ps).Size()}
		}
	}
	for id := range p.st.memHolders {
		c := p.st.ctrs[id]
		out["ctr/"+id] = held{maps.Clone(c.memShare), p.topo.MemsOf(c.slice).Union(c.extraMems).Size()}
	}
	return out
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	p := mustNew(t, literalTopo(2, 2, 8, 2), Options{Reserved: set("0")})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				pod := fmt.Sprintf("w%d-p%d", w, i%3)
				_, _ = p.AddPod(PodSpec{ID: pod, Budget: podBudget(int64(1+i%3) * 1000)})
				id := fmt.Sprintf("w%d-c%d", w, i)
				_, _, _ = p.AddContainer(ctr(id, pod, []budget.Container{guaranteed(1000), bestEffort()}[i%2]))
				if i%3 == 0 {
					p.RemoveContainer(id)
				}
				if i%7 == 0 {
					p.RemovePod(pod)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 200 {
			_ = p.Snapshot()
			_ = p.Assignments()
			_, _ = p.Assignment("w0-c1")
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 5 {
			var pods []PodSpec
			var ctrs []ContainerState
			for _, a := range p.Assignments() {
				ctrs = append(ctrs, ContainerState{Spec: ContainerSpec{ID: a.ContainerID, PodID: a.PodID}, CPUs: a.CPUs})
			}
			p.Rebuild(pods, ctrs)
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	checkInvariants(t, p)
}

// benchPolicy is a 256-CPU, 8-NUMA node with 20 other budget pods, 100
// node-shared containers, and pod "target" whose 16-cpu bubble holds 50
// shared-pool containers.
func benchPolicy(b *testing.B) *Policy {
	p := mustNew(b, literalTopo(2, 4, 16, 2), Options{Reserved: set("0,128")})
	mustAddPod(b, p, "nb", budget.Budget{})
	for i := range 100 {
		mustAdd(b, p, ctr(fmt.Sprintf("nb-%d", i), "nb", bestEffort()))
	}
	for i := range 20 {
		id := fmt.Sprintf("other-%d", i)
		mustAddPod(b, p, id, memBudget(4000, 4*gib))
		mustAdd(b, p, ctr(id+"-g", id, guaranteed(2000)))
		mustAdd(b, p, ctr(id+"-s", id, bestEffort()))
	}
	mustAddPod(b, p, "target", podBudget(16000))
	for i := range 50 {
		mustAdd(b, p, ctr(fmt.Sprintf("shared-%d", i), "target", burstable(100)))
	}
	return p
}

// BenchmarkDynamicAdd adds a 2-cpu exclusive container to a running pod
// with 50 shared-pool containers (50 updates), then removes it again (50
// more). ns/op covers the pair; add-p99-ns and remove-p99-ns are the 99th
// percentiles of each call on its own.
func BenchmarkDynamicAdd(b *testing.B) {
	p := benchPolicy(b)
	c := ctr("dyn", "target", guaranteed(2000))
	adds := make([]time.Duration, 0, b.N)
	removes := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		_, u, err := p.AddContainer(c)
		mid := time.Now()
		if err != nil || len(u) != 50 {
			b.Fatalf("add: %v, %d updates", err, len(u))
		}
		u = p.RemoveContainer(c.ID)
		end := time.Now()
		if len(u) != 50 {
			b.Fatalf("remove: %d updates", len(u))
		}
		adds, removes = append(adds, mid.Sub(start)), append(removes, end.Sub(mid))
	}
	b.StopTimer()
	b.ReportMetric(p99(adds), "add-p99-ns")
	b.ReportMetric(p99(removes), "remove-p99-ns")
}

func p99(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)*99/100].Nanoseconds())
}

// BenchmarkAddPodBubble allocates and frees an 8-cpu bubble on the 256-CPU,
// 8-NUMA node above (100 node-shared containers to update each way):
// "fits" holds its 8 GiB on the nodes of its CPUs; "widened" needs 24 GiB,
// more than a 16 GiB node, so the memory group search runs. The target is
// the issue's: at most 50µs for the allocation.
func BenchmarkAddPodBubble(b *testing.B) {
	for _, tc := range []struct {
		name  string
		b     budget.Budget
		nodes int
	}{{"fits", memBudget(8000, 8*gib), 1}, {"widened", memBudget(8000, 24*gib), 2}} {
		b.Run(tc.name, func(b *testing.B) {
			p := benchPolicy(b)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := p.AddPod(PodSpec{ID: "bench", Budget: tc.b}); err != nil {
					b.Fatal(err)
				}
				if n := p.podMems(p.st.pods["bench"]).Size(); n != tc.nodes {
					b.Fatalf("bubble on %d memory nodes, want %d", n, tc.nodes)
				}
				p.RemovePod("bench")
			}
		})
	}
}

// BenchmarkRebuild rebuilds the node above from its own stamps.
func BenchmarkRebuild(b *testing.B) {
	p := benchPolicy(b)
	pods := []PodSpec{}
	for _, ps := range p.st.pods {
		pods = append(pods, ps.spec)
	}
	var ctrs []ContainerState
	for _, a := range p.Assignments() {
		ctrs = append(ctrs, ContainerState{Spec: p.st.ctrs[a.ContainerID].spec, Stamp: a.Stamp(), CPUs: a.CPUs, Mems: a.Mems})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if res := p.Rebuild(pods, ctrs); len(res.Updates) != 0 || len(res.Conflicts) != 0 {
			b.Fatalf("%+v", res)
		}
	}
}
