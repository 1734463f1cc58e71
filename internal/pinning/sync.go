package pinning

import (
	"log/slog"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/podres"
	"github.com/cgdelegate/cgdelegate/internal/policy"
)

// Synchronize rebuilds the allocation state from the runtime's pods and
// containers (the truth after a plugin or runtime restart). Values that do
// not parse are logged and dropped rather than failing the whole
// synchronization.
func (p *Pinner) Synchronize(log *slog.Logger, pods []*api.PodSandbox, ctrs []*api.Container) policy.RebuildResult {
	specs, states := snapshot(log, pods, ctrs)
	res := p.policy.Rebuild(specs, states)
	for _, c := range res.Conflicts {
		log.Warn("synchronize: conflict repaired", "conflict", c)
	}
	log.Info("synchronized", "pods", len(specs), "containers", len(states), "conflicts", len(res.Conflicts), "updates", len(res.Updates))
	return res
}

func snapshot(log *slog.Logger, pods []*api.PodSandbox, ctrs []*api.Container) ([]policy.PodSpec, []policy.ContainerState) {
	byID := make(map[string]*api.PodSandbox, len(pods))
	specs := make([]policy.PodSpec, 0, len(pods))
	for _, pod := range pods {
		if pod == nil {
			continue
		}
		byID[pod.GetId()] = pod
		spec, err := podSpec(pod)
		if err != nil {
			EventLog(log, pod, nil).Error("synchronize: pod budget ignored", "error", err)
			spec = policy.PodSpec{ID: pod.GetId(), Name: pod.GetNamespace() + "/" + pod.GetName()}
		}
		specs = append(specs, spec)
	}
	states := make([]policy.ContainerState, 0, len(ctrs))
	for _, ctr := range ctrs {
		switch ctr.GetState() {
		case api.ContainerState_CONTAINER_CREATED, api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
		default:
			continue // a stopped container holds no CPUs
		}
		pod := byID[ctr.GetPodSandboxId()]
		l := EventLog(log, pod, ctr)
		st := policy.ContainerState{Stamp: ctr.GetAnnotations()[policy.StampAnnotation]}
		spec, err := containerSpec(pod, ctr)
		if err != nil {
			l.Error("synchronize: container resources ignored", "error", err)
			spec = policy.ContainerSpec{ID: ctr.GetId(), PodID: ctr.GetPodSandboxId(), Name: ctr.GetName()}
		}
		cpu := ctr.GetLinux().GetResources().GetCpu()
		st.Spec = restoreExclusive(spec, st.Stamp, cpu.GetQuota())
		st.CPUs = parseSet(l, "cpus", cpu.GetCpus())
		st.Mems = parseSet(l, "mems", cpu.GetMems())
		states = append(states, st)
	}
	return specs, states
}

// restoreExclusive undoes cgdelegate's own quota change: an exclusive
// container runs with CFS quota -1, so the runtime now reports no CPU
// limit. Its limit was its request (it was Guaranteed), so put it back for
// the policy to recognise the slice.
//
// The quota is cgdelegate's when the stamp says exclusive, or, for a
// container without a valid stamp, when the quota is exactly -1: a
// container created while no plugin ran got its slice (and quota -1) from a
// Synchronize update, which can not add the stamp annotation. The kubelet
// sends quota 0, never -1, for a container without a CPU limit.
func restoreExclusive(spec policy.ContainerSpec, stamp string, quota *api.OptionalInt64) policy.ContainerSpec {
	b := spec.Resources.Budget
	if b.CPULimit != 0 || b.CPURequest == 0 {
		return spec
	}
	st, err := policy.ParseStamp(stamp)
	switch {
	case err == nil && st.Pool != policy.PoolExclusive:
		return spec
	case err != nil && (quota == nil || quota.GetValue() != -1):
		return spec
	}
	b.CPULimit = b.CPURequest
	spec.Resources = podres.NewContainer(b)
	return spec
}

func parseSet(l *slog.Logger, what, s string) cpuset.CPUSet {
	set, err := cpuset.Parse(s)
	if err != nil {
		l.Warn("synchronize: unparsable cpuset treated as unset", "field", what, "value", s, "error", err)
		return cpuset.New()
	}
	return set
}

// EventLog is a logger for one event, with the pod and container (either
// may be nil); log itself is never changed.
func EventLog(log *slog.Logger, pod *api.PodSandbox, ctr *api.Container) *slog.Logger {
	l := log.With("pod", pod.GetNamespace()+"/"+pod.GetName())
	if ctr != nil {
		l = l.With("container", ctr.GetName())
	}
	return l
}
