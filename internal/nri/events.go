package nri

// Pod Events: the three things the kubelet never reports about a pod that
// asked for something (advert.EventPoster posts them). Only a pod that
// asked gets one: a container that asked for a writable or read-only
// cgroup, a writable container, a container pinned in a pod's bubble or an
// exclusive slice. A pod that asked for nothing never gets an Event.

import (
	"fmt"
	"sync"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// WithEvents posts Events on pods through post (advert.EventPoster.Post),
// which must never block: it is called from the NRI handlers.
func WithEvents(post func(advert.PodEvent)) Option {
	return func(o *options) { o.post = post }
}

// postMissed posts a CgroupDelegationMissed Event for a container
// Synchronize's audit found running without cgdelegate's change, when it
// asked for one (a runtime-writable container that asked for nothing is
// only logged).
func (p *Plugin) postMissed(pod *api.PodSandbox, ctr *api.Container, err error) {
	if p.opts.post == nil || pod == nil || ctr == nil {
		return
	}
	req, rerr := writable.ResolveRequest(pod, ctr)
	if rerr != nil || req.Mode == writable.ModeUnset {
		return
	}
	p.opts.post(advert.PodEvent{
		Namespace: pod.GetNamespace(), Name: pod.GetName(), UID: pod.GetUid(), Container: ctr.GetName(),
		Reason: advert.ReasonDelegationMissed, Action: advert.ActionAudit,
		Message: err.Error() + " (it was created while cgdelegate was not connected to the runtime, " +
			"e.g. after an NRI request timeout)",
	})
}

// hostUnsafeEvent is the HostUnsafe Event of a writable container c of pod
// p on a host whose verdict is hostErr.
func hostUnsafeEvent(p *ledgerPod, c *ledgerCtr, hostErr error) advert.PodEvent {
	return advert.PodEvent{
		Namespace: p.namespace, Name: p.name, UID: p.uid, Container: c.name,
		Reason: advert.ReasonHostUnsafe, Action: advert.ActionCheck,
		Message: fmt.Sprintf("runs with a writable /sys/fs/cgroup on a host no longer safe for writable cgroups (%v); "+
			"without nsdelegate a container without a user namespace can raise its own limits; delete the pod, "+
			"or have the node's cgroup2 remounted with nsdelegate", hostErr),
	}
}

// pinnedPods names the pods and containers pinned in a bubble or an
// exclusive slice, by sandbox and container ID, for the Event of an update
// given up (the update Sender knows only IDs). Kept only with Events on.
type pinnedPods struct {
	mu   sync.Mutex
	pods map[string]podRef   // by sandbox ID
	ctrs map[string]string   // container ID -> name
	of   map[string][]string // sandbox ID -> its container IDs
}

type podRef struct{ namespace, name, uid string }

func newPinnedPods() *pinnedPods {
	return &pinnedPods{pods: map[string]podRef{}, ctrs: map[string]string{}, of: map[string][]string{}}
}

// add records ctr of pod when a puts it in a bubble or an exclusive slice.
func (pp *pinnedPods) add(pod *api.PodSandbox, ctr *api.Container, a policy.Assignment) {
	if pp == nil || pod == nil || ctr == nil || a.Pool == policy.PoolNodeShared {
		return
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	id := pod.GetId()
	pp.pods[id] = podRef{pod.GetNamespace(), pod.GetName(), pod.GetUid()}
	if _, ok := pp.ctrs[ctr.GetId()]; !ok {
		pp.of[id] = append(pp.of[id], ctr.GetId())
	}
	pp.ctrs[ctr.GetId()] = ctr.GetName()
}

// removePod forgets a pod and its containers.
func (pp *pinnedPods) removePod(id string) {
	if pp == nil {
		return
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, c := range pp.of[id] {
		delete(pp.ctrs, c)
	}
	delete(pp.of, id)
	delete(pp.pods, id)
}

// reset forgets everything (Synchronize fills it again).
func (pp *pinnedPods) reset() {
	if pp == nil {
		return
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	clear(pp.pods)
	clear(pp.ctrs)
	clear(pp.of)
}

// gaveUp is the Sender's SetGiveUp callback: a CPUPinningUpdateFailed Event
// for a container pinned in its pod's bubble or an exclusive slice.
func (p *Plugin) gaveUp(a policy.Assignment, attempts int) {
	pp := p.pinned
	pp.mu.Lock()
	pod, ok := pp.pods[a.PodID]
	name, known := pp.ctrs[a.ContainerID]
	pp.mu.Unlock()
	if !ok || !known {
		return // not pinned in a bubble: the pod asked for nothing
	}
	p.opts.post(advert.PodEvent{
		Namespace: pod.namespace, Name: pod.name, UID: pod.uid, Container: name,
		Reason: advert.ReasonPinningUpdateFailed, Action: advert.ActionUpdate,
		Message: fmt.Sprintf("the runtime failed all %d updates of its CPU pinning (%s pool, cpus %s); "+
			"given up: it keeps its cpuset until its next update or the plugin's next Synchronize; "+
			"the plugin's log has the runtime's error", attempts, a.Pool, a.CPUs),
	})
}

// rememberPinned fills p.pinned again from the runtime's pods and
// containers after pinning was rebuilt (Synchronize).
func (p *Plugin) rememberPinned(pn *cpumanager.Manager, pods []*api.PodSandbox, ctrs []*api.Container) {
	if p.pinned == nil {
		return
	}
	p.pinned.reset()
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	for _, c := range ctrs {
		if a, ok := pn.Assignment(c.GetId()); ok {
			p.pinned.add(byID[c.GetPodSandboxId()], c, a)
		}
	}
}
