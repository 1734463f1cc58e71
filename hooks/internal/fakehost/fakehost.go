// Package fakehost builds a fake host for hook tests in a temp directory: a
// /proc with the container init's namespaces and cgroup, a mount table, a
// cgroup tree with a pod and a container cgroup, a /sys and a bundle.
//
// Use it only from tests, with cgroups.TestMode set so temp files stand in
// for cgroupfs. New returns a healthy host; tests break one thing each.
package fakehost

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Fixed values of the fake host.
const (
	PID          = 4242
	ContainerID  = "ctr1"
	PodCgroup    = "/kubepods/burstable/pod1"
	Cgroup       = PodCgroup + "/" + ContainerID
	HostCgroupNS = "cgroup:[4026531835]"
	CtrCgroupNS  = "cgroup:[4026532777]"
)

// Host is a fake host rooted at a temp directory.
type Host struct {
	t          testing.TB
	Root       string
	Proc       string
	CgroupRoot string
	Sysfs      string
	Mountinfo  string
	Bundle     string
}

// New returns a healthy host: cgroup2 with nsdelegate, a container init in
// a private cgroup namespace in Cgroup, pod bounds 250/50 on PodCgroup and a
// bundle without a user namespace.
func New(t testing.TB) *Host {
	t.Helper()
	root := t.TempDir()
	h := &Host{
		t:          t,
		Root:       root,
		Proc:       filepath.Join(root, "proc"),
		CgroupRoot: filepath.Join(root, "cgroup"),
		Sysfs:      filepath.Join(root, "sys"),
		Bundle:     filepath.Join(root, "bundle"),
	}
	h.Mountinfo = filepath.Join(h.Proc, "1", "mountinfo")
	h.SetCgroupNS(HostCgroupNS, CtrCgroupNS)
	h.WriteFile(filepath.Join(h.Proc, strconv.Itoa(PID), "cgroup"), "0::"+Cgroup+"\n")
	h.WriteMountinfo(h.CgroupV2Line("rw,nsdelegate,memory_recursiveprot"))
	h.SetBounds("250", "50")
	for _, f := range []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads", "memory.max"} {
		h.WriteFile(filepath.Join(h.CgroupRoot, Cgroup, f), "")
	}
	h.WriteSpec(&specs.Spec{Version: specs.Version, Linux: &specs.Linux{
		Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.CgroupNamespace}},
	}})
	return h
}

// WriteFile writes data to file, creating parent directories.
func (h *Host) WriteFile(file, data string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// CgroupV2Line is a mountinfo line for cgroup2 at the cgroup root with the
// given super-block options.
func (h *Host) CgroupV2Line(superOpts string) string {
	return fmt.Sprintf("35 24 0:30 / %s rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 %s\n", h.CgroupRoot, superOpts)
}

// CgroupV1Lines is a hybrid cgroup v1 mount table: tmpfs at the cgroup
// root, v1 controllers and cgroup2 at <root>/unified.
func (h *Host) CgroupV1Lines() string {
	return fmt.Sprintf("25 24 0:22 / %[1]s ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"+
		"26 25 0:23 / %[1]s/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"+
		"27 25 0:24 / %[1]s/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory\n", h.CgroupRoot)
}

// WriteMountinfo replaces the host mount table. A root mount line is always
// written first.
func (h *Host) WriteMountinfo(lines string) {
	h.WriteFile(h.Mountinfo, "24 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"+lines)
}

// SetCgroupNS sets the cgroup namespace links of host pid 1 and the
// container init.
func (h *Host) SetCgroupNS(host, ctr string) {
	h.t.Helper()
	for pid, target := range map[int]string{1: host, PID: ctr} {
		link := filepath.Join(h.Proc, strconv.Itoa(pid), "ns", "cgroup")
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			h.t.Fatal(err)
		}
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			h.t.Fatal(err)
		}
	}
}

// SetBounds writes the pod cgroup's cgroup.max.descendants and
// cgroup.max.depth.
func (h *Host) SetBounds(descendants, depth string) {
	h.WriteFile(filepath.Join(h.CgroupRoot, PodCgroup, "cgroup.max.descendants"), descendants+"\n")
	h.WriteFile(filepath.Join(h.CgroupRoot, PodCgroup, "cgroup.max.depth"), depth+"\n")
}

// WriteSpec writes the bundle's config.json.
func (h *Host) WriteSpec(spec *specs.Spec) {
	h.t.Helper()
	data, err := json.Marshal(spec)
	if err != nil {
		h.t.Fatal(err)
	}
	h.WriteFile(filepath.Join(h.Bundle, "config.json"), string(data))
}

// UserNSSpec is a bundle config with a user namespace mapping container
// root to hostUID:hostGID.
func UserNSSpec(hostUID, hostGID uint32) *specs.Spec {
	return &specs.Spec{Version: specs.Version, Linux: &specs.Linux{
		Namespaces:  []specs.LinuxNamespace{{Type: specs.UserNamespace}, {Type: specs.CgroupNamespace}},
		UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: hostUID, Size: 65536}},
		GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: hostGID, Size: 65536}},
	}}
}

// State is the OCI state of the fake container as JSON.
func (h *Host) State() string {
	data, err := json.Marshal(specs.State{
		Version: specs.Version, ID: ContainerID, Status: specs.StateCreating,
		Pid: PID, Bundle: h.Bundle,
		Annotations: map[string]string{"writable-cgroups.noderesource.dev/pod": "true"},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return string(data)
}

// Args are the hook's flags pointing at this host.
func (h *Host) Args() []string {
	return []string{"--cgroup-root", h.CgroupRoot, "--mountinfo", h.Mountinfo, "--proc", h.Proc, "--sysfs", h.Sysfs}
}

// Path returns the absolute path of the cgroup file rel below the root.
func (h *Host) Path(rel string) string {
	return filepath.Join(h.CgroupRoot, rel)
}
