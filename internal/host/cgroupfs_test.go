package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/cgroups"
)

func TestMain(m *testing.M) {
	// Plain temp files stand in for
	cgroups.TestMode = true
	os.Exit(m.Run())
}

// fakeTree makes a cgroup directory with the given files under a temp root.
func fakeTree(t *testing.T, rel string, files map[string]string) *FS {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return NewFS(root, filepath.Join(root, "sys"))
}

func TestPodPath(t *testing.T) {
	tests := []struct {
		parent  string
		want    string
		wantErr error
	}{
		{"kubepods-burstable-pod1234.slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice", nil},
		{"kubepods-pod1234.slice", "/kubepods.slice/kubepods-pod1234.slice", nil},
		{"kubepods-besteffort-podab_cd.slice", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podab_cd.slice", nil},
		{"/kubepods/burstable/pod1234", "/kubepods/burstable/pod1234", nil},
		{"/kubepods/pod1234/", "/kubepods/pod1234", nil},
		{"kubepods/besteffort/pod1", "/kubepods/besteffort/pod1", nil},
		{"", "", ErrBadPath},
		{"/kubepods/../../etc", "", ErrBadPath},
		{"..", "", ErrBadPath},
		{"../kubepods", "", ErrBadPath},
		{"/kubepods/..", "", ErrBadPath},
		{"/kubepods/pod..1/x", "/kubepods/pod..1/x", nil},
		{"//kubepods//pod1", "/kubepods/pod1", nil},
		{"kubepods--bad.slice", "", ErrBadPath},
	}
	for _, tc := range tests {
		t.Run(tc.parent, func(t *testing.T) {
			got, err := PodPath(tc.parent)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("PodPath(%q) error = %v, want %v", tc.parent, err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("PodPath(%q) = %q, want %q", tc.parent, got, tc.want)
			}
		})
	}
}

// Both drivers' pod paths resolve to real directories of a fake tree.
func TestPodPathAgainstFakeTrees(t *testing.T) {
	for _, tc := range []struct{ parent, onDisk string }{
		{"kubepods-burstable-podu1.slice", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu1.slice"},
		{"/kubepods/burstable/podu1", "kubepods/burstable/podu1"},
	} {
		t.Run(tc.parent, func(t *testing.T) {
			fs := fakeTree(t, tc.onDisk, map[string]string{FileMaxDescendants: "max\n", FileMaxDepth: "max\n"})
			rel, err := PodPath(tc.parent)
			if err != nil {
				t.Fatal(err)
			}
			if err := fs.Exists(rel); err != nil {
				t.Fatalf("Exists(%q): %v", rel, err)
			}
			if _, err := fs.ApplyBounds(rel, Bounds{250, 50}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDirCannotEscape(t *testing.T) {
	fs := NewFS("/sys/fs/cgroup", "/sys")
	if got := fs.Dir("../../etc"); got != "/sys/fs/cgroup/etc" {
		t.Fatalf("Dir escaped the root: %q", got)
	}
}

func TestApplyBounds(t *testing.T) {
	tests := []struct {
		name          string
		have          [2]string
		want          Bounds
		wantGot       Bounds
		wantFileDesc  string
		wantFileDepth string
	}{
		{"unbounded gets defaults", [2]string{"max", "max"}, Bounds{250, 50}, Bounds{250, 50}, "250", "50"},
		{"lower kubelet values kept", [2]string{"100", "10"}, Bounds{250, 50}, Bounds{100, 10}, "100", "10"},
		{"higher values lowered", [2]string{"1000", "100"}, Bounds{250, 50}, Bounds{250, 50}, "250", "50"},
		{"mixed", [2]string{"100", "max"}, Bounds{250, 50}, Bounds{100, 50}, "100", "50"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := fakeTree(t, "pod", map[string]string{FileMaxDescendants: tc.have[0] + "\n", FileMaxDepth: tc.have[1] + "\n"})
			got, err := fs.ApplyBounds("/pod", tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantGot {
				t.Fatalf("ApplyBounds = %v, want %v", got, tc.wantGot)
			}
			for file, want := range map[string]string{FileMaxDescendants: tc.wantFileDesc, FileMaxDepth: tc.wantFileDepth} {
				s, err := fs.Read("/pod", file)
				if err != nil {
					t.Fatal(err)
				}
				if s != want {
					t.Errorf("%s = %q, want %q", file, s, want)
				}
			}
			if err := fs.CheckBounds("/pod", tc.want); err != nil {
				t.Errorf("CheckBounds after apply: %v", err)
			}
		})
	}
}

func TestApplyBoundsErrors(t *testing.T) {
	t.Run("missing pod cgroup", func(t *testing.T) {
		fs := NewFS(t.TempDir(), "/sys")
		_, err := fs.ApplyBounds("/kubepods/podX", Bounds{250, 50})
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "podX") {
			t.Fatalf("err = %v, want ErrNotFound naming the path", err)
		}
	})
	t.Run("garbage in bound file", func(t *testing.T) {
		fs := fakeTree(t, "pod", map[string]string{FileMaxDescendants: "lots\n", FileMaxDepth: "max\n"})
		_, err := fs.ApplyBounds("/pod", Bounds{250, 50})
		if err == nil || !strings.Contains(err.Error(), `"lots"`) {
			t.Fatalf("err = %v, want it to quote the bad value", err)
		}
	})
	t.Run("no bound files (cgroup v1 dir)", func(t *testing.T) {
		fs := fakeTree(t, "pod", nil)
		_, err := fs.ApplyBounds("/pod", Bounds{250, 50})
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), FileMaxDescendants) {
			t.Fatalf("err = %v, want not-exist naming %s", err, FileMaxDescendants)
		}
	})
	t.Run("unbounded request", func(t *testing.T) {
		fs := fakeTree(t, "pod", map[string]string{FileMaxDescendants: "max\n", FileMaxDepth: "max\n"})
		if _, err := fs.ApplyBounds("/pod", Bounds{Unlimited, 50}); err == nil {
			t.Fatal("want an error for an unbounded request")
		}
	})
}

func TestCheckBounds(t *testing.T) {
	fs := fakeTree(t, "pod", map[string]string{FileMaxDescendants: "max\n", FileMaxDepth: "50\n"})
	err := fs.CheckBounds("/pod", Bounds{250, 50})
	if !errors.Is(err, ErrBoundsMissing) || !strings.Contains(err.Error(), "cgroup.max.descendants=max") {
		t.Fatalf("CheckBounds = %v, want ErrBoundsMissing showing the max", err)
	}
	if err := NewFS(t.TempDir(), "/sys").CheckBounds("/nope", Bounds{250, 50}); !errors.Is(err, ErrBoundsMissing) {
		t.Fatalf("missing cgroup: %v", err)
	}
}

func TestDelegateFiles(t *testing.T) {
	tests := []struct {
		name    string
		content *string
		want    []string
		wantErr bool
	}{
		{
			"kernel list", ptr("cgroup.procs\ncgroup.threads\ncgroup.subtree_control\nmemory.oom.group\nmemory.reclaim\n"),
			[]string{"cgroup.procs", "cgroup.threads", "cgroup.subtree_control", "memory.oom.group", "memory.reclaim"},
			false,
		},
		{"no file: defaults", nil, []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads"}, false},
		{"empty file: defaults", ptr("\n"), []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads"}, false},
		{"path in list", ptr("../../etc/passwd\n"), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sys := t.TempDir()
			if tc.content != nil {
				p := filepath.Join(sys, "kernel", "cgroup")
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(p, "delegate"), []byte(*tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := NewFS(t.TempDir(), sys).DelegateFiles()
			if tc.wantErr != (err != nil) {
				t.Fatalf("err = %v", err)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDelegate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	fs := fakeTree(t, "pod/ctr", map[string]string{"cgroup.procs": "", "cgroup.subtree_control": "", "cgroup.threads": "", "memory.max": "max"})
	if err := fs.Delegate("/pod/ctr", 65536, 65537); err != nil {
		t.Fatal(err)
	}
	for name, wantOwned := range map[string]bool{"": true, "cgroup.procs": true, "cgroup.subtree_control": true, "cgroup.threads": true, "memory.max": false} {
		fi, err := os.Stat(filepath.Join(fs.Dir("/pod/ctr"), name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		owned := st.Uid == 65536 && st.Gid == 65537
		if owned != wantOwned {
			t.Errorf("%q owned by %d:%d, want delegated=%v", name, st.Uid, st.Gid, wantOwned)
		}
	}
	if err := fs.Delegate("/pod/absent", 1, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent cgroup: %v", err)
	}
}

func TestParseProcCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		wantErr        bool
	}{
		{"v2", "0::/kubepods/burstable/pod1/ctr\n", "/kubepods/burstable/pod1/ctr", false},
		{"hybrid", "12:cpu:/a\n0::/b\n", "/b", false},
		{"v1 only", "12:cpu:/a\n", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcCgroup(strings.NewReader(tc.in))
			if tc.wantErr != (err != nil) || got != tc.want {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestContainerPath(t *testing.T) {
	tests := []struct {
		path    string
		want    string
		wantErr error
	}{
		// containerd's CRI, systemd driver.
		{"kubepods-besteffort-podu1.slice:cri-containerd:abc", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu1.slice/cri-containerd-abc.scope", nil},
		{"kubepods-podu1.slice:cri-containerd:abc", "/kubepods.slice/kubepods-podu1.slice/cri-containerd-abc.scope", nil},
		// CRI-O, systemd driver.
		{"kubepods-burstable-podu1.slice:crio:abc", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu1.slice/crio-abc.scope", nil},
		{"kubepods-podu1.slice::abc", "/kubepods.slice/kubepods-podu1.slice/-abc.scope", nil},
		{"kubepods-podu1.slice:x:inner.slice", "/kubepods.slice/kubepods-podu1.slice/inner.slice", nil},
		{":cri-containerd:abc", "/system.slice/cri-containerd-abc.scope", nil},
		// cgroupfs driver.
		{"/kubepods/besteffort/podu1/abc", "/kubepods/besteffort/podu1/abc", nil},
		{"/kubepods/podu1/abc/", "/kubepods/podu1/abc", nil},
		{"", "", ErrBadPath},
		{"/kubepods/../../etc", "", ErrBadPath},
		{"kubepods-podu1.slice:cri-containerd", "", ErrBadPath},
		{"kubepods-podu1.slice:cri-containerd:", "", ErrBadPath},
		{"kubepods-podu1.slice:cri-containerd:a/b", "", ErrBadPath},
		{"kubepods-podu1.slice:cri-containerd:..", "", ErrBadPath},
		{"/kubepods/x.slice:cri-containerd:abc", "", ErrBadPath},
		{"kubepods:cri-containerd:abc", "", ErrBadPath},
		{"kubepods--bad.slice:cri-containerd:abc", "", ErrBadPath},
		{"a.slice:b:c:d", "", ErrBadPath},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			got, err := ContainerPath(tc.path)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("ContainerPath(%q) error = %v, want %v", tc.path, err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("ContainerPath(%q) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

func TestSetCpuset(t *testing.T) {
	rel := "kubepods/besteffort/podu1/abc"
	fs := fakeTree(t, rel, map[string]string{FileCpusetCPUs: "0-3\n", FileCpusetMems: "0-1\n"})
	if err := fs.SetCpuset(rel, "0-1", "0"); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{FileCpusetCPUs: "0-1", FileCpusetMems: "0"} {
		if got, err := fs.Read(rel, file); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", file, got, err, want)
		}
	}
	err := fs.SetCpuset("kubepods/gone", "0", "0")
	if err == nil || !strings.Contains(err.Error(), "cpuset.mems") {
		t.Errorf("SetCpuset of a missing cgroup: %v, want an error naming cpuset.mems", err)
	}
}
