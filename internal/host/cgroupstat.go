package host

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// FileStat is a cgroup's cgroup.stat.
const FileStat = "cgroup.stat"

// CgroupStat is what cgroup.stat counts below a cgroup. A dying cgroup is
// one removed (rmdir) that the kernel still keeps, mostly for memory still
// charged to it (page cache, kernel objects); cgroup.max.descendants counts
// only the live ones.
type CgroupStat struct {
	Descendants      int `json:"descendants"`
	DyingDescendants int `json:"dyingDescendants"`
}

// ParseCgroupStat reads nr_descendants and nr_dying_descendants from a
// cgroup.stat; other keys are skipped. A file without both keys, or with a
// value that is not a count, is an error naming the key and the value.
func ParseCgroupStat(r io.Reader) (CgroupStat, error) {
	var st CgroupStat
	var seen int
	s := bufio.NewScanner(r)
	for s.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(s.Text()), " ")
		var dst *int
		switch key {
		case "nr_descendants":
			dst = &st.Descendants
		case "nr_dying_descendants":
			dst = &st.DyingDescendants
		default:
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if !ok || err != nil || n < 0 {
			return CgroupStat{}, fmt.Errorf("%s: %s %q is not a count", FileStat, key, val)
		}
		*dst = n
		seen++
	}
	if err := s.Err(); err != nil {
		return CgroupStat{}, fmt.Errorf("read %s: %w", FileStat, err)
	}
	if seen < 2 {
		return CgroupStat{}, fmt.Errorf("%s: want nr_descendants and nr_dying_descendants", FileStat)
	}
	return st, nil
}

// Stat reads the cgroup.stat of the cgroup at rel.
func (f *FS) Stat(rel string) (CgroupStat, error) {
	dir := f.Dir(rel)
	fh, err := cgroups.OpenFile(dir, FileStat, unix.O_RDONLY)
	if err != nil {
		return CgroupStat{}, fmt.Errorf("open %s in %q: %w", FileStat, dir, err)
	}
	defer fh.Close()
	st, err := ParseCgroupStat(fh)
	if err != nil {
		return CgroupStat{}, fmt.Errorf("%q: %w", dir, err)
	}
	return st, nil
}
