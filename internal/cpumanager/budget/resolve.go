package budget

import (
	"errors"
	"fmt"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
)

// ForPod is the pod-level budget: PodSandbox.Linux.PodResources, with the
// resources.cgdelegate.io/pod annotation applied. A pod without pod-level
// resources or annotation has the zero budget.
func ForPod(pod *api.PodSandbox) (Budget, error) {
	r := pod.GetLinux().GetPodResources()
	b, err := FromLinuxResources(r)
	if err != nil {
		return Budget{}, fmt.Errorf("pod resources: %w", err)
	}
	if f, ok := annotations.ForPod(pod, annotations.PodResources); ok {
		if b, _, err = applyAnnotation(b, r, f.Key, f.Value); err != nil {
			return Budget{}, err
		}
	}
	if err := b.Validate(); err != nil {
		return Budget{}, fmt.Errorf("pod budget: %w", err)
	}
	return b, nil
}

// ForContainer is a container's budget and QoS class: its
// Linux.Resources with the resources.cgdelegate.io/container.<name>
// annotation (looked up on the pod, then on the container) applied, and
// cross-checked against its oom_score_adj. A container whose CPU values
// are the pod's limits (see PodLimitsOnly) has no CPU request of its own.
func ForContainer(pod *api.PodSandbox, ctr *api.Container) (Container, error) {
	r := ctr.GetLinux().GetResources()
	b, err := FromLinuxResources(r)
	if err != nil {
		return Container{}, fmt.Errorf("container %q resources: %w", ctr.GetName(), err)
	}
	podLimits := PodLimitsOnly(pod.GetLinux().GetPodResources(), r)
	if f, ok := annotations.ForContainer(pod, ctr, annotations.ContainerResources); ok {
		var a Annotation
		if b, a, err = applyAnnotation(b, r, f.Key, f.Value); err != nil {
			return Container{}, fmt.Errorf("container %q: %w", ctr.GetName(), err)
		}
		// An annotated CPU amount is the container's own.
		podLimits = podLimits && a.CPU == nil
	}
	if podLimits {
		b.CPURequest = 0
	}
	if err := b.Validate(); err != nil {
		return Container{}, fmt.Errorf("container %q: %w", ctr.GetName(), err)
	}
	c := NewContainer(b)
	c.PodLimits = podLimits
	if adj := ctr.GetLinux().GetOomScoreAdj(); adj != nil {
		if err := CheckOOMScoreAdj(c.QoS, b, adj.GetValue()); err != nil {
			return Container{}, fmt.Errorf("container %q: %w", ctr.GetName(), err)
		}
	}
	return c, nil
}

// PodLimitsOnly reports whether container resources c are what the kubelet
// sends for a container with no CPU resources of its own in a pod whose
// pod-level resources pod have a CPU limit: the pod's CFS quota and period,
// cpu shares converted from the pod's CPU limit, and the pod's memory limit
// (or none when the pod has none). See the package documentation.
func PodLimitsOnly(pod, c *api.LinuxResources) bool {
	quota := pod.GetCpu().GetQuota().GetValue()
	if quota <= 0 {
		return false
	}
	period := periodOrDefault(pod.GetCpu().GetPeriod().GetValue())
	cpu := c.GetCpu()
	return cpu.GetQuota().GetValue() == quota &&
		periodOrDefault(cpu.GetPeriod().GetValue()) == period &&
		cpu.GetShares().GetValue() == SharesFromMilliCPU(MilliCPUFromQuota(quota, period)) &&
		max(c.GetMemory().GetLimit().GetValue(), 0) == max(pod.GetMemory().GetLimit().GetValue(), 0)
}

