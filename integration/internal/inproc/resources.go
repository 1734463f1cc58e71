package inproc

import "github.com/containerd/nri/pkg/api"

// cfsPeriod is the CFS period the kubelet writes, in µs.
const cfsPeriod = 100000

// guaranteedParent is where the kubelet puts a Guaranteed pod's cgroup
// (cgroupfs driver): right under kubepods.
const guaranteedParent = "/kubepods/pod2222"

// LinuxResources builds resources the way the kubelet converts a CPU
// request and limit (millicores, 0 for unset) and a memory limit (bytes,
// 0 for unset): shares = request*1024/1000 with a floor of 2, quota =
// limit*period/1000.
func LinuxResources(requestMilli, limitMilli, memoryLimit int64) *api.LinuxResources {
	shares := max(uint64(requestMilli)*1024/1000, 2)
	r := &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(shares), Period: api.UInt64(uint64(cfsPeriod))}}
	if limitMilli > 0 {
		r.Cpu.Quota = api.Int64(limitMilli * cfsPeriod / 1000)
	}
	if memoryLimit > 0 {
		r.Memory = &api.LinuxMemory{Limit: api.Int64(memoryLimit)}
	}
	return r
}

// WithPodResources sets the pod-level resources (pod.spec.resources) as
// containerd passes them in PodSandbox.Linux.PodResources. A Guaranteed
// budget (request = limit, a memory limit) moves the pod's cgroup right
// under kubepods (guaranteedParent), as the kubelet places a Guaranteed
// pod.
func WithPodResources(pod *api.PodSandbox, requestMilli, limitMilli, memoryLimit int64) *api.PodSandbox {
	if pod.Linux == nil {
		pod.Linux = &api.LinuxPodSandbox{}
	}
	pod.Linux.PodResources = LinuxResources(requestMilli, limitMilli, memoryLimit)
	if requestMilli > 0 && requestMilli == limitMilli && memoryLimit > 0 {
		pod.Linux.CgroupParent = guaranteedParent
		pod.Linux.CgroupsPath = guaranteedParent + "/" + pod.GetId()
	}
	return pod
}

// WithResources sets a container's Linux.Resources from a CPU request and
// limit in millicores and a memory limit in bytes.
func WithResources(requestMilli, limitMilli, memoryLimit int64) ContainerOption {
	return func(c *api.Container) {
		c.Linux.Resources = LinuxResources(requestMilli, limitMilli, memoryLimit)
	}
}

// WithGuaranteedCPUs makes a Guaranteed container with n whole CPUs and
// memoryLimit bytes.
func WithGuaranteedCPUs(n, memoryLimit int64) ContainerOption {
	return WithResources(n*1000, n*1000, memoryLimit)
}
