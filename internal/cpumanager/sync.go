package cpumanager

import (
	"log/slog"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/logging"
)

// Synchronize rebuilds the allocation state from the runtime's pods and
// containers (the truth after a plugin or runtime restart); pods without a
// live container are left out (livePods). Values that do not parse are
// logged and dropped rather than failing the whole synchronization.
func (m *Manager) Synchronize(log *slog.Logger, pods []*api.PodSandbox, ctrs []*api.Container) policy.RebuildResult {
	specs, states := snapshot(log, pods, ctrs)
	res := m.policy.Rebuild(specs, states)
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
			logging.Event(log, pod, nil).Error("synchronize: pod budget ignored", "error", err)
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
		l := logging.Event(log, pod, ctr)
		st := policy.ContainerState{Stamp: stamp(l, pod, ctr)}
		spec, err := containerSpec(pod, ctr)
		if err != nil {
			l.Error("synchronize: container resources ignored", "error", err)
			spec = policy.ContainerSpec{ID: ctr.GetId(), PodID: ctr.GetPodSandboxId(), Name: ctr.GetName()}
		}
		cpu := ctr.GetLinux().GetResources().GetCpu()
		st.Spec = spec
		st.CPUQuota = cpu.GetQuota().GetValue()
		st.CPUs = parseSet(l, "cpus", cpu.GetCpus())
		st.Mems = parseSet(l, "mems", cpu.GetMems())
		states = append(states, st)
	}
	return livePods(log, specs, states, byID), states
}

// stamp is the container's stamp annotation, "" when it has none or when
// its pod carries the stamp key too. Only cgdelegate's creation
// adjustment should write it, but a pod author writes the pod's
// annotations, and a runtime may copy those onto every container (CRI-O
// does; so does containerd for the keys its pod_annotations passes
// through): on a container created while no plugin pinned, the copy
// would stand as cgdelegate's own. A container created while pinning ran
// has cgdelegate's stamp over the copy, which is ignored too: the rebuild
// treats it as unstamped (its current cpuset is kept as its slice when it
// is a valid one; its pod's bubble, known from stamps only, is placed
// afresh). That costs only the pod that carries the key.
func stamp(l *slog.Logger, pod *api.PodSandbox, ctr *api.Container) string {
	s := ctr.GetAnnotations()[policy.StampAnnotation]
	if _, copied := pod.GetAnnotations()[policy.StampAnnotation]; copied && s != "" {
		l.Warn("synchronize: the pod carries the CPU assignment stamp annotation, which the runtime may have copied onto the container: its stamp is ignored",
			"annotation", policy.StampAnnotation, "stamp", s)
		return ""
	}
	return s
}

// livePods keeps the pods with a live (created, running or paused)
// container. The runtime lists stopped sandboxes too (containerd 2.4
// lists every sandbox not in an unknown state, and NRI carries no sandbox
// state) until the kubelet's garbage collection removes them, which may
// take minutes; a stopped pod must hold no bubble, as the kubelet frees a
// terminated pod's CPUs. A pod whose containers are still to come gets its
// bubble with its first container (AddContainer records an unknown pod).
func livePods(log *slog.Logger, specs []policy.PodSpec, states []policy.ContainerState, byID map[string]*api.PodSandbox) []policy.PodSpec {
	live := make(map[string]bool, len(states))
	for _, st := range states {
		live[st.Spec.PodID] = true
	}
	out := specs[:0]
	for _, s := range specs {
		if live[s.ID] {
			out = append(out, s)
			continue
		}
		logging.Event(log, byID[s.ID], nil).Debug("synchronize: pod without a live container left out (stopped, or its containers are still to come)")
	}
	return out
}

func parseSet(l *slog.Logger, what, s string) cpuset.CPUSet {
	set, err := cpuset.Parse(s)
	if err != nil {
		l.Warn("synchronize: unparsable cpuset treated as unset", "field", what, "value", s, "error", err)
		return cpuset.New()
	}
	return set
}
