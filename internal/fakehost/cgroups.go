package fakehost

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cgdelegate/cgdelegate/internal/cgroupfs"
)

// Path returns the absolute path of rel below the cgroup root.
func (h *Host) Path(rel string) string {
	return filepath.Join(h.CgroupRoot, rel)
}

// AddPodCgroup creates the pod cgroup for a cgroup parent (cgroupfs path or
// systemd slice name), unbounded, as the kubelet leaves it.
func (h *Host) AddPodCgroup(parent string) error {
	return h.SetPodBounds(parent, "max", "max")
}

// SetPodBounds writes the cgroup.max.descendants and cgroup.max.depth of
// the pod cgroup for a cgroup parent, creating it if needed.
func (h *Host) SetPodBounds(parent, descendants, depth string) error {
	rel, err := cgroupfs.PodPath(parent)
	if err != nil {
		return err
	}
	if err := h.WriteFile(h.Path(rel+"/"+cgroupfs.FileMaxDescendants), descendants+"\n"); err != nil {
		return err
	}
	return h.WriteFile(h.Path(rel+"/"+cgroupfs.FileMaxDepth), depth+"\n")
}

// ReadPodFile reads a file of the pod cgroup for a cgroup parent, without
// surrounding white space.
func (h *Host) ReadPodFile(parent, file string) (string, error) {
	rel, err := cgroupfs.PodPath(parent)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(h.Path(rel + "/" + file))
	if err != nil {
		return "", fmt.Errorf("fake host: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// WriteDelegate writes /sys/kernel/cgroup/delegate, the files the kernel
// lets a cgroup namespace's owner write.
func (h *Host) WriteDelegate(files ...string) error {
	return h.WriteFile(filepath.Join(h.Sysfs, "kernel", "cgroup", "delegate"), strings.Join(files, "\n")+"\n")
}

// InstallSysfs copies a sysfs tree, such as a CPU topology tree from
// internal/cpumanager/topology/topologytest, into the host's /sys.
func (h *Host) InstallSysfs(tree fs.FS) error {
	if err := os.CopyFS(h.Sysfs, tree); err != nil {
		return fmt.Errorf("install sysfs tree: %w", err)
	}
	return nil
}
