package delegate

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"
)

// Group is a cgroup under the root, made by Root.Create.
type Group struct {
	name string
	dir  string
	root *Root
	// made are the directories Create made, outermost first: Remove
	// removes those only.
	made []string
}

// Create makes the cgroup name (see CleanName) with its missing parents,
// enables the controllers the limits need on every level from the root
// down, and writes the limits. The root must hold no processes (Prepare).
// An existing cgroup is reused and gets the limits.
func (r *Root) Create(name string, l Limits) (*Group, error) {
	name, err := CleanName(name)
	if err != nil {
		return nil, err
	}
	if err := r.checkCpuset(l.Cpuset); err != nil {
		return nil, err
	}
	ctrls := l.controllers()
	g := &Group{name: name, dir: filepath.Join(r.dir, name), root: r}
	parent := ""
	for comp := range strings.SplitSeq(name, "/") {
		if err := r.enable(filepath.Join(r.dir, parent), ctrls); err != nil {
			return nil, g.undo(err)
		}
		parent = filepath.Join(parent, comp)
		made, err := r.mkdirAll(parent)
		g.made = append(g.made, made...)
		if err != nil {
			return nil, g.undo(err)
		}
	}
	for _, f := range l.files() {
		if err := writeFile(g.dir, f.file, f.value); err != nil {
			return nil, g.undo(err)
		}
	}
	return g, nil
}

// undo removes what a failed Create made, and returns err.
func (g *Group) undo(err error) error {
	if rmErr := g.Remove(); rmErr != nil {
		return errors.Join(err, rmErr)
	}
	return err
}

// checkCpuset checks set lies inside the root's cpuset.cpus.effective.
func (r *Root) checkCpuset(set cpuset.CPUSet) error {
	if set.IsEmpty() {
		return nil
	}
	s, err := readFile(r.dir, fileCpusetEffective)
	if err != nil {
		return fmt.Errorf("%w: --cpuset %s needs the cpuset controller: %w", ErrController, set, err)
	}
	own, err := cpuset.Parse(s)
	if err != nil {
		return fmt.Errorf("parse %s %q: %w", filepath.Join(r.dir, fileCpusetEffective), s, err)
	}
	if !set.IsSubsetOf(own) {
		return fmt.Errorf("%w: --cpuset %s is not inside the container's CPUs %s (%s); pick CPUs from %s",
			ErrBadLimit, set, own, filepath.Join(r.dir, fileCpusetEffective), own)
	}
	return nil
}

// Name is the group's path relative to the root.
func (g *Group) Name() string { return g.name }

// Dir is the group's directory.
func (g *Group) Dir() string { return g.dir }

// Start starts cmd inside the group: directly, with CLONE_INTO_CGROUP
// (SysProcAttr.UseCgroupFD), so that not one instruction of it runs
// elsewhere. Where the kernel or a seccomp profile refuses that (Linux
// before 5.7, no clone3, not a cgroup2 directory) it starts cmd normally and
// moves it by writing its pid to cgroup.procs; it then runs briefly in the
// caller's cgroup. cmd must not have been started; Start sets
// cmd.SysProcAttr.
func (g *Group) Start(cmd *exec.Cmd) error {
	// A failed Start can not be retried on the same Cmd; a copy of the
	// unstarted one can, as long as the failed Start closed nothing the
	// copy needs: only a kernel or seccomp that refuses clone3 gets here.
	unstarted := *cmd
	err := g.startInto(cmd)
	if err == nil || (!errors.Is(err, errNotCgroup2) && !intoCgroupRefused(err)) {
		return err
	}
	*cmd = unstarted
	return g.startAndMove(cmd)
}

// errNotCgroup2 means the group's directory is not on cgroup2 (a test
// tree): CLONE_INTO_CGROUP can not work there.
var errNotCgroup2 = errors.New("not a cgroup2 directory")

// startInto starts cmd with CLONE_INTO_CGROUP, without a fallback.
func (g *Group) startInto(cmd *exec.Cmd) error {
	dirFD, err := unix.Open(g.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open cgroup %s: %w", g.dir, err)
	}
	defer unix.Close(dirFD)
	var sfs unix.Statfs_t
	if unix.Fstatfs(dirFD, &sfs) != nil || sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%w: %s", errNotCgroup2, g.dir)
	}
	attr := new(syscall.SysProcAttr)
	if cmd.SysProcAttr != nil {
		*attr = *cmd.SysProcAttr
	}
	attr.UseCgroupFD, attr.CgroupFD = true, dirFD
	cmd.SysProcAttr = attr
	return cmd.Start()
}

// intoCgroupRefused reports whether a start with CLONE_INTO_CGROUP failed
// because the kernel, seccomp or the directory does not allow it.
func intoCgroupRefused(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.EBADF) || errors.Is(err, unix.EOPNOTSUPP)
}

// startAndMove is Start's fallback: start, then write the pid to
// cgroup.procs. A process that can not be moved is killed.
func (g *Group) startAndMove(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := cgroups.WriteCgroupProc(g.dir, cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("move process %d into %s: %w%s", cmd.Process.Pid, filepath.Join(g.dir, fileProcs), err, hint(err))
	}
	return nil
}

// Remove removes the cgroups Create made, innermost first, with any
// sub-cgroups made in them since. Processes still inside are killed
// (cgroup.kill) when they do not leave on their own. A cgroup Create only
// reused is left in place.
func (g *Group) Remove() error {
	var errs []error
	for i, dir := range slices.Backward(g.made) {
		own := i == len(g.made)-1
		err := g.root.remove(dir)
		if own && errors.Is(err, unix.EBUSY) && writeFile(dir, fileKill, "1") == nil {
			err = g.root.remove(dir)
		}
		switch {
		case err == nil:
		case !own && (errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOTEMPTY)):
			// A parent that now holds other groups too: keep it.
		default:
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
		}
	}
	g.made = nil
	return errors.Join(errs...)
}
