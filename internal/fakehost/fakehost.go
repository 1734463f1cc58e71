package fakehost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/opencontainers/cgroups"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// Host is a fake host rooted at Dir.
type Host struct {
	// Dir holds everything below.
	Dir string
	// Proc is the host /proc: pid 1's mount table and namespace links, and
	// the hook's container init (AddContainer).
	Proc string
	// Mountinfo is the host mount table, Proc/1/mountinfo.
	Mountinfo string
	// CgroupRoot is the cgroup2 mount point; its files are plain files.
	CgroupRoot string
	// Sysfs is the host /sys (kernel/cgroup/delegate, CPU topology).
	Sysfs string
	// Bundle is the hook's container bundle (AddContainer).
	Bundle string
	// FeatureFile and StatusFile are where the plugin writes.
	FeatureFile, StatusFile string
}

// Option adds to a host built by New or NewInDir.
type Option func(*Host) error

// WithMounts builds the host with mount table m instead of Nsdelegate.
func WithMounts(m MountTable) Option {
	return func(h *Host) error { return h.Remount(m) }
}

// WithContainer adds the hook's container (see AddContainer).
func WithContainer() Option {
	return (*Host).AddContainer
}

// New builds a host in t.TempDir() and ends the test if that fails.
func New(t testing.TB, opts ...Option) *Host {
	t.Helper()
	h, err := NewInDir(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// setTestMode sets cgroups.TestMode once: hosts are built by parallel
// tests, and the library reads the flag without a lock.
var setTestMode sync.Once

// NewInDir builds a host in the existing directory dir: cgroup2 with
// nsdelegate at the cgroup root, pid 1 in cgroup namespace HostCgroupNS,
// an empty /sys, then applies opts. It sets cgroups.TestMode.
func NewInDir(dir string, opts ...Option) (*Host, error) {
	setTestMode.Do(func() { cgroups.TestMode = true })
	proc := filepath.Join(dir, "proc")
	h := &Host{
		Dir:         dir,
		Proc:        proc,
		Mountinfo:   filepath.Join(proc, "1", "mountinfo"),
		CgroupRoot:  filepath.Join(dir, "cgroup"),
		Sysfs:       filepath.Join(dir, "sys"),
		Bundle:      filepath.Join(dir, "bundle"),
		FeatureFile: filepath.Join(dir, "features.d", "cgdelegate"),
		StatusFile:  filepath.Join(dir, "status.json"),
	}
	for _, d := range []string{h.CgroupRoot, h.Sysfs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("fake host: %w", err)
		}
	}
	if err := h.Remount(Nsdelegate); err != nil {
		return nil, err
	}
	if err := h.setNSLink(1, HostCgroupNS); err != nil {
		return nil, err
	}
	for _, o := range opts {
		if err := o(h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// WriteFile writes data to file, creating parent directories.
func (h *Host) WriteFile(file, data string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("fake host: %w", err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		return fmt.Errorf("fake host: %w", err)
	}
	return nil
}

// setNSLink points /proc/<pid>/ns/cgroup at target, as the kernel's
// "cgroup:[inode]" links do.
func (h *Host) setNSLink(pid int, target string) error {
	link := filepath.Join(h.Proc, strconv.Itoa(pid), "ns", "cgroup")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("fake host: %w", err)
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fake host: %w", err)
	}
	if err := os.Symlink(target, link); err != nil {
		return fmt.Errorf("fake host: %w", err)
	}
	return nil
}

// Config is the default plugin config with every host path pointing at
// this host.
func (h *Host) Config() config.Config {
	c := config.Default()
	c.CgroupRoot = h.CgroupRoot
	c.MountinfoPath = h.Mountinfo
	c.ProcRoot = h.Proc
	c.SysfsRoot = h.Sysfs
	c.FeatureFile = h.FeatureFile
	c.StatusFile = h.StatusFile
	c.KubeletCPUManagerState = filepath.Join(h.Dir, "cpu_manager_state")
	return c
}
