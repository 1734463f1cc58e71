package host

// FS is the only code in cgdelegate that touches the host cgroup tree.
// Every read, write and chown goes through it: it joins paths safely under
// an injected root and opens files with github.com/opencontainers/cgroups
// (openat2 RESOLVE_BENEATH under /sys/fs/cgroup, and an fstatfs check that
// the file is on cgroupfs elsewhere). Tests point it at a temp tree and set
// cgroups.TestMode.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/systemd"
	"golang.org/x/sys/unix"
)

// Sentinel errors, wrapped with detail.
var (
	// ErrBadPath means a cgroup path from the runtime could not be used.
	ErrBadPath = errors.New("invalid cgroup path")
	// ErrNotFound means a cgroup directory does not exist.
	ErrNotFound = errors.New("cgroup not found")
	// ErrBoundsMissing means the pod bounds are not in place.
	ErrBoundsMissing = errors.New("pod cgroup bounds not in place")
)

// Bound file names.
const (
	FileMaxDescendants = "cgroup.max.descendants"
	FileMaxDepth       = "cgroup.max.depth"
)

// Unlimited is the Bounds value for "max".
const Unlimited = -1

// FS is a cgroup v2 tree rooted at an injected directory.
type FS struct {
	root         string
	delegateFile string
}

// NewFS returns an FS for the cgroup tree at cgroupRoot (normally
// /sys/fs/cgroup). sysfsRoot (normally /sys) is where the kernel lists
// delegatable files in kernel/cgroup/delegate.
func NewFS(cgroupRoot, sysfsRoot string) *FS {
	return &FS{
		root:         filepath.Clean(cgroupRoot),
		delegateFile: filepath.Join(sysfsRoot, "kernel", "cgroup", "delegate"),
	}
}

// Root returns the cgroup root directory.
func (f *FS) Root() string { return f.root }

// Dir returns the absolute directory of the cgroup at rel, a path relative
// to the root. rel is cleaned as if it were absolute, so ".." can not climb
// out of the root.
func (f *FS) Dir(rel string) string {
	return filepath.Join(f.root, filepath.Clean("/"+rel))
}

// Exists reports, as an error wrapping ErrNotFound, whether the cgroup at
// rel is missing.
func (f *FS) Exists(rel string) error {
	dir := f.Dir(rel)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %q", ErrNotFound, dir)
	case err != nil:
		return fmt.Errorf("stat cgroup %q: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%w: %q is not a directory", ErrNotFound, dir)
	}
	return nil
}

// Read returns the trimmed content of file in the cgroup at rel.
func (f *FS) Read(rel, file string) (string, error) {
	dir := f.Dir(rel)
	data, err := cgroups.ReadFile(dir, file)
	if err != nil {
		return "", fmt.Errorf("read %s in %q: %w", file, dir, err)
	}
	return strings.TrimSpace(data), nil
}

// Write writes data to file in the cgroup at rel.
func (f *FS) Write(rel, file, data string) error {
	dir := f.Dir(rel)
	if err := cgroups.WriteFile(dir, file, data); err != nil {
		return fmt.Errorf("set %s=%q on %q: %w", file, data, dir, err)
	}
	return nil
}

// PodPath resolves a pod's cgroup parent, as the runtime reports it in
// PodSandbox.Linux.CgroupParent, to a path relative to the cgroup root.
//
//   - systemd driver: "kubepods-burstable-pod<uid>.slice" expands to
//     "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice";
//   - cgroupfs driver: "/kubepods/burstable/pod<uid>" is used as is.
func PodPath(cgroupParent string) (string, error) {
	p := strings.TrimSpace(cgroupParent)
	if p == "" {
		return "", fmt.Errorf("%w: empty cgroup parent", ErrBadPath)
	}
	if p == ".." || strings.HasPrefix(p, "../") || strings.HasSuffix(p, "/..") || strings.Contains(p, "/../") {
		return "", fmt.Errorf("%w: cgroup parent %q contains \"..\"", ErrBadPath, cgroupParent)
	}
	if !strings.Contains(p, "/") && strings.HasSuffix(p, ".slice") {
		expanded, err := systemd.ExpandSlice(p)
		if err != nil {
			return "", fmt.Errorf("%w: systemd slice %q: %w", ErrBadPath, cgroupParent, err)
		}
		return expanded, nil
	}
	if strings.HasPrefix(p, "/") {
		return path.Clean(p), nil // no allocation when p is clean already
	}
	return path.Clean("/" + p), nil
}

