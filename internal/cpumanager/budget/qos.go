package budget

import (
	"fmt"
	"path"
	"strings"
)

// QoSClass is the kubelet's pod QoS class, applied to one container.
type QoSClass string

// QoS classes.
const (
	QoSGuaranteed QoSClass = "Guaranteed"
	QoSBurstable  QoSClass = "Burstable"
	QoSBestEffort QoSClass = "BestEffort"
)

// oom_score_adj values the kubelet gives each class.
const (
	GuaranteedOOMScoreAdj = -997
	BestEffortOOMScoreAdj = 1000
)

// ClassifyQoS derives the QoS class from a budget alone. See the package
// documentation for the rules.
func ClassifyQoS(b Budget) QoSClass {
	switch {
	case b.CPURequest > 0 && b.CPURequest == b.CPULimit && b.MemoryLimit > 0 &&
		(b.MemoryRequest == 0 || b.MemoryRequest == b.MemoryLimit):
		return QoSGuaranteed
	case b.CPURequest == 0 && b.CPULimit == 0 && b.MemoryRequest == 0 && b.MemoryLimit == 0:
		return QoSBestEffort
	}
	return QoSBurstable
}

// PodQoSFromOOMScoreAdj is the pod's QoS class as the kubelet's
// oom_score_adj for one of its containers tells it
// (pkg/kubelet/qos/policy.go, GetContainerOOMScoreAdjust): 1000 is a
// BestEffort pod, 3..999 a Burstable one. -997 is a Guaranteed pod or a
// node-critical one, and anything else (no value, a runtime's own) is not
// the kubelet's: both give "" (unknown).
func PodQoSFromOOMScoreAdj(adj *int64) QoSClass {
	switch {
	case adj == nil:
		return ""
	case *adj == BestEffortOOMScoreAdj:
		return QoSBestEffort
	case *adj >= 1000+GuaranteedOOMScoreAdj && *adj < BestEffortOOMScoreAdj:
		return QoSBurstable
	}
	return ""
}

// PodQoSFromCgroupParent is the pod's QoS class as the kubelet's pod
// cgroup (NRI PodSandbox.Linux.CgroupParent) tells it: the kubelet puts a
// Burstable pod under kubepods/burstable/pod<uid> (systemd driver:
// kubepods-burstable-pod<uid>.slice), a BestEffort one under
// kubepods/besteffort, and a Guaranteed one right under kubepods
// (kubepods-pod<uid>.slice) (pkg/kubelet/cm/pod_container_manager_linux.go,
// GetPodContainerName). Any other parent is not the kubelet's: "".
//
// It is the only word on the pod's class that reaches NRI before its first
// container: NRI carries no memory request, so a Burstable pod with CPU
// request = limit and a memory request below its limit has pod resources
// that read as Guaranteed.
func PodQoSFromCgroupParent(parent string) QoSClass {
	p := strings.TrimSuffix(strings.TrimSpace(parent), "/")
	base := path.Base(p)
	if name, ok := strings.CutSuffix(base, ".slice"); ok {
		switch {
		case strings.HasPrefix(name, "kubepods-burstable-pod"):
			return QoSBurstable
		case strings.HasPrefix(name, "kubepods-besteffort-pod"):
			return QoSBestEffort
		case strings.HasPrefix(name, "kubepods-pod"):
			return QoSGuaranteed
		}
		return ""
	}
	if !strings.HasPrefix(base, "pod") || len(base) == len("pod") {
		return ""
	}
	switch path.Base(path.Dir(p)) {
	case "burstable":
		return QoSBurstable
	case "besteffort":
		return QoSBestEffort
	case "kubepods":
		return QoSGuaranteed
	}
	return ""
}

// CheckOOMScoreAdj cross-checks a class against the container's
// oom_score_adj. Only the BestEffort score is conclusive: a container the
// kubelet scored 1000 cannot have requests or limits.
func CheckOOMScoreAdj(class QoSClass, b Budget, adj int64) error {
	if adj == BestEffortOOMScoreAdj && class != QoSBestEffort {
		return fmt.Errorf("%w: oom_score_adj %d says BestEffort but resources %s say %s",
			ErrInconsistent, adj, b, class)
	}
	return nil
}

// Container is one container's budget and class.
type Container struct {
	Budget
	// QoS is the container's class from its values.
	QoS QoSClass `json:"qos"`
	// PodLimits says the container has no CPU resources of its own: its
	// CPU values are the pod's limits (PodLimitsOnly), so its CPU request
	// is 0 and it runs in its pod's shared pool.
	PodLimits bool `json:"podLimits,omitempty"`
}

// NewContainer classifies b.
func NewContainer(b Budget) Container { return Container{Budget: b, QoS: ClassifyQoS(b)} }

// ExclusiveEligible reports whether the container is Guaranteed with a
// whole number of CPUs.
func (c Container) ExclusiveEligible() bool {
	return c.QoS == QoSGuaranteed && c.CPULimit > 0 && c.CPULimit%1000 == 0
}

// ExclusiveCPUs is the number of exclusive CPUs the container qualifies
// for, 0 when it is not exclusive-eligible.
func (c Container) ExclusiveCPUs() int {
	if !c.ExclusiveEligible() {
		return 0
	}
	return int(c.CPULimit / 1000)
}
