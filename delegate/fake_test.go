package delegate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
)

// fakeTree is a temp dir standing in for a delegated cgroup root, with
// plain files for the interface files (cgroups.TestMode).
type fakeTree struct {
	dir  string
	proc string
	env  map[string]string
}

func newFakeTree(t testing.TB) *fakeTree {
	t.Helper()
	cgroups.TestMode = true
	f := &fakeTree{dir: t.TempDir(), proc: t.TempDir(), env: map[string]string{}}
	f.write(t, "", map[string]string{
		fileControllers:     "cpuset cpu memory pids",
		fileSubtreeControl:  "",
		fileProcs:           "12\n34\n",
		fileCpusetEffective: "0-3",
	})
	return f
}

func (f *fakeTree) write(t testing.TB, rel string, files map[string]string) {
	t.Helper()
	writeFiles(t, filepath.Join(f.dir, rel), files)
}

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fakeTree) read(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// root returns a Root on the tree.
func (f *fakeTree) root() *Root {
	return New(Options{CgroupRoot: f.dir, Proc: f.proc, LookupEnv: func(k string) (string, bool) {
		v, ok := f.env[k]
		return v, ok
	}})
}
