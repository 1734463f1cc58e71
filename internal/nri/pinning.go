package nri

import (
	"context"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// pinningEvents are the events the CPU policy needs besides CreateContainer
// (Synchronize is always delivered).
const pinningEvents = "RunPodSandbox,StopPodSandbox,StopContainer,RemoveContainer,RemovePodSandbox,UpdateContainer,UpdatePodSandbox"

// RunPodSandbox gives a pod with a CPU budget its bubble. A bad budget or
// no room for the bubble fails the pod (cpumanager.ErrPodRefused): the
// runtime fails RunPodSandbox with this error, before any container.
func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	pn := p.pin.Load()
	if pod == nil || !pn.Active() {
		return nil
	}
	upd, err := pn.AddPod(pod)
	if err != nil {
		p.eventLog(pod, nil).Error("pod refused", "error", err)
		return err
	}
	p.carryOut(pod, nil, outcome{changed: upd})
	return nil
}

// outcome is what a pinning event changes beyond its answer, and what the
// update Sender's ledger of the runtime's records must learn of it. Every
// handler builds one and hands it to carryOut, the one place that writes
// cgroups, queues updates and keeps the ledger: a handler can not forget
// one of those steps, only say what happened.
type outcome struct {
	// changed are the containers whose assignment the event changed: their
	// cgroups get the new cpusets at once (Enforce); the runtime's
	// records follow by the event's answer when answered, by the
	// Sender's UpdateContainers otherwise.
	changed  []policy.Assignment
	answered bool
	// created is the new container the event created, with the CPU
	// settings of its creation adjustment (the runtime's first record).
	created    string
	createdCPU *api.LinuxCPU
	// forget is the event's container when the runtime changes its
	// record outside the Sender (a resize, a stop, a removal).
	forget string
	// removed is a container removed while pinning is not active: its
	// record is dropped, no update can be about it any more.
	removed string
	// resynced: the runtime may have changed any record (Synchronize).
	resynced bool
}

// carryOut applies o (see outcome) and returns the updates for the
// event's answer. The ledger forgets first, so that no update the Sender
// sends from now on is taken for one the runtime already holds.
func (p *Plugin) carryOut(pod *api.PodSandbox, ctr *api.Container, o outcome) []*api.ContainerUpdate {
	if o.resynced {
		p.send.ForgetAll()
	}
	switch {
	case o.answered && len(o.changed) > 0:
		ids := make([]string, 0, len(o.changed)+1)
		for _, a := range o.changed {
			ids = append(ids, a.ContainerID)
		}
		if o.forget != "" {
			ids = append(ids, o.forget)
		}
		p.send.Forget(ids...)
	case o.forget != "":
		p.send.Forget(o.forget)
	}
	if o.removed != "" {
		p.send.Removed(o.removed)
	}
	p.enforce(pod, ctr, o.changed)
	if o.created != "" {
		p.send.Created(o.created, o.createdCPU)
	}
	if o.answered {
		return cpumanager.Updates(o.changed)
	}
	p.send.Enqueue(o.changed)
	return nil
}

// enforce writes the new cpusets of the containers whose pool changed to
// their cgroups at once (cpumanager.Enforce): the runtime's updates,
// applied one container at a time, follow.
func (p *Plugin) enforce(pod *api.PodSandbox, ctr *api.Container, as []policy.Assignment) {
	if len(as) == 0 {
		return
	}
	n, err := p.send.Enforce(as)
	if err != nil {
		log := p.log
		if pod != nil {
			log = p.eventLog(pod, ctr)
		}
		log.Warn("cannot write some cpusets to their cgroups; the runtime's container updates set them, later",
			"written", n, "error", err)
	}
}

// adjust turns the plan into the container's adjustment and, when pinning
// is on, places the container and adds its cpuset, memory nodes, quota and
// stamp. It returns the updates for the other containers whose pool shrank.
// On error nothing changed.
func (p *Plugin) adjust(pod *api.PodSandbox, ctr *api.Container, plan *writable.Plan) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	pn := p.pin.Load()
	if !pn.Active() {
		return plan.Adjustment(), nil, nil
	}
	a, upd, err := pn.AddContainer(pod, ctr)
	if err != nil {
		return nil, nil, err // its cause comes with it (cpumanager's sentinels)
	}
	adj := plan.Adjustment()
	if adj == nil {
		adj = &api.ContainerAdjustment{}
	}
	cpu := cpumanager.Adjust(adj, a)
	p.pinned.add(pod, ctr, a)
	p.eventLog(pod, ctr).Info("cpus assigned", "pool", a.Pool, "cpus", cpu.Cpus, "mems", cpu.Mems, "updates", len(upd))
	return adj, p.carryOut(pod, ctr, outcome{changed: upd, answered: true, created: a.ContainerID, createdCPU: cpu}), nil
}

