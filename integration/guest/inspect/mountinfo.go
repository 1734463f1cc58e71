package inspect

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
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

// unescape undoes mountinfo's octal escapes (\040 for space, ...).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseMountinfo reads mountinfo entries from r, in order.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			return nil, fmt.Errorf("mountinfo: no separator in %q", line)
		}
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if len(f) < 6 || len(g) < 2 {
			return nil, fmt.Errorf("mountinfo: short line %q", line)
		}
		m := Mount{
			Root: unescape(f[3]), Point: unescape(f[4]), Options: strings.Split(f[5], ","),
			FSType: g[0], Source: unescape(g[1]),
		}
		if len(g) > 2 {
			m.SuperOpts = strings.Split(g[2], ",")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return out, nil
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
