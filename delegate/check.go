package delegate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Report is what Check found.
type Report struct {
	// Problems say why delegation is not available, each with what a pod
	// author can change. None means it is available.
	Problems []string
	// Notes are facts worth knowing: the controllers, the budget left,
	// whether the root still holds processes.
	Notes []string
}

// OK reports whether delegation is available.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Check says whether delegation is available here and, if not, why, in
// words a pod author can act on: no cgroup v2, a read-only mount, no
// private cgroup namespace. It also reports the pod budget cgdelegate
// passed in EnvMaxDescendants and EnvMaxDepth, and the container's AppArmor
// profile and seccomp mode, with what to change when a runtime's default
// AppArmor profile denies the mounts of a nested runtime or systemd
// (Confinement.MountsDenied: a note, as cgroup delegation works under it).
func (r *Root) Check() Report {
	var rep Report
	problem := func(format string, a ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, a...)) }
	note := func(format string, a ...any) { rep.Notes = append(rep.Notes, fmt.Sprintf(format, a...)) }

	mounts, err := r.mounts()
	switch {
	case err != nil:
		problem("can not read the mount table: %v", err)
		return rep
	case len(mounts) == 0:
		problem("nothing is mounted at %s: the container has no cgroup filesystem; use a runtime that mounts it (containerd, CRI-O)", r.dir)
		return rep
	}
	m := mounts[len(mounts)-1] // the one on top
	if m.FSType != "cgroup2" {
		problem("%s is cgroup v1 (%s): delegation needs cgroup v2; schedule the pod on a node booted with the unified hierarchy (systemd.unified_cgroup_hierarchy=1)", r.dir, m.FSType)
		return rep
	}
	if slices.Contains(strings.Split(m.Options, ","), "ro") {
		problem("%s is mounted read-only: add the annotation %s: \"Writable\" to the pod (metadata.annotations) on a node running cgdelegate", r.dir, writableAnnotation)
	}
	if path, err := r.ownCgroup(); err != nil {
		problem("%v", err)
	} else if strings.Count(strings.Trim(path, "/"), "/") >= 1 {
		problem("no private cgroup namespace: this process sits at %q in the host's hierarchy (%s): the container would write the node's cgroups; run it with a private cgroup namespace (cgdelegate adds one to writable containers; do not share the host's)",
			path, filepath.Join(r.proc, "self", "cgroup"))
	}
	if ctrls, err := r.Controllers(); err != nil {
		problem("%v", err)
	} else {
		note("controllers available: %s", strings.Join(ctrls, " "))
	}
	if pids, err := r.Procs(); err == nil && len(pids) > 0 {
		note("the root holds %d processes: cgdelegate-init moves them into a leaf before enabling controllers", len(pids))
	}
	r.budget(note)
	r.confinement(note)
	return rep
}

// confinement notes the AppArmor profile and seccomp mode, and what to
// change when the profile denies mounts.
func (r *Root) confinement(note func(string, ...any)) {
	c, err := r.Confinement()
	if err != nil {
		note("%s (%v)", c, err)
		return
	}
	note("%s", c)
	if c.MountsDenied() {
		note("%s", c.MountsDeniedHint())
	}
}

// mounts returns the mounts at the root, in mount order.
func (r *Root) mounts() ([]*mountinfo.Info, error) {
	path := filepath.Join(r.proc, "self", "mountinfo")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	ms, err := mountinfo.GetMountsFromReader(f, mountinfo.SingleEntryFilter(r.dir))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return ms, nil
}

// ownCgroup returns this process's cgroup v2 path from /proc/self/cgroup.
func (r *Root) ownCgroup() (string, error) {
	path := filepath.Join(r.proc, "self", "cgroup")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s has no cgroup v2 entry (0::): the node runs cgroup v1; schedule the pod on a cgroup v2 node", path)
}

// budget notes the pod bounds cgdelegate passed and what this container
// uses of them.
func (r *Root) budget(note func(string, ...any)) {
	desc, ok := r.lookupEnv(EnvMaxDescendants)
	if !ok {
		note("%s is not set: cgdelegate did not make this container writable, so the pod budget is unknown", EnvMaxDescendants)
		return
	}
	used, err := r.descendants()
	if err != nil {
		note("pod budget: cgroup.max.descendants=%s, cgroup.max.depth=%s (counting this container's cgroups failed: %v)", desc, r.env(EnvMaxDepth), err)
		return
	}
	left := "?"
	if n, err := strconv.Atoi(desc); err == nil {
		left = strconv.Itoa(max(n-used, 0))
	}
	note("pod budget: cgroup.max.descendants=%s, cgroup.max.depth=%s; this container uses %d, so at most %s are left (every container of the pod draws on the same budget)",
		desc, r.env(EnvMaxDepth), used, left)
}

// descendants counts the cgroups under the root.
func (r *Root) descendants() (int, error) {
	n := 0
	err := filepath.WalkDir(r.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != r.dir {
			n++
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, err
	}
	return n, nil
}
