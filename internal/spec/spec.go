// Package spec holds pure functions over a container's OCI-level
// description as NRI shows it: its mounts, namespaces and hooks. It reads
// nothing from the host and keeps no state.
//
// Use it to decide how a container's /sys/fs/cgroup looks now and to build
// the writable replacement. Whether the host allows that is
// internal/host's question; what the user asked for is internal/writable's (request.go).
package spec

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

// CgroupMountPoint is where containers see their cgroup tree.
const CgroupMountPoint = "/sys/fs/cgroup"

// Sentinel errors, wrapped with detail.
var (
	// ErrNoPrivateCgroupNS means the container would share a cgroup
	// namespace with something else.
	ErrNoPrivateCgroupNS = errors.New("container has no private cgroup namespace")
	// ErrHostCgroupBind means the container bind-mounts a host cgroup tree
	// over /sys/fs/cgroup.
	ErrHostCgroupBind = errors.New("container bind-mounts a host cgroup tree at /sys/fs/cgroup")
)

// cgroupMountOptions are the options of the writable mount, in order.
var cgroupMountOptions = []string{"nosuid", "noexec", "nodev", "relatime", "rw"}

// MountState describes a container's /sys/fs/cgroup as the runtime built it.
type MountState struct {
	// Mount is the mount at /sys/fs/cgroup, nil if there is none.
	Mount *api.Mount
	// ReadWrite reports a mount without the ro option.
	ReadWrite bool
	// Bind reports a bind mount (a user's hostPath) rather than a cgroup
	// file system mount.
	Bind bool
	// PrivilegedLike reports /sys as a read-write sysfs mount. NRI carries
	// no privileged flag; containerd and CRI-O make /sys writable only for
	// privileged containers (a user's hostPath of /sys is a bind instead).
	PrivilegedLike bool
}

// RuntimeWritable reports a read-write cgroup file system mount at
// /sys/fs/cgroup that the runtime made (containerd's cgroup_writable),
// not a user's bind.
func (st MountState) RuntimeWritable() bool { return st.Mount != nil && st.ReadWrite && !st.Bind }

// Inspect reports on the container's /sys/fs/cgroup and /sys mounts. When
// several mounts share a destination the last one wins, as it is mounted
// on top.
func Inspect(mounts []*api.Mount) MountState {
	var st MountState
	for _, m := range mounts {
		d := m.GetDestination()
		if !strings.Contains(d, "sys") {
			continue // cleaned, it can be neither /sys nor /sys/fs/cgroup
		}
		switch path.Clean(d) {
		case CgroupMountPoint:
			st.Mount = m
		case "/sys":
			st.PrivilegedLike = m.GetType() == "sysfs" && !slices.Contains(m.GetOptions(), "ro")
		}
	}
	if st.Mount != nil {
		st.ReadWrite = !slices.Contains(st.Mount.GetOptions(), "ro")
		st.Bind = isBind(st.Mount)
	}
	return st
}

func isBind(m *api.Mount) bool {
	if m.GetType() == "bind" {
		return true
	}
	for _, o := range m.GetOptions() {
		if o == "bind" || o == "rbind" {
			return true
		}
	}
	return false
}

// WritableMount returns the cgroup2 read-write mount for /sys/fs/cgroup. It
// keeps the runtime defaults nosuid, noexec, nodev and relatime. runc mounts
// it after entering the container's cgroup namespace, so the container sees
// its own cgroup as the root.
func WritableMount() *api.Mount {
	m := &api.Mount{}
	SetWritableMount(m)
	m.Options = slices.Clone(m.Options)
	return m
}

// SetWritableMount makes m the WritableMount without allocating: its
// Options are shared with every other mount set this way, so m must be
// read-only afterwards (as an adjustment handed to NRI is).
func SetWritableMount(m *api.Mount) {
	m.Destination, m.Type, m.Source = CgroupMountPoint, "cgroup2", "cgroup"
	m.Options = cgroupMountOptions[:len(cgroupMountOptions):len(cgroupMountOptions)]
}

