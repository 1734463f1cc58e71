package inproc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/opencontainers/cgroups"

	"github.com/cgdelegate/cgdelegate/internal/cgroupfs"
	"github.com/cgdelegate/cgdelegate/internal/config"
)

// FakeHost is a host made of files: a mount table, a cgroup tree and the
// plugin's output files, all under one directory.
//
// It sets github.com/opencontainers/cgroups TestMode, so that plain files
// stand in for cgroupfs in this process.
type FakeHost struct {
	Dir         string
	CgroupRoot  string
	Mountinfo   string
	Sysfs       string
	FeatureFile string
	StatusFile  string
}

// NewFakeHost builds a fake host under dir with cgroup2 mounted at its
// cgroup root, with or without nsdelegate.
func NewFakeHost(dir string, nsdelegate bool) (*FakeHost, error) {
	cgroups.TestMode = true
	h := &FakeHost{
		Dir:         dir,
		CgroupRoot:  filepath.Join(dir, "cgroup"),
		Mountinfo:   filepath.Join(dir, "mountinfo"),
		Sysfs:       filepath.Join(dir, "sys"),
		FeatureFile: filepath.Join(dir, "features.d", "cgdelegate"),
		StatusFile:  filepath.Join(dir, "status.json"),
	}
	if strings.ContainsAny(dir, " \t\n\\") {
		return nil, fmt.Errorf("fake host dir %q must not contain white space or backslashes", dir)
	}
	for _, d := range []string{h.CgroupRoot, h.Sysfs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %q: %w", d, err)
		}
	}
	if err := h.SetNsdelegate(nsdelegate); err != nil {
		return nil, err
	}
	return h, nil
}

// SetNsdelegate rewrites the mount table, as a remount would.
func (h *FakeHost) SetNsdelegate(on bool) error {
	opts := "rw"
	if on {
		opts = "rw,nsdelegate,memory_recursiveprot"
	}
	table := fmt.Sprintf("22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"+
		"24 22 0:23 / %s rw,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 %s\n", h.CgroupRoot, opts)
	if err := os.WriteFile(h.Mountinfo, []byte(table), 0o644); err != nil {
		return fmt.Errorf("write fake mount table: %w", err)
	}
	return nil
}

// SetCgroupV1 rewrites the mount table as a hybrid cgroup v1 host.
func (h *FakeHost) SetCgroupV1() error {
	table := fmt.Sprintf("22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"+
		"30 22 0:26 / %s ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"+
		"31 30 0:27 / %s/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate\n", h.CgroupRoot, h.CgroupRoot)
	if err := os.WriteFile(h.Mountinfo, []byte(table), 0o644); err != nil {
		return fmt.Errorf("write fake mount table: %w", err)
	}
	return nil
}

// AddPodCgroup creates the pod cgroup for a cgroup parent, unbounded, as
// the kubelet leaves it today.
func (h *FakeHost) AddPodCgroup(parent string) error {
	rel, err := cgroupfs.PodPath(parent)
	if err != nil {
		return err
	}
	dir := filepath.Join(h.CgroupRoot, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create pod cgroup %q: %w", dir, err)
	}
	for _, f := range []string{cgroupfs.FileMaxDescendants, cgroupfs.FileMaxDepth} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("max\n"), 0o644); err != nil {
			return fmt.Errorf("create %s: %w", f, err)
		}
	}
	return nil
}

// ReadPodFile reads a file of the pod cgroup for a cgroup parent.
func (h *FakeHost) ReadPodFile(parent, file string) (string, error) {
	rel, err := cgroupfs.PodPath(parent)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(h.CgroupRoot, rel, file))
	return strings.TrimSpace(string(b)), err
}

// Config returns a plugin config pointing at this host.
func (h *FakeHost) Config() config.Config {
	c := config.Default()
	c.CgroupRoot = h.CgroupRoot
	c.MountinfoPath = h.Mountinfo
	c.SysfsRoot = h.Sysfs
	c.ProcRoot = filepath.Join(h.Dir, "proc")
	c.FeatureFile = h.FeatureFile
	c.StatusFile = h.StatusFile
	return c
}

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
