package policy

import (
	"errors"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

// Sentinel errors. Callers check them with errors.Is. Those that refuse a
// pod, a container or a resize carry their refusal cause (refusal.Pinning:
// the policy could not place it), so every error that wraps one reports
// it (refusal.CauseOf) wherever it is handled. The bookkeeping errors
// (ErrUnknownPod, ErrExists, ErrInvalid, ErrStamp) decide nothing about
// the workload and should not happen: refusal.Other, a bug report
// (docs/troubleshooting.md), unless they wrap a budget's own refusal.
var (
	// ErrNoSharedCPUs refuses a container that would leave its pod's shared
	// containers without CPUs, or an init container or sidecar without
	// CPUs that finds them none (a regular one runs in the node shared
	// pool). Its text is the kubelet's.
	ErrNoSharedCPUs = pinningRefusal("pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers")
	// ErrInsufficient means there are not enough free CPUs.
	ErrInsufficient = pinningRefusal("insufficient cpus")
	// ErrInsufficientMemory means no group of NUMA nodes has the free
	// memory a pod's bubble must hold.
	ErrInsufficientMemory = pinningRefusal("insufficient memory")
	// ErrUnknownPod means a container arrived for a pod the policy does not
	// know; add the pod first.
	ErrUnknownPod = errors.New("unknown pod")
	// ErrExists means a pod or container id is already known.
	ErrExists = errors.New("already exists")
	// ErrQoS refuses a container whose oom_score_adj says its pod is not
	// Guaranteed, in a pod whose bubble already holds containers.
	ErrQoS = pinningRefusal("pod QoS mismatch")
	// ErrResize refuses an in-place resize that would change what the
	// policy placed (a bubble or an exclusive slice). Every such pod is
	// Guaranteed, and the kubelet's static CPU manager refuses the resize
	// of a Guaranteed pod too (KubeletResizeReason).
	ErrResize = pinningRefusal("in-place resize refused")
	// ErrInvalid means bad input: an empty id, an invalid budget, an
	// unknown scope.
	ErrInvalid = errors.New("invalid input")
	// ErrStamp marks a stamp that does not parse.
	ErrStamp = errors.New("malformed assignment stamp")
)

// pinningRefusal is a sentinel that refuses with refusal.Pinning.
func pinningRefusal(text string) error { return refusal.New(refusal.Pinning, errors.New(text)) }

// KubeletResizeReason is what the kubelet's static CPU manager answers
// for the in-place resize of a Guaranteed pod (v1.37
// pkg/kubelet/allocation/handlers.go, PodResizeInfeasible, while the
// alpha InPlacePodVerticalScalingExclusiveCPUs gate is off); ErrResize
// refusals quote it.
const KubeletResizeReason = `as the kubelet's: "Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\""`

// Lifecycle says what kind of container a spec describes.
type Lifecycle string

const (
	// LifecycleRegular is an app container (the zero value).
	LifecycleRegular Lifecycle = ""
	// LifecycleInit is a plain init container: its CPUs are released when
	// the pod's first regular container is added.
	LifecycleInit Lifecycle = "init"
	// LifecycleSidecar is a restartable init container: it keeps its CPUs.
	LifecycleSidecar Lifecycle = "sidecar"
)

// Pool says where a container runs.
type Pool string

const (
	// PoolExclusive is an exclusive slice.
	PoolExclusive Pool = "exclusive"
	// PoolPodShared is the pod shared pool: the bubble minus its slices.
	PoolPodShared Pool = "pod-shared"
	// PoolNodeShared is the node shared pool.
	PoolNodeShared Pool = "node-shared"
)

// PodSpec is what the policy needs to know about a pod.
type PodSpec struct {
	// ID is the pod sandbox id.
	ID string
	// Name is namespace/name, for status only.
	Name string
	// Budget is the pod-level budget (budget.ForPod); the zero budget
	// means none.
	Budget budget.Budget
	// QoS is the pod's QoS class as its cgroup parent says
	// (budget.PodQoSFromCgroupParent); "" when it does not say. A
	// Burstable or BestEffort pod gets no bubble and no exclusive CPUs,
	// whatever its budget reads as.
	QoS budget.QoSClass
}

// notGuaranteed says the pod's cgroup parent shows it is not Guaranteed.
func (s PodSpec) notGuaranteed() bool {
	return s.QoS == budget.QoSBurstable || s.QoS == budget.QoSBestEffort
}

// ContainerSpec is what the policy needs to know about a container.
type ContainerSpec struct {
	// ID is the container id.
	ID string
	// PodID is the pod sandbox id.
	PodID string
	// Name is the container name, for messages and status.
	Name string
	// Resources is the container's budget and class
	// (budget.ForContainer).
	Resources budget.Container
	// Lifecycle marks init containers and sidecars.
	Lifecycle Lifecycle
	// PodQoS is the pod's QoS class as the container's oom_score_adj
	// says (budget.PodQoSFromOOMScoreAdj); "" when it does not say. A
	// Burstable or BestEffort pod gets no bubble and no exclusive CPUs,
	// whatever its pod-level resources read as.
	PodQoS budget.QoSClass
	// Cgroup is the container's cgroup, relative to the cgroup root; ""
	// when unknown. The policy does not read it: it hands it back in the
	// container's Assignments, so that the caller can write a new cpuset
	// to the cgroup at once.
	Cgroup string
}

// notGuaranteed says the container's oom_score_adj shows its pod is not
// Guaranteed.
func (c ContainerSpec) notGuaranteed() bool {
	return c.PodQoS == budget.QoSBurstable || c.PodQoS == budget.QoSBestEffort
}

// Assignment is where one container runs.
type Assignment struct {
	ContainerID string
	PodID       string
	// Pool is where the CPUs come from.
	Pool Pool
	// CPUs is the container's cpuset.cpus.
	CPUs cpuset.CPUSet
	// Mems is the container's cpuset.mems: the NUMA nodes of CPUs.
	Mems cpuset.CPUSet
	// Bubble is the pod's bubble (empty without one), for the stamp.
	Bubble cpuset.CPUSet
	// Cgroup is ContainerSpec.Cgroup.
	Cgroup string
	// RestoreQuota, when > 0, is the CFS quota (for budget.DefaultPeriod)
	// to put back: a repair moved the container out of an exclusive slice,
	// and the runtime still runs it without a quota (-1).
	RestoreQuota int64
}

// QuotaDisabled says set the container's CFS quota to -1: an exclusive
// container's CPUs are its alone, so it is never throttled.
func (a Assignment) QuotaDisabled() bool { return a.Pool == PoolExclusive }
