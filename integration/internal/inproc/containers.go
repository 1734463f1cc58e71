package inproc

import "github.com/containerd/nri/pkg/api"

// Pod builds a pod sandbox as containerd reports it.
func Pod(name, uid, cgroupParent string, annotations map[string]string) *api.PodSandbox {
	return &api.PodSandbox{
		Id:          "sandbox-" + uid,
		Name:        name,
		Uid:         uid,
		Namespace:   "default",
		Annotations: annotations,
		Linux: &api.LinuxPodSandbox{
			CgroupParent: cgroupParent,
			CgroupsPath:  cgroupParent + "/sandbox-" + uid,
		},
	}
}

// ContainerOption changes a container built by Container.
type ContainerOption func(*api.Container)

// Container builds a container as containerd 2.x hands it to NRI: the
// default mounts with a read-only cgroup mount and a private cgroup
// namespace.
func Container(pod *api.PodSandbox, name string, opts ...ContainerOption) *api.Container {
	c := &api.Container{
		Id:           pod.GetId() + "-" + name,
		PodSandboxId: pod.GetId(),
		Name:         name,
		State:        api.ContainerState_CONTAINER_CREATED,
		Args:         []string{"sleep", "inf"},
		Mounts: []*api.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		Linux: &api.LinuxContainer{
			Namespaces: []*api.LinuxNamespace{
				{Type: "pid"},
				{Type: "ipc"},
				{Type: "uts"},
				{Type: "mount"},
				{Type: "network", Path: "/var/run/netns/cni-1"},
				{Type: "cgroup"},
			},
			CgroupsPath: pod.GetLinux().GetCgroupParent() + "/" + pod.GetId() + "-" + name,
			Resources:   &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(2)}},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithRuntimeWritable makes the cgroup mount read-write, as containerd's
// cgroup_writable = true does.
func WithRuntimeWritable() ContainerOption {
	return func(c *api.Container) {
		for _, m := range c.Mounts {
			if m.Destination == "/sys/fs/cgroup" {
				m.Options = []string{"nosuid", "noexec", "nodev", "relatime"}
			}
		}
	}
}

// WithPrivileged makes /sys and /sys/fs/cgroup read-write, as containerd
// does for privileged containers.
func WithPrivileged() ContainerOption {
	return func(c *api.Container) {
		WithRuntimeWritable()(c)
		for _, m := range c.Mounts {
			if m.Destination == "/sys" {
				m.Options = []string{"nosuid", "noexec", "nodev", "rw"}
			}
		}
	}
}

// WithoutCgroupNS drops the cgroup namespace from the spec.
func WithoutCgroupNS() ContainerOption {
	return func(c *api.Container) {
		var keep []*api.LinuxNamespace
		for _, n := range c.Linux.Namespaces {
			if n.Type != "cgroup" {
				keep = append(keep, n)
			}
		}
		c.Linux.Namespaces = keep
	}
}

// WithSharedCgroupNS makes the container join an existing cgroup namespace.
func WithSharedCgroupNS(path string) ContainerOption {
	return func(c *api.Container) {
		WithoutCgroupNS()(c)
		c.Linux.Namespaces = append(c.Linux.Namespaces, &api.LinuxNamespace{Type: "cgroup", Path: path})
	}
}

// FinalMounts applies an adjustment's mount changes to the container's
// mounts, as the runtime would, and returns the result.
func FinalMounts(c *api.Container, adj *api.ContainerAdjustment) []*api.Mount {
	removed := map[string]bool{}
	var added []*api.Mount
	for _, m := range adj.GetMounts() {
		if dst, ok := m.IsMarkedForRemoval(); ok {
			removed[dst] = true
			continue
		}
		added = append(added, m)
	}
	var out []*api.Mount
	for _, m := range c.GetMounts() {
		if !removed[m.Destination] {
			out = append(out, m)
		}
	}
	return append(out, added...)
}
