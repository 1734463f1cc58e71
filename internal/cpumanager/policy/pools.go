package policy

// placeShared puts every container of st without a slice in its shared
// pool and returns the pools of the new state (step 8). The pools depend
// only on the bubbles and slices, which are final now.
func (p *Policy) placeShared(st *state, snap snapshot, log *conflicts) *view {
	v := newView(p.usable, st)
	for _, id := range snap.ctrIDs {
		c := st.ctrs[id]
		if c.pool == PoolExclusive || c.released {
			continue
		}
		c.pool = PoolNodeShared
		// A regular container finding its pod shared pool empty goes to
		// the node shared pool, as in placeNew.
		pool, ok := v.pod[c.spec.PodID]
		if ok && !overflowed(st, snap.stamps, c) && (!pool.IsEmpty() || c.spec.Lifecycle != LifecycleRegular) {
			c.pool = PoolPodShared
		}
		st.addCtr(c)
	}
	for _, pid := range snap.podIDs {
		if pool, ok := v.pod[pid]; ok && pool.IsEmpty() && st.podSharedUsed(pid) {
			log.add("pod %s: %v (after rebuild)", pid, ErrNoSharedCPUs)
		}
	}
	if p.nodeCPUs(v).IsEmpty() {
		for _, id := range snap.ctrIDs {
			if st.ctrs[id].pool == PoolNodeShared {
				log.add("the node shared pool is empty but container %s needs it", id)
				break
			}
		}
	}
	return v
}

// podSharedNeeded reports whether the pod has a container without
// exclusive CPUs that needs the pod's shared pool whatever the others get:
// any but one that overflowed to the node shared pool.
func podSharedNeeded(st *state, stamps map[string]*Stamp, podID string) bool {
	for id := range st.byPod[podID] {
		c := st.ctrs[id]
		if c.spec.Resources.ExclusiveCPUs() == 0 && !overflowed(st, stamps, c) && !c.released {
			return true
		}
	}
	return false
}

// overflowed says whether shared container c, in a pod with a bubble, was
// placed in the node shared pool because its pod shared pool was empty
// (placeNew: an ephemeral container): it is regular and its stamp says
// node-shared next to the pod's bubble. It stays there, as it would have
// had the plugin not restarted, when the pod's pool has CPUs again. A pod
// whose containers are all node-shared gets a fresh bubble (its stamps do
// not vote, see stampedBubble); they stay node-shared only if that is
// the bubble they were stamped with.
func overflowed(st *state, stamps map[string]*Stamp, c ctrState) bool {
	s := stamps[c.spec.ID]
	bubble := st.pods[c.spec.PodID].bubble
	return c.spec.Lifecycle == LifecycleRegular && s != nil && s.Pool == PoolNodeShared &&
		!bubble.IsEmpty() && s.Bubble.Equals(bubble)
}
