package budget

import (
	"errors"
	"fmt"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

// Sentinel errors. Callers check them with errors.Is. Each carries the
// refusal cause of the pod or container it refuses (refusal.CauseOf): a
// malformed annotation is the user's to fix, the others are a budget the
// CPU policy can not place.
var (
	// ErrAnnotation marks a malformed resources annotation.
	ErrAnnotation = refusal.New(refusal.BadAnnotation, errors.New("malformed resources annotation"))
	// ErrInconsistent marks values that contradict each other.
	ErrInconsistent = refusal.New(refusal.Pinning, errors.New("inconsistent resources"))
	// ErrInvalid marks a runtime value outside what the kernel accepts.
	ErrInvalid = refusal.New(refusal.Pinning, errors.New("invalid resources"))
)

// Kernel and kubelet constants used by the conversions.
const (
	// MinShares is the kubelet's floor for cpu.shares.
	MinShares = 2
	// MaxShares is the kernel's ceiling for cpu.shares.
	MaxShares = 262144
	// DefaultPeriod is the CFS period the kubelet uses, in µs.
	DefaultPeriod = 100000
	// MinQuota is the kubelet's floor for a CFS quota, in µs.
	MinQuota = 1000
	// MinPeriod and MaxPeriod bound a CFS period, in µs.
	MinPeriod = 1000
	MaxPeriod = 1000000

	// maxMilli bounds any CPU amount we accept (about a billion CPUs), so
	// sums never overflow.
	maxMilli = 1 << 40
)

// Budget is a CPU and memory budget as the kubelet sees it. Zero means unset.
type Budget struct {
	// CPURequest is the CPU request in millicores.
	CPURequest int64 `json:"cpuRequestMilli,omitempty"`
	// CPULimit is the CPU limit in millicores.
	CPULimit int64 `json:"cpuLimitMilli,omitempty"`
	// MemoryRequest is the memory request in bytes. Only an annotation can
	// state it.
	MemoryRequest int64 `json:"memoryRequest,omitempty"`
	// MemoryLimit is the memory limit in bytes.
	MemoryLimit int64 `json:"memoryLimit,omitempty"`
	// Annotated says a resources annotation stated some of the values.
	Annotated bool `json:"annotated,omitempty"`
}

// HasCPU reports whether the budget states any CPU amount.
func (b Budget) HasCPU() bool { return b.CPURequest > 0 || b.CPULimit > 0 }

// IsZero reports whether the budget states nothing at all.
func (b Budget) IsZero() bool {
	return b.CPURequest == 0 && b.CPULimit == 0 && b.MemoryRequest == 0 && b.MemoryLimit == 0
}

// CPUBudget is the CPU amount the budget entitles to, in millicores: the
// limit when set, otherwise the request.
func (b Budget) CPUBudget() int64 {
	if b.CPULimit > 0 {
		return b.CPULimit
	}
	return b.CPURequest
}

// WholeCPUs is CPUBudget rounded up to whole CPUs.
func (b Budget) WholeCPUs() int {
	return int((b.CPUBudget() + 999) / 1000)
}

// BubbleCPUs is the size of the bubble a pod with this pod-level budget
// gets: its CPU request when the budget is Guaranteed (ClassifyQoS) and the
// request is a whole number of CPUs, otherwise 0 (no bubble: the pod runs
// in the node shared pool and none of its containers is exclusive). This
// is the kubelet's rule with PodLevelResourceManagers: v1.37
// pkg/kubelet/cm/cpumanager/policy_static.go, podGuaranteedCPUs (pod QoS
// from the pod-level resources, pkg/apis/core/v1/helper/qos ComputePodQOS,
// must be Guaranteed; only an integral CPU request counts) and
// allocatePodForAdd ("pod belongs in the shared pool" when it is 0).
func (b Budget) BubbleCPUs() int {
	if ClassifyQoS(b) != QoSGuaranteed || b.CPURequest%1000 != 0 {
		return 0
	}
	return int(b.CPURequest / 1000)
}

// Validate checks the budget on its own: no negative values and no request
// above its limit.
func (b Budget) Validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		val  int64
	}{
		{"cpu request", b.CPURequest},
		{"cpu limit", b.CPULimit},
		{"memory request", b.MemoryRequest},
		{"memory limit", b.MemoryLimit},
	} {
		if v.val < 0 {
			errs = append(errs, fmt.Errorf("%w: %s %d is negative", ErrInvalid, v.name, v.val))
		}
	}
	if b.CPULimit > 0 && b.CPURequest > b.CPULimit {
		errs = append(errs, fmt.Errorf("%w: cpu request %s exceeds cpu limit %s",
			ErrInconsistent, FormatMilliCPU(b.CPURequest), FormatMilliCPU(b.CPULimit)))
	}
	if b.MemoryLimit > 0 && b.MemoryRequest > b.MemoryLimit {
		errs = append(errs, fmt.Errorf("%w: memory request %s exceeds memory limit %s",
			ErrInconsistent, FormatMemory(b.MemoryRequest), FormatMemory(b.MemoryLimit)))
	}
	return errors.Join(errs...)
}

