package cpumanager

import (
	"fmt"
	"log/slog"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/logging"
)

// ResizeContainer decides an in-place resize of ctr to res (NRI
// UpdateContainer) with policy.Policy.Resize. An allowed resize of a
// container the policy places returns the update that keeps its cpuset,
// memory nodes and, for an exclusive container, quota -1: the runtime merges
// it into the resize, so an exclusive container never gets a quota back
// through a resize. A refused one is an error naming the container and the
// numbers; the runtime fails the resize with it.
func (m *Manager) ResizeContainer(log *slog.Logger, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (upd []*api.ContainerUpdate, err error) {
	defer func() {
		if err != nil {
			logging.Event(log, pod, ctr).Error("resize refused", "error", err)
		}
	}()
	next := &api.Container{
		Id: ctr.GetId(), PodSandboxId: ctr.GetPodSandboxId(), Name: ctr.GetName(), Annotations: ctr.GetAnnotations(),
		Linux: &api.LinuxContainer{Resources: res, OomScoreAdj: ctr.GetLinux().GetOomScoreAdj()},
	}
	c, err := budget.ForContainer(pod, next)
	if err != nil {
		return nil, fmt.Errorf("resize: %w", err)
	}
	a, ok, err := m.policy.Resize(ctr.GetId(), c)
	if err != nil || !ok {
		return nil, err
	}
	return Updates([]policy.Assignment{a}), nil
}

// ResizePod decides an in-place resize of a pod's pod-level resources (NRI
// UpdatePodSandbox) with policy.Policy.ResizePod. Resources that make no
// budget (a resources annotation they contradict, a request above the
// limit) refuse the resize only for a pod the policy places.
func (m *Manager) ResizePod(log *slog.Logger, pod *api.PodSandbox, res *api.LinuxResources) (err error) {
	defer func() {
		if err != nil {
			logging.Event(log, pod, nil).Error("pod resize refused", "error", err)
		}
	}()
	b, err := budget.ForPod(&api.PodSandbox{Annotations: pod.GetAnnotations(), Linux: &api.LinuxPodSandbox{PodResources: res}})
	switch {
	case err == nil:
		return m.policy.ResizePod(pod.GetId(), b)
	case !m.policy.Places(pod.GetId()):
		// A pod cgdelegate does not place has no budget for it to keep.
		logging.Event(log, pod, nil).Info("pod resize: budget not read, nothing to check", "reason", err)
		return nil
	}
	return fmt.Errorf("resize: pod budget: %w", err)
}
