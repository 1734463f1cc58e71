package inspect

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Mount is one /proc/<pid>/mountinfo entry, reduced to what the scenarios
// check.
type Mount struct {
	Root      string   // the mount's root within its filesystem
	Point     string   // mount point
	Options   []string // per-mount options (rw/ro, nosuid, ...)
	FSType    string
	Source    string
	SuperOpts []string // super-block options (nsdelegate, ...)
}

// ReadOnly reports whether the mount is read-only.
func (m Mount) ReadOnly() bool { return slices.Contains(m.Options, "ro") }

// HasSuperOpt reports whether the super-block options include opt.
func (m Mount) HasSuperOpt(opt string) bool { return slices.Contains(m.SuperOpts, opt) }

// String is a compact description for test messages.
func (m Mount) String() string {
	return fmt.Sprintf("%s on %s (root %s, %s, super %s)", m.FSType, m.Point, m.Root,
		strings.Join(m.Options, ","), strings.Join(m.SuperOpts, ","))
}

// ParseMountinfo reads mountinfo entries from r, in order.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	// The filter converts each entry and skips it, so that the parser's own
	// list stays empty.
	_, err := mountinfo.GetMountsFromReader(r, func(i *mountinfo.Info) (skip, stop bool) {
		out = append(out, fromInfo(i))
		return true, false
	})
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return out, nil
}

func fromInfo(i *mountinfo.Info) Mount {
	m := Mount{
		Root: i.Root, Point: i.Mountpoint, Options: strings.Split(i.Options, ","),
		FSType: i.FSType, Source: i.Source,
	}
	if i.VFSOptions != "" {
		m.SuperOpts = strings.Split(i.VFSOptions, ",")
	}
	return m
}

// TopMount returns the last (visible, top-most) mount at point.
func TopMount(mounts []Mount, point string) (Mount, bool) {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].Point == point {
			return mounts[i], true
		}
	}
	return Mount{}, false
}

// ByFSType returns every mount of the given filesystem type.
func ByFSType(mounts []Mount, fstype string) []Mount {
	var out []Mount
	for _, m := range mounts {
		if m.FSType == fstype {
			out = append(out, m)
		}
	}
	return out
}
