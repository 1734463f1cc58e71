package delegate

import (
	"os"
	"path/filepath"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// With cgroups.TestMode set, plain files in a temp dir stand in for
// cgroupfs. The directory operations then act as the kernel would: a new
// cgroup gets its interface files, listing its parent's controllers, and
// a cgroup with sub-cgroups is busy.

func mkdirCgroup(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil || !cgroups.TestMode {
		return err
	}
	ctrls, err := os.ReadFile(filepath.Join(filepath.Dir(dir), fileControllers))
	if err != nil {
		return err
	}
	for name, data := range map[string]string{fileControllers: string(ctrls), fileSubtreeControl: "", fileProcs: ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func removeCgroup(dir string) error {
	if !cgroups.TestMode {
		return cgroups.RemovePath(dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			return &os.PathError{Op: "rmdir", Path: dir, Err: unix.EBUSY}
		}
	}
	return os.RemoveAll(dir)
}