// ContainerPath resolves a container's cgroups path, as the runtime reports
// it in Container.Linux.CgroupsPath, to a path relative to the cgroup root.
//
//   - systemd driver, "slice:prefix:name" (runc's format):
//     "kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>" is
//     "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope";
//     a name ending in ".slice" is that slice itself;
//   - cgroupfs driver: "/kubepods/besteffort/pod<uid>/<id>" is used as is.
func ContainerPath(cgroupsPath string) (string, error) {
	p := strings.TrimSpace(cgroupsPath)
	if !strings.Contains(p, ":") {
		rel, err := PodPath(p)
		if err != nil {
			return "", fmt.Errorf("container cgroups path: %w", err)
		}
		return rel, nil
	}
	parts := strings.Split(p, ":")
	if len(parts) != 3 || parts[2] == "" || strings.Contains(parts[2], "/") || parts[2] == ".." {
		return "", fmt.Errorf("%w: cgroups path %q: want slice:prefix:name", ErrBadPath, cgroupsPath)
	}
	slice, prefix, name := parts[0], parts[1], parts[2]
	if slice == "" {
		slice = "system.slice" // runc's default parent
	}
	if strings.Contains(slice, "/") || !strings.HasSuffix(slice, ".slice") {
		return "", fmt.Errorf("%w: cgroups path %q: slice %q is not a systemd slice", ErrBadPath, cgroupsPath, slice)
	}
	parent, err := PodPath(slice)
	if err != nil {
		return "", fmt.Errorf("cgroups path %q: %w", cgroupsPath, err)
	}
	unit := name
	if !strings.HasSuffix(name, ".slice") {
		unit = prefix + "-" + name + ".scope" // as runc names it, even with no prefix
	}
	return path.Join(parent, unit), nil
}

// Cpuset file names.
const (
	FileCpusetCPUs = "cpuset.cpus"
	FileCpusetMems = "cpuset.mems"
)

// SetCpuset writes cpuset.mems, then cpuset.cpus, of the cgroup at rel.
// The kernel applies them to the cgroup's tasks and descendants at once.
func (f *FS) SetCpuset(rel, cpus, mems string) error {
	if err := f.Write(rel, FileCpusetMems, mems); err != nil {
		return err
	}
	return f.Write(rel, FileCpusetCPUs, cpus)
}

// Bounds are a cgroup's cgroup.max.descendants and cgroup.max.depth.
// Unlimited (-1) stands for "max".
type Bounds struct {
	Descendants int `json:"maxDescendants"`
	Depth       int `json:"maxDepth"`
}

func (b Bounds) String() string {
	return fmt.Sprintf("%s=%s %s=%s", FileMaxDescendants, limitString(b.Descendants), FileMaxDepth, limitString(b.Depth))
}

func limitString(v int) string {
	if v < 0 {
		return "max"
	}
	return strconv.Itoa(v)
}

func parseLimit(s string) (int, error) {
	if s == "max" {
		return Unlimited, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("not a limit: %q", s)
	}
	return v, nil
}

// ReadBounds reads the bounds of the cgroup at rel.
func (f *FS) ReadBounds(rel string) (Bounds, error) {
	var b Bounds
	for _, x := range []struct {
		file string
		dst  *int
	}{{FileMaxDescendants, &b.Descendants}, {FileMaxDepth, &b.Depth}} {
		s, err := f.Read(rel, x.file)
		if err != nil {
			return Bounds{}, err
		}
		v, err := parseLimit(s)
		if err != nil {
			return Bounds{}, fmt.Errorf("%s in %q: %w", x.file, f.Dir(rel), err)
		}
		*x.dst = v
	}
	return b, nil
}

// tighter returns the lower of two limits, Unlimited being the highest.
func tighter(a, b int) int {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	case a < b:
		return a
	}
	return b
}

