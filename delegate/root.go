package delegate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// Options says where the container's cgroup tree and /proc are.
type Options struct {
	// CgroupRoot is the delegated cgroup root, normally /sys/fs/cgroup.
	CgroupRoot string
	// Proc is the proc filesystem, normally /proc.
	Proc string
	// LookupEnv reads the environment (os.LookupEnv); nil reads nothing.
	// Check and the budget errors read EnvMaxDescendants and EnvMaxDepth.
	LookupEnv func(string) (string, bool)
}

// DefaultOptions are the paths inside a container.
func DefaultOptions() Options {
	return Options{CgroupRoot: "/sys/fs/cgroup", Proc: "/proc", LookupEnv: os.LookupEnv}
}

// The env vars cgdelegate adds to a writable container: its pod's cgroup
// bounds, which the container cannot read itself (the pod cgroup is above
// its cgroup namespace root).
const (
	EnvMaxDescendants = "CGDELEGATE_MAX_DESCENDANTS"
	EnvMaxDepth       = "CGDELEGATE_MAX_DEPTH"
)

// DefaultLeaf is where Prepare moves the root's processes.
const DefaultLeaf = "init"

// DefaultControllers are the controllers Prepare enables when asked for
// none, those of them the root has.
var DefaultControllers = []string{"cpu", "cpuset", "memory", "pids"}

// Interface file names.
const (
	fileControllers     = "cgroup.controllers"
	fileSubtreeControl  = "cgroup.subtree_control"
	fileProcs           = "cgroup.procs"
	fileKill            = "cgroup.kill"
	fileCpusetEffective = "cpuset.cpus.effective"
)

// Root is the delegated cgroup root of the container.
type Root struct {
	dir       string
	proc      string
	lookupEnv func(string) (string, bool)
	// mkdir and remove are the directory operations (testmode.go); tests
	// replace them to inject errors.
	mkdir  func(string) error
	remove func(string) error
}

// New returns the Root described by o.
func New(o Options) *Root {
	lookup := o.LookupEnv
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	return &Root{
		dir:       filepath.Clean(o.CgroupRoot),
		proc:      o.Proc,
		lookupEnv: lookup,
		mkdir:     mkdirCgroup,
		remove:    removeCgroup,
	}
}

// Dir is the root directory.
func (r *Root) Dir() string { return r.dir }

// readFile reads one interface file, trimmed.
func readFile(dir, file string) (string, error) {
	s, err := cgroups.ReadFile(dir, file)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", filepath.Join(dir, file), err)
	}
	return strings.TrimSpace(s), nil
}

// writeFile writes one interface file; the error names the file, the value
// and, where the errno says what is wrong, the fix.
func writeFile(dir, file, value string) error {
	err := cgroups.WriteFile(dir, file, value)
	if err == nil {
		return nil
	}
	return fmt.Errorf("write %q to %s: %w%s", value, filepath.Join(dir, file), err, hint(err))
}

// hint says what to do about the errors every write can hit.
func hint(err error) string {
	switch {
	case errors.Is(err, unix.EROFS):
		return "; /sys/fs/cgroup is mounted read-only: add the annotation " + writableAnnotation + `: "Writable" to the pod`
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return "; the cgroup is not delegated to this user: run as the container's root user, in a pod made writable with " + writableAnnotation
	}
	return ""
}

// Annotation names the errors point pod authors to; the plugin's registry
// (internal/annotations) is the source, a test keeps them equal.
const (
	writableAnnotation       = "writable-cgroups.noderesource.dev"
	maxDescendantsAnnotation = "cgroup-max-descendants.cgdelegate.io"
)

// Controllers returns the controllers the root can enable
// (cgroup.controllers).
func (r *Root) Controllers() ([]string, error) {
	s, err := readFile(r.dir, fileControllers)
	if err != nil {
		return nil, fmt.Errorf("%w; is %s a cgroup v2 mount? (cgdelegate-init check tells)", err, r.dir)
	}
	return strings.Fields(s), nil
}

// Procs returns the processes in the root itself.
func (r *Root) Procs() ([]int, error) {
	pids, err := cgroups.GetPids(r.dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(r.dir, fileProcs), err)
	}
	return pids, nil
}