// String renders the budget for logs, e.g. "cpu=500m/2000m,memory=-/1Gi".
func (b Budget) String() string {
	opt := func(v int64, f func(int64) string) string {
		if v == 0 {
			return "-"
		}
		return f(v)
	}
	return fmt.Sprintf("cpu=%s/%s,memory=%s/%s",
		opt(b.CPURequest, FormatMilliCPU), opt(b.CPULimit, FormatMilliCPU),
		opt(b.MemoryRequest, FormatMemory), opt(b.MemoryLimit, FormatMemory))
}

// MilliCPUFromShares inverts the kubelet's shares conversion. Shares of
// MinShares or less mean no request.
func MilliCPUFromShares(shares uint64) int64 {
	if shares <= MinShares {
		return 0
	}
	return int64((shares*1000 + 1023) / 1024)
}

// SharesFromMilliCPU is the kubelet's conversion from a CPU request to
// cpu.shares.
func SharesFromMilliCPU(milli int64) uint64 {
	if milli <= 0 {
		return MinShares
	}
	s := uint64(milli) * 1024 / 1000
	switch {
	case s < MinShares:
		return MinShares
	case s > MaxShares:
		return MaxShares
	}
	return s
}

// weightStepShares is the widest gap between two cpu.shares values that
// cgroup v2 stores as the same cpu.weight, rounded up: the linear
// conversion the kubelet and runc use maps the 262142 shares above the
// floor onto 9999 weights (weight = 1 + (shares-2)*9999/262142, shares =
// 2 + (weight-1)*262142/9999), so a request read back from a pod cgroup's
// cpu.weight can be up to one step, about 26 shares, below what was
// written.
const weightStepShares = (MaxShares - MinShares + 9999 - 1) / 9999

// SameCPURequest reports whether CPU requests a and b, in millicores, may
// be one request that went through a cgroup v2 cpu.weight: their shares
// differ by at most one weight step. The kubelet sends a pod sandbox's
// request read back that way on an in-place resize (250m comes back as
// 232m), so comparing pod-level requests exactly would see a change that
// nobody made.
func SameCPURequest(a, b int64) bool {
	return sharesClose(SharesFromMilliCPU(a), SharesFromMilliCPU(b))
}

func sharesClose(a, b uint64) bool {
	return max(a, b)-min(a, b) <= weightStepShares
}

// maxPageSize is the largest page size the kernel rounds memory.max down
// to (64 KiB pages on some arm64 kernels; 4 KiB on x86).
const maxPageSize = 64 << 10

