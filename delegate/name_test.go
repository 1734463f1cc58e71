package delegate

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestCleanName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"one level", "w1", ""},
		{"nested", "a/b", ""},
		{"dots inside names", "job.1/x..y", ""},
		{"empty", "", "empty name"},
		{"absolute", "/w1", `"/w1" is absolute; give it relative to the cgroup root, such as "w1"`},
		{"dot dot", "a/../b", `".." component`},
		{"dot", "./a", `"." component`},
		{"trailing slash", "a/", "empty component"},
		{"double slash", "a//b", "empty component"},
		{"interface file", "cgroup.procs", "clash with cgroup interface files"},
		{"newline", "a\nb", "control character"},
		{"too long", strings.Repeat("x", 256), "at most 255"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CleanName(tc.in)
			if tc.wantErr == "" {
				if err != nil || got != tc.in {
					t.Fatalf("CleanName(%q) = %q, %v", tc.in, got, err)
				}
				return
			}
			if !errors.Is(err, ErrBadName) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CleanName(%q) error = %v, want %v with %q", tc.in, err, ErrBadName, tc.wantErr)
			}
		})
	}
	if _, err := cleanLeaf("a/b"); !errors.Is(err, ErrBadName) {
		t.Errorf("cleanLeaf(a/b) = %v, want ErrBadName", err)
	}
}

func FuzzCleanName(f *testing.F) {
	for _, s := range []string{"w1", "a/b", "/abs", "..", "a/../b", "a//b", "", "cgroup.kill", "x\x00y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := CleanName(name)
		if err != nil {
			if !errors.Is(err, ErrBadName) {
				t.Fatalf("CleanName(%q) error %v does not wrap ErrBadName", name, err)
			}
			return
		}
		const root = "/sys/fs/cgroup"
		joined := filepath.Join(root, got)
		if got != name || filepath.Clean(got) != got || !strings.HasPrefix(joined, root+"/") || joined == root+"/" {
			t.Fatalf("CleanName(%q) = %q accepted, joins to %q", name, got, joined)
		}
	})
}