// applyAnnotation parses the annotation and lays it over the converted
// budget b. Where r also carries a value, the annotated value must convert
// back to it: exactly for limits, within one cpu.weight step for the CPU
// request (SameCPURequest). It returns the parsed annotation too.
func applyAnnotation(b Budget, r *api.LinuxResources, key, value string) (Budget, Annotation, error) {
	a, err := ParseAnnotation(key, value)
	if err != nil {
		return Budget{}, Annotation{}, err
	}
	var errs []error
	conflict := func(what, annotated, runtime string) {
		errs = append(errs, fmt.Errorf("%w: annotation %s states %s %s but the runtime has %s",
			ErrInconsistent, key, what, annotated, runtime))
	}
	if a.CPU != nil {
		cpu := r.GetCpu()
		if s := cpu.GetShares(); s != nil && s.GetValue() != 0 {
			// Within a weight step: the runtime may have read the value
			// back from cpu.weight (SameCPURequest).
			if want := SharesFromMilliCPU(a.CPU.Request); !sharesClose(want, s.GetValue()) {
				conflict("cpu request", fmt.Sprintf("%s (%d shares)", FormatMilliCPU(a.CPU.Request), want),
					fmt.Sprintf("cpu shares %d (%s)", s.GetValue(), FormatMilliCPU(b.CPURequest)))
			}
		}
		if q := cpu.GetQuota(); q != nil && q.GetValue() > 0 {
			period := cpu.GetPeriod().GetValue()
			if want := QuotaFromMilliCPU(a.CPU.Limit, period); want != q.GetValue() {
				lim := "no limit"
				if a.CPU.Limit > 0 {
					lim = fmt.Sprintf("%s (quota %d)", FormatMilliCPU(a.CPU.Limit), want)
				}
				conflict("cpu limit", lim,
					fmt.Sprintf("cpu quota %d/%d (%s)", q.GetValue(), periodOrDefault(period), FormatMilliCPU(b.CPULimit)))
			}
		}
		b.CPURequest, b.CPULimit = a.CPU.Request, a.CPU.Limit
	}
	if a.Memory != nil {
		if b.MemoryLimit > 0 && a.Memory.Limit != b.MemoryLimit {
			lim := "no limit"
			if a.Memory.Limit > 0 {
				lim = FormatMemory(a.Memory.Limit)
			}
			conflict("memory limit", lim, "memory limit "+FormatMemory(b.MemoryLimit))
		}
		b.MemoryRequest, b.MemoryLimit = a.Memory.Request, a.Memory.Limit
	}
	if err := errors.Join(errs...); err != nil {
		return Budget{}, Annotation{}, err
	}
	b.Annotated = true
	return b, a, nil
}

func periodOrDefault(p uint64) uint64 {
	if p == 0 {
		return DefaultPeriod
	}
	return p
}

// NamedContainer is a container budget with the container's name, for
// CheckPod's messages.
type NamedContainer struct {
	Name string
	Container
}

// CheckPod checks a pod budget against its containers and reports every
// problem, each an ErrInconsistent naming both values:
//
//  1. the container CPU requests may not sum above the pod's CPU budget
//     (its request, or its limit when it has no request);
//  2. no container's CPU limit may exceed the pod's CPU limit;
//  3. no container's memory limit may exceed the pod's memory limit.
//
// A pod without a budget bounds nothing.
func CheckPod(pod Budget, ctrs []NamedContainer) error {
	var errs []error
	podCPU := pod.CPURequest
	if podCPU == 0 {
		podCPU = pod.CPULimit
	}
	var sum int64
	for _, c := range ctrs {
		sum += c.CPURequest
		if pod.CPULimit > 0 && c.CPULimit > pod.CPULimit {
			errs = append(errs, fmt.Errorf("%w: container %q cpu limit %s exceeds pod cpu limit %s",
				ErrInconsistent, c.Name, FormatMilliCPU(c.CPULimit), FormatMilliCPU(pod.CPULimit)))
		}
		if pod.MemoryLimit > 0 && c.MemoryLimit > pod.MemoryLimit {
			errs = append(errs, fmt.Errorf("%w: container %q memory limit %s exceeds pod memory limit %s",
				ErrInconsistent, c.Name, FormatMemory(c.MemoryLimit), FormatMemory(pod.MemoryLimit)))
		}
	}
	if podCPU > 0 && sum > podCPU {
		errs = append(errs, fmt.Errorf("%w: container cpu requests sum %s exceed pod cpu budget %s",
			ErrInconsistent, FormatMilliCPU(sum), FormatMilliCPU(podCPU)))
	}
	return errors.Join(errs...)
}