// UpdateContainer is an in-place resize: refused for a pinned container,
// otherwise kept to its cpuset, memory nodes and quota (cpumanager.Manager.ResizeContainer).
func (p *Plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	if pn := p.pin.Load(); pod != nil && ctr != nil && pn.Active() {
		// The resize changes the runtime's record of the container.
		p.carryOut(pod, ctr, outcome{forget: ctr.GetId()})
		return pn.ResizeContainer(p.log, pod, ctr, res)
	}
	return nil, nil
}

// UpdatePodSandbox is an in-place resize of the pod-level resources:
// refused for a pinned pod (cpumanager.Manager.ResizePod).
func (p *Plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, res *api.LinuxResources) error {
	if pn := p.pin.Load(); pod != nil && pn.Active() {
		return pn.ResizePod(p.log, pod, res)
	}
	return nil
}

// StopContainer returns a stopped container's CPUs to its pool and widens
// the containers there.
func (p *Plugin) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	pn := p.pin.Load()
	if ctr == nil || !pn.Active() {
		return nil, nil
	}
	upd := pn.RemoveContainer(ctr.GetId())
	return p.carryOut(pod, ctr, outcome{changed: upd, answered: true, forget: ctr.GetId()}), nil
}

// RemoveContainer is StopContainer for a container removed without a stop;
// it cannot return updates, so they are sent with UpdateContainers.
func (p *Plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	pn := p.pin.Load()
	if ctr == nil {
		return nil
	}
	if !pn.Active() {
		// Created while pinning was active, removed after it was
		// suspended: nothing to place, but nothing to remember either.
		p.carryOut(pod, ctr, outcome{removed: ctr.GetId()})
		return nil
	}
	p.carryOut(pod, ctr, outcome{changed: pn.RemoveContainer(ctr.GetId()), forget: ctr.GetId()})
	return nil
}

// StopPodSandbox returns the pod's bubble (a stopped sandbox never runs
// again), as the kubelet frees a terminated pod's CPUs before the sandbox's
// removal; the widened containers are updated with UpdateContainers.
func (p *Plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if pn := p.pin.Load(); pod != nil && pn.Active() {
		p.carryOut(pod, nil, outcome{changed: pn.RemovePod(pod.GetId())})
	}
	return nil
}

// RemovePodSandbox forgets the pod's bounds, takes it out of the node
// budget of delegated cgroups and returns its bubble if StopPodSandbox did
// not.
func (p *Plugin) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if pod == nil {
		return nil
	}
	if rel, err := host.PodPath(pod.GetLinux().GetCgroupParent()); err == nil {
		p.h.Load().bounds.Forget(rel)
	}
	p.writable.dropPod(pod.GetId())
	p.pinned.removePod(pod.GetId())
	return p.StopPodSandbox(ctx, pod)
}

// Synchronize logs every container created without cgdelegate (an audit:
// after a reconnect, what was missed is said), rebuilds the ledger of
// writable pods and containers (the node budget), rebuilds the allocation state
// from the runtime's pods and containers and repairs every container whose
// cpuset disagrees: its cgroup at once (Enforce), the runtime's record with
// UpdateContainers afterwards. Returned in the answer, the repairs would
// be applied one `runc update` each while the runtime holds its NRI lock,
// and no pod on the node could start until the last one was: a plugin
// killed while updates were held meets a whole fleet of them.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	h := p.h.Load()
	h.decider.Audit(pods, ctrs, func(pod *api.PodSandbox, ctr *api.Container, err error) {
		p.eventLog(pod, ctr).Error("container runs without cgdelegate", "error", err)
		p.postMissed(pod, ctr, err)
	})
	p.writable.rebuild(p.log, h.fs, h.cfg.MaxDescendants, pods, ctrs)
	pn := p.pin.Load()
	if !pn.Active() {
		return nil, nil
	}
	// What the runtime holds of each container is known again only
	// from the updates sent from now on.
	p.carryOut(nil, nil, outcome{changed: pn.Synchronize(p.log, pods, ctrs).Updates, resynced: true})
	p.rememberPinned(pn, pods, ctrs)
	return nil, nil
}
