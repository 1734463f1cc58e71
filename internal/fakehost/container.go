package fakehost

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The hook's container on the host (AddContainer).
const (
	PID          = 4242
	ContainerID  = "ctr1"
	PodCgroup    = "/kubepods/burstable/pod1"
	Cgroup       = PodCgroup + "/" + ContainerID
	HostCgroupNS = "cgroup:[4026531835]"
	CtrCgroupNS  = "cgroup:[4026532777]"
)

// AddContainer puts on the host what the hook sees of a container being
// created: its init PID in cgroup Cgroup and cgroup namespace CtrCgroupNS,
// the pod cgroup PodCgroup bounded to 250/50, the container cgroup's files
// and a bundle without a user namespace.
func (h *Host) AddContainer() error {
	if err := h.setNSLink(PID, CtrCgroupNS); err != nil {
		return err
	}
	if err := h.WriteFile(filepath.Join(h.Proc, strconv.Itoa(PID), "cgroup"), "0::"+Cgroup+"\n"); err != nil {
		return err
	}
	if err := h.SetPodBounds(PodCgroup, "250", "50"); err != nil {
		return err
	}
	for _, f := range []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads", "memory.max"} {
		if err := h.WriteFile(h.Path(Cgroup+"/"+f), ""); err != nil {
			return err
		}
	}
	return h.WriteSpec(&specs.Spec{Version: specs.Version, Linux: &specs.Linux{
		Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.CgroupNamespace}},
	}})
}

// SetCgroupNS sets the cgroup namespace links of host pid 1 and of the
// container init.
func (h *Host) SetCgroupNS(host, ctr string) error {
	if err := h.setNSLink(1, host); err != nil {
		return err
	}
	return h.setNSLink(PID, ctr)
}

// WriteSpec writes the bundle's config.json.
func (h *Host) WriteSpec(spec *specs.Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("fake host: bundle config: %w", err)
	}
	return h.WriteFile(filepath.Join(h.Bundle, "config.json"), string(data))
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

// State is the OCI state of the container, as the runtime hands it to the
// hook on stdin.
func (h *Host) State() string {
	data, err := json.Marshal(specs.State{
		Version: specs.Version, ID: ContainerID, Status: specs.StateCreating,
		Pid: PID, Bundle: h.Bundle,
		Annotations: map[string]string{"writable-cgroups.noderesource.dev/pod": "true"},
	})
	if err != nil {
		// Strings, an int and a string map always marshal.
		panic(fmt.Sprintf("fake host: OCI state: %v", err))
	}
	return string(data)
}

// Args are the hook's flags pointing at this host.
func (h *Host) Args() []string {
	return []string{"--cgroup-root", h.CgroupRoot, "--mountinfo", h.Mountinfo, "--proc", h.Proc, "--sysfs", h.Sysfs}
}
