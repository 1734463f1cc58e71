package policy

import (
	"fmt"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// allocateBubbles gives the pods in freshPods a new bubble and claims it,
// or degrades them to the node shared pool. It returns freshCtrs and the
// exclusive-eligible containers of the pods that got a bubble: the
// containers that need a fresh slice, sorted (step 6).
func (p *Policy) allocateBubbles(st *state, cl *claims, freshPods, freshCtrs []string, log *conflicts) []string {
	for _, id := range freshPods {
		ps := st.pods[id]
		b, extra, share, err := p.placeBubble(st, p.usable.Difference(cl.node), ps.spec.Budget.BubbleCPUs(), podMemory(ps.spec.Budget), "pod "+id+" bubble")
		if err != nil {
			ps.degraded = err.Error()
			st.pods[id] = ps
			log.add("pod %s gets no bubble, its containers run in the node shared pool: %v", id, err)
			continue
		}
		ps.bubble, ps.extraMems, ps.memShare = b, extra, share
		st.pods[id] = ps
		cl.node = cl.node.Union(b)
		for _, cid := range st.podContainers(id) {
			if c := st.ctrs[cid]; p.exclusiveCPUs(ps, c.spec) > 0 && !c.released && !slices.Contains(freshCtrs, cid) {
				freshCtrs = append(freshCtrs, cid)
			}
		}
	}
	slices.Sort(freshCtrs)
	return freshCtrs
}

// carveSlices gives the containers in fresh a new slice and claims it; one
// that does not fit stays shared (step 7).
func (p *Policy) carveSlices(st *state, snap snapshot, cl *claims, fresh []string, log *conflicts) {
	for _, id := range fresh {
		c := st.ctrs[id]
		n := p.exclusiveCPUs(st.pods[c.spec.PodID], c.spec)
		inBubble := !st.pods[c.spec.PodID].bubble.IsEmpty()
		if !inBubble && p.scope != config.ScopeContainer {
			continue // degraded pod
		}
		domain, taken := p.sliceRoom(st, cl, c)
		free := domain.Difference(taken)
		var (
			slice cpuset.CPUSet
			err   error
		)
		switch {
		case inBubble && free.Size() == n && podSharedNeeded(st, snap.stamps, c.spec.PodID):
			err = ErrNoSharedCPUs
		case inBubble:
			slice, err = p.takeFrom(free, n, fmt.Sprintf("container %s slice in pod %s bubble", id, c.spec.PodID))
		default:
			mem := podMemory(c.spec.Resources.Budget)
			var used map[int]int64
			if mem > 0 && p.mem.known {
				used = memUsed(st)
			}
			slice, c.extraMems, c.memShare, err = p.place(used, free, n, mem, "container "+id+" exclusive cpus")
		}
		if err != nil {
			log.add("container %s gets no exclusive cpus and runs in its shared pool: %v", id, err)
			continue
		}
		keepSlice(st, cl, c, slice)
	}
}
