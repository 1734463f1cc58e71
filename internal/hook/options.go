package hook

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/host"
)

// Options say where the hook finds the host and which bounds it demands.
// Every path is absolute; tests point them at temp trees.
type Options struct {
	// CgroupRoot is the host cgroup2 mount point (/sys/fs/cgroup).
	CgroupRoot string
	// MountinfoPath is the host mount table (/proc/1/mountinfo).
	MountinfoPath string
	// ProcRoot is the host /proc, for the container init's namespaces and
	// cgroup.
	ProcRoot string
	// SysfsRoot is the host /sys, for kernel/cgroup/delegate.
	SysfsRoot string
	// Limit is the loosest pod cgroup bound accepted: the pod cgroup's
	// cgroup.max.descendants and cgroup.max.depth must be at or below it.
	Limit host.Bounds
	// PodCgroup is the pod cgroup, relative to CgroupRoot, in either
	// driver's form ("/kubepods/burstable/pod<uid>" or
	// "kubepods-burstable-pod<uid>.slice"). Empty means the parent of the
	// container's cgroup.
	PodCgroup string
}

// DefaultOptions returns the real host paths and the default bounds.
func DefaultOptions() Options {
	return OptionsFromConfig(config.Default())
}

// OptionsFromConfig takes the host paths and node-level bounds from a
// plugin config.
func OptionsFromConfig(c config.Config) Options {
	return Options{
		CgroupRoot:    c.CgroupRoot,
		MountinfoPath: c.MountinfoPath,
		ProcRoot:      c.ProcRoot,
		SysfsRoot:     c.SysfsRoot,
		Limit:         host.Bounds{Descendants: c.MaxDescendants, Depth: c.MaxDepth},
	}
}

// RegisterFlags binds the hook's command-line flags to o; the current
// values of o are the defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.CgroupRoot, "cgroup-root", o.CgroupRoot, "host cgroup2 mount point")
	fs.StringVar(&o.MountinfoPath, "mountinfo", o.MountinfoPath, "host mount table to check for nsdelegate")
	fs.StringVar(&o.ProcRoot, "proc", o.ProcRoot, "host /proc")
	fs.StringVar(&o.SysfsRoot, "sysfs", o.SysfsRoot, "host /sys (for kernel/cgroup/delegate)")
	fs.IntVar(&o.Limit.Descendants, "max-descendants", o.Limit.Descendants, "loosest cgroup.max.descendants accepted on the pod cgroup")
	fs.IntVar(&o.Limit.Depth, "max-depth", o.Limit.Depth, "loosest cgroup.max.depth accepted on the pod cgroup")
	fs.StringVar(&o.PodCgroup, "pod-cgroup", o.PodCgroup, "pod cgroup relative to the cgroup root, cgroupfs or systemd form (default: parent of the container's cgroup)")
}

// Validate reports every problem in o at once, each wrapping ErrBadOptions.
func (o Options) Validate() error {
	var errs []error
	for _, p := range []struct{ name, v string }{
		{"cgroup-root", o.CgroupRoot},
		{"mountinfo", o.MountinfoPath},
		{"proc", o.ProcRoot},
		{"sysfs", o.SysfsRoot},
	} {
		if !filepath.IsAbs(p.v) {
			errs = append(errs, fmt.Errorf("%w: %s: %q is not an absolute path", ErrBadOptions, p.name, p.v))
		}
	}
	if o.Limit.Descendants < 1 {
		errs = append(errs, fmt.Errorf("%w: max-descendants: %d must be at least 1", ErrBadOptions, o.Limit.Descendants))
	}
	if o.Limit.Depth < 1 {
		errs = append(errs, fmt.Errorf("%w: max-depth: %d must be at least 1", ErrBadOptions, o.Limit.Depth))
	}
	if o.PodCgroup != "" {
		if _, err := host.PodPath(o.PodCgroup); err != nil {
			errs = append(errs, fmt.Errorf("%w: pod-cgroup: %w", ErrBadOptions, err))
		}
	}
	return errors.Join(errs...)
}
