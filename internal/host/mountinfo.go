package host

// The mount-table check: whether the host's cgroup setup is safe for
// writable cgroups. The configured cgroup root must be a cgroup2 (unified)
// mount, and that mount must carry nsdelegate. ParseMountinfo is a one-off
// check of a table read from any io.Reader; Checker (checker.go) is the
// repeated, cheap check done on every container creation.

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"

	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

// Sentinel errors. They are always wrapped with the detail that was found
// and how to fix it, so match them with errors.Is.
var (
	// ErrNoCgroupMount means nothing is mounted at the configured cgroup root.
	ErrNoCgroupMount = errors.New("no cgroup mount at the cgroup root")
	// ErrCgroupV1 means the cgroup root is not a cgroup2 mount (legacy or
	// hybrid cgroup v1).
	ErrCgroupV1 = errors.New("cgroup v2 (unified) is required")
	// ErrNoNsdelegate means the cgroup2 mount lacks the nsdelegate option.
	ErrNoNsdelegate = errors.New("host cgroup2 mount lacks nsdelegate")
)

// Status is what the mount table says about the cgroup root.
type Status struct {
	// CgroupRoot is the configured cgroup root that was looked up.
	CgroupRoot string `json:"cgroupRoot"`
	// Mounted reports whether anything is mounted exactly at CgroupRoot.
	Mounted bool `json:"mounted"`
	// FSType is the file system type at CgroupRoot (cgroup2, tmpfs, cgroup).
	FSType string `json:"fsType,omitempty"`
	// Version is 2 for a cgroup2 root, 1 for a legacy or hybrid v1 setup and
	// 0 when nothing is mounted.
	Version int `json:"cgroupVersion"`
	// NsDelegate reports the nsdelegate super-block option on the cgroup2
	// root.
	NsDelegate bool `json:"nsdelegate"`
	// SuperOptions are the raw super-block options of the root mount.
	SuperOptions string `json:"superOptions,omitempty"`
	// Unified is the mount point of a cgroup2 hierarchy found elsewhere
	// (e.g. /sys/fs/cgroup/unified on hybrid hosts); informational.
	Unified string `json:"unifiedMount,omitempty"`
}

// Err returns nil when the status is safe for writable cgroups, or a
// refusal (refusal.CgroupV1, refusal.NoNsdelegate) wrapping one of the
// sentinels that names what was found and the fix.
func (s Status) Err() error {
	switch {
	case !s.Mounted:
		return refusal.New(refusal.CgroupV1, fmt.Errorf("%w: nothing is mounted at %q; mount cgroup2 there with -o nsdelegate or set cgroupRoot to the cgroup2 mount point",
			ErrNoCgroupMount, s.CgroupRoot))
	case s.Version != 2:
		detail := fmt.Sprintf("%q is a %s mount", s.CgroupRoot, s.FSType)
		if s.Unified != "" {
			detail += fmt.Sprintf(" (hybrid: cgroup2 only at %q)", s.Unified)
		}
		return refusal.New(refusal.CgroupV1, fmt.Errorf("%w: %s; boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2)", ErrCgroupV1, detail))
	case !s.NsDelegate:
		return refusal.New(refusal.NoNsdelegate, fmt.Errorf("%w: cgroup2 at %q has options %q; remount with nsdelegate (mount -o remount,nsdelegate %s from the initial namespaces; systemd sets it by default)",
			ErrNoNsdelegate, s.CgroupRoot, s.SuperOptions, s.CgroupRoot))
	}
	return nil
}

// setMount fills in the mount found at the cgroup root: its type and super
// options, the cgroup version and nsdelegate. The table (ParseMountinfo)
// and the kernel's answer about the root alone (mountProbe) both build the
// status here, so that they agree.
func (s *Status) setMount(fsType, superOptions string) {
	s.Mounted, s.FSType, s.SuperOptions, s.Version = true, fsType, superOptions, 1
	if fsType == "cgroup2" {
		s.Version, s.Unified = 2, ""
		s.NsDelegate = slices.Contains(strings.Split(superOptions, ","), "nsdelegate")
	}
}

// ParseMountinfo reads a mountinfo table from r and reports on cgroupRoot. The last
// mount at cgroupRoot wins, as it is the one on top of the stack.
func ParseMountinfo(r io.Reader, cgroupRoot string) (Status, error) {
	root := filepath.Clean(cgroupRoot)
	st := Status{CgroupRoot: root}
	mounts, err := mountinfo.GetMountsFromReader(r, func(i *mountinfo.Info) (skip, stop bool) {
		return i.Mountpoint != root && i.FSType != "cgroup2", false
	})
	if err != nil {
		return st, fmt.Errorf("parse mountinfo: %w", err)
	}
	var top *mountinfo.Info
	for _, m := range mounts {
		if m.Mountpoint != root {
			if m.FSType == "cgroup2" && st.Unified == "" {
				st.Unified = m.Mountpoint
			}
			continue
		}
		top = m
	}
	if top != nil {
		st.setMount(top.FSType, top.VFSOptions)
	}
	return st, nil
}