// ApplyBounds makes the cgroup at rel at least as tight as want: a lower
// value already there (set by a kubelet that implements KEP-5474, or by an
// earlier call) is kept. It returns the bounds in force afterwards. Nothing
// is written when the cgroup is already tight enough, nor on a cgroup that
// is not a pod's own (FS.CheckPodCgroup, an error wrapping
// ErrSharedCgroup).
func (f *FS) ApplyBounds(rel string, want Bounds) (Bounds, error) {
	if want.Descendants < 0 || want.Depth < 0 {
		return Bounds{}, fmt.Errorf("apply bounds on %q: %s is unbounded", f.Dir(rel), want)
	}
	if err := f.Exists(rel); err != nil {
		return Bounds{}, err
	}
	if err := f.CheckPodCgroup(rel); err != nil {
		return Bounds{}, err
	}
	have, err := f.ReadBounds(rel)
	if err != nil {
		return Bounds{}, err
	}
	got := Bounds{Descendants: tighter(have.Descendants, want.Descendants), Depth: tighter(have.Depth, want.Depth)}
	if got.Descendants != have.Descendants {
		if err := f.Write(rel, FileMaxDescendants, strconv.Itoa(got.Descendants)); err != nil {
			return Bounds{}, err
		}
	}
	if got.Depth != have.Depth {
		if err := f.Write(rel, FileMaxDepth, strconv.Itoa(got.Depth)); err != nil {
			return Bounds{}, err
		}
	}
	return got, nil
}

// CheckBounds returns an error wrapping ErrBoundsMissing unless the cgroup
// at rel has bounds no looser than limit.
func (f *FS) CheckBounds(rel string, limit Bounds) error {
	have, err := f.ReadBounds(rel)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBoundsMissing, err)
	}
	if tighter(have.Descendants, limit.Descendants) != have.Descendants || tighter(have.Depth, limit.Depth) != have.Depth {
		return fmt.Errorf("%w: %q has %s, want at most %s", ErrBoundsMissing, f.Dir(rel), have, limit)
	}
	return nil
}

// defaultDelegateFiles are the files a delegatee must own when the kernel
// does not list them in /sys/kernel/cgroup/delegate.
var defaultDelegateFiles = []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads"}

// DelegateFiles returns the files of a cgroup that a delegatee must own:
// the kernel's list from <sysfs>/kernel/cgroup/delegate, or the defaults
// when that file is absent.
func (f *FS) DelegateFiles() ([]string, error) {
	fh, err := os.Open(f.delegateFile)
	if errors.Is(err, os.ErrNotExist) {
		return append([]string(nil), defaultDelegateFiles...), nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", f.delegateFile, err)
	}
	defer fh.Close()
	files, err := parseDelegate(fh)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", f.delegateFile, err)
	}
	return files, nil
}

func parseDelegate(r io.Reader) ([]string, error) {
	var files []string
	s := bufio.NewScanner(r)
	for s.Scan() {
		name := strings.TrimSpace(s.Text())
		if name == "" {
			continue
		}
		if strings.ContainsRune(name, '/') || name == "." || name == ".." {
			return nil, fmt.Errorf("%w: delegate entry %q", ErrBadPath, name)
		}
		files = append(files, name)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return append([]string(nil), defaultDelegateFiles...), nil
	}
	return files, nil
}

// Delegate hands the cgroup at rel to uid:gid, the way the systemd driver
// does for user-namespaced containers: the directory itself and its
// delegatable files change owner. Files the kernel lists but this cgroup
// lacks are skipped.
func (f *FS) Delegate(rel string, uid, gid int) error {
	if err := f.Exists(rel); err != nil {
		return err
	}
	files, err := f.DelegateFiles()
	if err != nil {
		return err
	}
	dir := f.Dir(rel)
	if err := f.chown(filepath.Dir(dir), filepath.Base(dir), uid, gid); err != nil {
		return err
	}
	for _, name := range files {
		err := f.chown(dir, name, uid, gid)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *FS) chown(dir, name string, uid, gid int) error {
	fh, err := cgroups.OpenFile(dir, name, unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("open %s in %q for chown: %w", name, dir, err)
	}
	defer fh.Close()
	if err := fh.Chown(uid, gid); err != nil {
		return fmt.Errorf("chown %s in %q to %d:%d: %w", name, dir, uid, gid, err)
	}
	return nil
}

// ParseProcCgroup returns the cgroup v2 path from a /proc/<pid>/cgroup
// table ("0::/path").
func ParseProcCgroup(r io.Reader) (string, error) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "0::"); ok {
			return rest, nil
		}
	}
	if err := s.Err(); err != nil {
		return "", fmt.Errorf("read cgroup table: %w", err)
	}
	return "", fmt.Errorf("%w: no cgroup v2 (0::) entry", ErrNotFound)
}