// sameMemoryLimit reports whether memory limits a and b (bytes, 0 for
// none) may be one limit read back from memory.max, which the kernel
// keeps rounded down to whole pages.
func sameMemoryLimit(a, b int64) bool {
	return a == b || a > 0 && b > 0 && max(a, b)-min(a, b) < maxPageSize
}

// Equivalent reports whether budgets b and o state the same resources as
// far as the runtime can tell. The kubelet sends a pod sandbox's resources
// on an in-place resize read back from the pod cgroup (v1.37
// kuberuntime_manager.go, doPodResizeAction), so the CPU request may be a
// cpu.weight step off (SameCPURequest) and the memory limit rounded down
// to a page; the CPU limit (quota and period) and the memory request
// (only an annotation states it) are exact.
func (b Budget) Equivalent(o Budget) bool {
	return b.CPULimit == o.CPULimit && b.MemoryRequest == o.MemoryRequest &&
		sameMemoryLimit(b.MemoryLimit, o.MemoryLimit) && SameCPURequest(b.CPURequest, o.CPURequest)
}

// MilliCPUFromQuota inverts the kubelet's quota conversion, rounding up. A
// quota <= 0 means no limit. period 0 means DefaultPeriod.
func MilliCPUFromQuota(quota int64, period uint64) int64 {
	if quota <= 0 {
		return 0
	}
	if period == 0 {
		period = DefaultPeriod
	}
	p := int64(period)
	return quota/p*1000 + (quota%p*1000+p-1)/p
}

// QuotaFromMilliCPU is the kubelet's conversion from a CPU limit to a CFS
// quota for the given period (0 means DefaultPeriod).
func QuotaFromMilliCPU(milli int64, period uint64) int64 {
	if milli <= 0 {
		return 0
	}
	if period == 0 {
		period = DefaultPeriod
	}
	q := milli * int64(period) / 1000
	if q < MinQuota {
		return MinQuota
	}
	return q
}

// FromLinuxResources converts runtime resources into a Budget. A nil r is
// the zero budget. Values the kernel would refuse are an ErrInvalid error.
func FromLinuxResources(r *api.LinuxResources) (Budget, error) {
	var b Budget
	if r == nil {
		return b, nil
	}
	if c := r.GetCpu(); c != nil {
		if s := c.GetShares(); s != nil {
			if s.GetValue() > MaxShares {
				return Budget{}, fmt.Errorf("%w: cpu shares %d above %d", ErrInvalid, s.GetValue(), MaxShares)
			}
			b.CPURequest = MilliCPUFromShares(s.GetValue())
		}
		var period uint64
		if p := c.GetPeriod(); p != nil && p.GetValue() != 0 {
			period = p.GetValue()
			if period < MinPeriod || period > MaxPeriod {
				return Budget{}, fmt.Errorf("%w: cpu period %d outside [%d, %d]", ErrInvalid, period, MinPeriod, MaxPeriod)
			}
		}
		if q := c.GetQuota(); q != nil && q.GetValue() > 0 {
			b.CPULimit = MilliCPUFromQuota(q.GetValue(), period)
			if b.CPULimit > maxMilli {
				return Budget{}, fmt.Errorf("%w: cpu quota %d too large", ErrInvalid, q.GetValue())
			}
		}
	}
	if m := r.GetMemory(); m != nil {
		if l := m.GetLimit(); l != nil && l.GetValue() > 0 {
			b.MemoryLimit = l.GetValue()
		}
	}
	return b, nil
}

// FormatMilliCPU renders millicores the way the error messages use them,
// e.g. "1500m".
func FormatMilliCPU(m int64) string { return fmt.Sprintf("%dm", m) }

// FormatMemory renders bytes with the largest binary suffix that divides
// them exactly, e.g. "1Gi", "1536Mi", "1000".
func FormatMemory(b int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Pi", 1 << 50}, {"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if b != 0 && b%u.mult == 0 {
			return fmt.Sprintf("%d%s", b/u.mult, u.suffix)
		}
	}
	return fmt.Sprintf("%d", b)
}