// ReadOnlyMount returns old with rw replaced by ro, for a container that
// asked for ReadOnly while the runtime made its cgroup mount writable.
func ReadOnlyMount(old *api.Mount) *api.Mount {
	opts := make([]string, 0, len(old.GetOptions())+1)
	for _, o := range old.GetOptions() {
		if o != "rw" && o != "ro" {
			opts = append(opts, o)
		}
	}
	return &api.Mount{
		Destination: old.GetDestination(),
		Type:        old.GetType(),
		Source:      old.GetSource(),
		Options:     append(opts, "ro"),
	}
}

// CgroupNS describes the container's cgroup namespace entry.
type CgroupNS struct {
	// Present reports a cgroup namespace entry in the spec.
	Present bool
	// Path is the namespace the container joins ("" means a new one).
	Path string
}

// Private reports a new, unshared cgroup namespace.
func (n CgroupNS) Private() bool { return n.Present && n.Path == "" }

// Describe says in words what the entry means, for error messages.
func (n CgroupNS) Describe() string {
	switch {
	case !n.Present:
		return "no cgroup namespace in the spec (the container would share the runtime's)"
	case n.Path != "":
		return fmt.Sprintf("the spec joins the existing cgroup namespace %q", n.Path)
	}
	return "a private cgroup namespace"
}

// InspectCgroupNS finds the cgroup namespace entry of a container.
func InspectCgroupNS(ctr *api.Container) CgroupNS {
	var ns CgroupNS
	for _, n := range ctr.GetLinux().GetNamespaces() {
		if n.GetType() == "cgroup" {
			ns = CgroupNS{Present: true, Path: n.GetPath()}
		}
	}
	return ns
}

// Plan is the set of changes that make one container's cgroups writable:
// the WritableMount replaces (or adds) the mount at /sys/fs/cgroup.
type Plan struct {
	// RemoveOld is set when an existing mount at /sys/fs/cgroup must go.
	RemoveOld bool
	// AddCgroupNS is set when the spec lacks a cgroup namespace.
	AddCgroupNS bool
}

// PlanWritable computes the spec changes for a writable container whose
// mounts Inspect described as st. It refuses a container that joins someone
// else's cgroup namespace, since a cgroup2 mount there would expose that
// namespace's root, and one whose /sys/fs/cgroup is a bind of a host cgroup
// tree; both refusals are refusal.NoCgroupNS.
func PlanWritable(ctr *api.Container, st MountState) (Plan, error) {
	ns := InspectCgroupNS(ctr)
	if ns.Present && !ns.Private() {
		return Plan{}, refusal.New(refusal.NoCgroupNS, fmt.Errorf("%w: %s; drop the shared namespace or do not request writable cgroups",
			ErrNoPrivateCgroupNS, ns.Describe()))
	}
	if st.Mount != nil && st.Bind {
		return Plan{}, refusal.New(refusal.NoCgroupNS, fmt.Errorf("%w: source %q; remove that volume or do not request writable cgroups",
			ErrHostCgroupBind, st.Mount.GetSource()))
	}
	return Plan{
		RemoveOld:   st.Mount != nil,
		AddCgroupNS: !ns.Present,
	}, nil
}

// Apply records the plan in an NRI adjustment.
func (p Plan) Apply(adj *api.ContainerAdjustment) {
	if p.RemoveOld {
		adj.RemoveMount(CgroupMountPoint)
	}
	adj.AddMount(WritableMount())
	if p.AddCgroupNS {
		adj.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "cgroup"})
	}
}

// Hook builds the createRuntime hook entry for the cgdelegate-hook binary.
// OCI hooks take argv[0] in args.
func Hook(binary string, args []string, timeoutSeconds int) *api.Hook {
	argv := make([]string, 0, 1+len(args))
	return &api.Hook{
		Path:    binary,
		Args:    append(append(argv, path.Base(binary)), args...),
		Timeout: api.Int(timeoutSeconds),
	}
}

// HasHook reports whether the container already runs binary at the
// createRuntime stage (for example from a hooks.d directory).
func HasHook(ctr *api.Container, binary string) bool {
	for _, h := range ctr.GetHooks().GetCreateRuntime() {
		if h.GetPath() == binary {
			return true
		}
	}
	return false
}