// Prepare makes the root usable for sub-cgroups: it moves every process
// in the root into leaf (DefaultLeaf when empty), creating it, and then
// enables controllers in the root's cgroup.subtree_control. nil
// controllers means those of DefaultControllers the root has; an empty,
// non-nil list enables none (Create enables what its limits need). Calling
// it again is harmless.
func (r *Root) Prepare(leaf string, controllers []string) error {
	if leaf == "" {
		leaf = DefaultLeaf
	}
	leaf, err := cleanLeaf(leaf)
	if err != nil {
		return err
	}
	if controllers == nil {
		have, err := r.Controllers()
		if err != nil {
			return err
		}
		for _, c := range DefaultControllers {
			if slices.Contains(have, c) {
				controllers = append(controllers, c)
			}
		}
	}
	// Processes can appear in the root while we move (a kubectl exec): the
	// kernel then refuses the controllers with EBUSY, and we move again.
	const rounds = 5
	for i := 0; ; i++ {
		if err := r.evacuate(leaf); err != nil {
			return err
		}
		err := r.enable(r.dir, controllers)
		if !errors.Is(err, unix.EBUSY) || i == rounds-1 {
			return err
		}
	}
}

// evacuate moves the root's processes into leaf.
func (r *Root) evacuate(leaf string) error {
	pids, err := r.Procs()
	if err != nil || len(pids) == 0 {
		return err
	}
	dir := filepath.Join(r.dir, leaf)
	if _, err := r.mkdirAll(leaf); err != nil {
		return err
	}
	for _, pid := range pids {
		err := cgroups.WriteCgroupProc(dir, pid)
		if err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: it exited
			return fmt.Errorf("move process %d from %s into %s: %w%s", pid, r.dir, filepath.Join(dir, fileProcs), err, hint(err))
		}
	}
	return nil
}

// enable enables controllers in dir's cgroup.subtree_control, those not
// already enabled, after checking dir can (cgroup.controllers).
func (r *Root) enable(dir string, controllers []string) error {
	if len(controllers) == 0 {
		return nil
	}
	have, err := readFile(dir, fileControllers)
	if err != nil {
		return err
	}
	on, err := readFile(dir, fileSubtreeControl)
	if err != nil {
		return err
	}
	var add []string
	for _, c := range controllers {
		if !slices.Contains(strings.Fields(have), c) {
			return fmt.Errorf("%w: %q is not in %s (%q); the pod cgroup does not delegate it: drop the limit that needs it, or ask the node admin to enable it above the pod",
				ErrController, c, filepath.Join(dir, fileControllers), have)
		}
		// The kernel lists "cpu"; a fake tree keeps what was written, "+cpu".
		if !slices.Contains(strings.Fields(strings.ReplaceAll(on, "+", "")), c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	err = writeFile(dir, fileSubtreeControl, strings.Join(add, " "))
	if errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("%w; %s still holds processes: move them into a leaf first (Root.Prepare, or cgdelegate-init without run)", err, dir)
	}
	return err
}

// mkdirAll creates the cgroup at rel and its missing parents, and returns
// the directories it created, outermost first.
func (r *Root) mkdirAll(rel string) ([]string, error) {
	var made []string
	dir := r.dir
	for comp := range strings.SplitSeq(rel, "/") {
		dir = filepath.Join(dir, comp)
		err := r.mkdir(dir)
		switch {
		case err == nil:
			made = append(made, dir)
		case errors.Is(err, os.ErrExist):
		case errors.Is(err, unix.EAGAIN):
			return made, r.budgetError(dir, err)
		default:
			return made, fmt.Errorf("mkdir %s: %w%s", dir, err, hint(err))
		}
	}
	return made, nil
}

// budgetError explains an EAGAIN from mkdir: the pod bounds.
func (r *Root) budgetError(dir string, err error) error {
	desc, depth := r.env(EnvMaxDescendants), r.env(EnvMaxDepth)
	return fmt.Errorf("%w (cgroup.max.descendants=%s), or its depth bound (cgroup.max.depth=%s): mkdir %s: %w; remove unused cgroups (cgdelegate-init tree lists them) or lower the nesting, or raise the pod bound with the annotation %s (up to the node cap)",
		ErrBudget, desc, depth, dir, err, maxDescendantsAnnotation)
}

// env returns an env var, or "unknown".
func (r *Root) env(key string) string {
	if v, ok := r.lookupEnv(key); ok && v != "" {
		return v
	}
	return "unknown"
}
