package fakehost

import (
	"fmt"
	"strings"
)

// MountTable is a shape of the host mount table around the cgroup root.
type MountTable int

// The mount tables a host can have.
const (
	// Nsdelegate is cgroup2 at the cgroup root with nsdelegate, as systemd
	// mounts it: the only safe table.
	Nsdelegate MountTable = iota
	// NoNsdelegate is the same cgroup2 mount without nsdelegate.
	NoNsdelegate
	// CgroupV1 is a hybrid cgroup v1 host: tmpfs at the cgroup root, a v1
	// controller, and cgroup2 (with nsdelegate) only at <root>/unified.
	CgroupV1
	// NoCgroupMount has nothing mounted at the cgroup root.
	NoCgroupMount
)

// Remount rewrites the mount table to m, as a remount would.
func (h *Host) Remount(m MountTable) error {
	root := escapePath(h.CgroupRoot)
	table := "24 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
	switch m {
	case Nsdelegate:
		table += cgroup2Line(root, "rw,nsdelegate,memory_recursiveprot")
	case NoNsdelegate:
		table += cgroup2Line(root, "rw,memory_recursiveprot")
	case CgroupV1:
		table += fmt.Sprintf("30 24 0:26 / %[1]s ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"+
			"31 30 0:27 / %[1]s/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"+
			"32 30 0:28 / %[1]s/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory\n", root)
	case NoCgroupMount:
	default:
		return fmt.Errorf("fake host: unknown mount table %d", m)
	}
	return h.WriteFile(h.Mountinfo, table)
}

func cgroup2Line(root, superOpts string) string {
	return fmt.Sprintf("35 24 0:30 / %s rw,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 %s\n", root, superOpts)
}

// escapePath escapes a path as the kernel does in mountinfo.
var escapePath = strings.NewReplacer(` `, `\040`, "\t", `\011`, "\n", `\012`, `\`, `\134`).Replace
