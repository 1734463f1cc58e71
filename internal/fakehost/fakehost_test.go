package fakehost_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/host"
)

// Each mount table gets the verdict its name promises, also when the host
// directory needs escaping in mountinfo.
func TestMountTables(t *testing.T) {
	tests := []struct {
		name  string
		table fakehost.MountTable
		want  error
	}{
		{"nsdelegate", fakehost.Nsdelegate, nil},
		{"no nsdelegate", fakehost.NoNsdelegate, host.ErrNoNsdelegate},
		{"cgroup v1", fakehost.CgroupV1, host.ErrCgroupV1},
		{"nothing mounted", fakehost.NoCgroupMount, host.ErrNoCgroupMount},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "a b\\c")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			h, err := fakehost.NewInDir(dir, fakehost.WithMounts(tc.table))
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(h.Mountinfo)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, err := host.ParseMountinfo(f, h.CgroupRoot)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Err(); !errors.Is(got, tc.want) || (tc.want == nil) != (got == nil) {
				t.Fatalf("verdict %v, want %v", got, tc.want)
			}
		})
	}
}

// Pod cgroups are found by cgroupfs and systemd parents alike.
func TestPodCgroups(t *testing.T) {
	h := fakehost.New(t)
	for _, parent := range []string{"/kubepods/burstable/pod1", "kubepods-burstable-pod2.slice"} {
		if err := h.AddPodCgroup(parent); err != nil {
			t.Fatal(err)
		}
		if got, err := h.ReadPodFile(parent, "cgroup.max.depth"); err != nil || got != "max" {
			t.Errorf("%s: cgroup.max.depth = %q, %v; want max", parent, got, err)
		}
	}
	if _, err := os.Stat(h.Path("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2.slice/cgroup.max.descendants")); err != nil {
		t.Errorf("systemd pod cgroup not expanded: %v", err)
	}
}
