package nri

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/cgroupfs"
	"github.com/cgdelegate/cgdelegate/internal/pinning"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// pinningEvents are the events the CPU policy needs besides CreateContainer
// (Synchronize is always delivered).
const pinningEvents = "RunPodSandbox,StopContainer,RemoveContainer,RemovePodSandbox"

// RunPodSandbox gives a pod with a CPU budget its bubble. A bad budget or
// no room for the bubble fails the pod.
func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	pn := p.pin.Load()
	if pod == nil || !pn.Active() {
		return nil
	}
	upd, err := pn.AddPod(pod)
	if err != nil {
		p.eventLog(pod, nil).Error("pod refused", "error", err)
		return fmt.Errorf("%w %s/%s: %w", ErrRefused, pod.GetNamespace(), pod.GetName(), err)
	}
	p.send.Enqueue(upd)
	return nil
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
		return nil, nil, err
	}
	adj := plan.NewAdjustment() // the plan's own may be shared
	if adj == nil {
		adj = &api.ContainerAdjustment{}
	}
	pinning.Adjust(adj, a)
	p.eventLog(pod, ctr).Info("cpus assigned", "pool", a.Pool, "cpus", a.CPUs.String(), "mems", a.Mems.String(), "updates", len(upd))
	return adj, pinning.Updates(upd), nil
}

// StopContainer returns a stopped container's CPUs to its pool and widens
// the containers there.
func (p *Plugin) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	pn := p.pin.Load()
	if ctr == nil || !pn.Active() {
		return nil, nil
	}
	return pinning.Updates(pn.RemoveContainer(ctr.GetId())), nil
}

// RemoveContainer is StopContainer for a container removed without a stop;
// it cannot return updates, so they are sent with UpdateContainers.
func (p *Plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	pn := p.pin.Load()
	if ctr == nil || !pn.Active() {
		return nil
	}
	p.send.Enqueue(pn.RemoveContainer(ctr.GetId()))
	return nil
}

// RemovePodSandbox forgets the pod's bounds and returns its bubble to the
// node shared pool; the widened containers are updated with
// UpdateContainers.
func (p *Plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if pod == nil {
		return nil
	}
	if rel, err := cgroupfs.PodPath(pod.GetLinux().GetCgroupParent()); err == nil {
		p.h.Load().bounds.Forget(rel)
	}
	pn := p.pin.Load()
	if !pn.Active() {
		return nil
	}
	p.send.Enqueue(pn.RemovePod(pod.GetId()))
	return nil
}

// Synchronize rebuilds the allocation state from the runtime's pods and
// containers and returns the updates that repair every container whose
// cpuset disagrees.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	pn := p.pin.Load()
	if !pn.Active() {
		return nil, nil
	}
	return pinning.Updates(pn.Synchronize(p.log, pods, ctrs).Updates), nil
}
