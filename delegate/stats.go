package delegate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stats are a cgroup's limits and usage, as its files say. A file the
// cgroup lacks (its controller is not enabled) leaves its field empty.
type Stats struct {
	// Name is the path relative to the root.
	Name string
	// Limits, as written in cpu.max, memory.max, pids.max, cpuset.cpus.
	CPUMax, MemoryMax, PidsMax, Cpuset string
	// CPUUsageUsec is usage_usec of cpu.stat.
	CPUUsageUsec uint64
	// MemoryCurrent is memory.current, in bytes.
	MemoryCurrent uint64
	// PidsCurrent is pids.current.
	PidsCurrent uint64
	// OOMKills is oom_kill of memory.events.
	OOMKills uint64
}

// Stats reads the group's limits and usage.
func (g *Group) Stats() (Stats, error) { return readStats(g.dir, g.name) }

// OOMKills returns oom_kill of the group's memory.events: how many of its
// processes the OOM killer killed. It is 0 without the memory controller.
func (g *Group) OOMKills() (uint64, error) {
	return keyedValue(g.dir, "memory.events", "oom_kill")
}

// Tree returns the stats of every cgroup under the root, in lexical order.
func (r *Root) Tree() ([]Stats, error) {
	var out []Stats
	err := filepath.WalkDir(r.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || path == r.dir {
			return nil
		}
		rel, err := filepath.Rel(r.dir, path)
		if err != nil {
			return err
		}
		s, err := readStats(path, rel)
		out = append(out, s)
		return err
	})
	if err != nil {
		return out, fmt.Errorf("list cgroups under %s: %w", r.dir, err)
	}
	return out, nil
}

func readStats(dir, name string) (Stats, error) {
	s := Stats{Name: name}
	var errs []error
	for _, f := range []struct {
		file string
		to   *string
	}{{"cpu.max", &s.CPUMax}, {"memory.max", &s.MemoryMax}, {"pids.max", &s.PidsMax}, {"cpuset.cpus", &s.Cpuset}} {
		v, err := optional(readFile(dir, f.file))
		*f.to = v
		errs = append(errs, err)
	}
	for _, f := range []struct {
		file, key string
		to        *uint64
	}{{"cpu.stat", "usage_usec", &s.CPUUsageUsec}, {"memory.events", "oom_kill", &s.OOMKills}} {
		v, err := keyedValue(dir, f.file, f.key)
		*f.to = v
		errs = append(errs, err)
	}
	for _, f := range []struct {
		file string
		to   *uint64
	}{{"memory.current", &s.MemoryCurrent}, {"pids.current", &s.PidsCurrent}} {
		v, err := optional(readFile(dir, f.file))
		if err == nil && v != "" {
			*f.to, err = parseUint(dir, f.file, v)
		}
		errs = append(errs, err)
	}
	return s, errors.Join(errs...)
}

// optional turns a missing file into an empty value.
func optional(v string, err error) (string, error) {
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return v, err
}

// keyedValue reads key from a flat keyed file ("oom_kill 2"); a missing
// file or key is 0.
func keyedValue(dir, file, key string) (uint64, error) {
	s, err := optional(readFile(dir, file))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			return parseUint(dir, file, v)
		}
	}
	return 0, nil
}

func parseUint(dir, file, v string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s %q: %w", filepath.Join(dir, file), v, err)
	}
	return n, nil
}
