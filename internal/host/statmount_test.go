package host

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// skipWithoutProbe skips when the kernel can not answer a probe of this
// process's own view (statmount(2) needs Linux 6.8, its mount options
// 6.11).
func skipWithoutProbe(t *testing.T) {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil || major < 6 || major == 6 && minor < 11 {
		t.Skipf("Linux %s: statmount(2) gives mount options from 6.11", unix.ByteSliceToString(u.Release[:]))
	}
	p, err := openProbe("/proc/self/mountinfo", "/")
	if err != nil {
		t.Skipf("no mount probe here: %v", err)
	}
	defer p.Close()
	if _, err := p.facts(); err != nil && !errors.Is(err, unix.ENOENT) {
		var errno unix.Errno
		if errors.As(err, &errno) && (errno == unix.ENOSYS || errno == unix.EOPNOTSUPP || errno == unix.EPERM || errno == unix.EINVAL) {
			t.Skipf("the kernel can not answer statmount here (Linux 6.11+ has mount options): %v", err)
		}
	}
}

// TestProbeAgreesWithMountinfo: for every mount this process sees, the
// kernel's answer about its mount point (statx + statmount) gives the type
// and the super options /proc/self/mountinfo gives, and ParseMountinfo's
// "mounted here".
func TestProbeAgreesWithMountinfo(t *testing.T) {
	skipWithoutProbe(t)
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := mountinfo.GetMountsFromReader(strings.NewReader(string(data)), nil)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, m := range mounts {
		t.Run(m.Mountpoint, func(t *testing.T) {
			want, err := ParseMountinfo(strings.NewReader(string(data)), m.Mountpoint)
			if err != nil {
				t.Fatal(err)
			}
			if want.FSType != m.FSType {
				t.Skipf("%s is covered by a later mount (%s)", m.Mountpoint, want.FSType)
			}
			p, err := openProbe("/proc/self/mountinfo", m.Mountpoint)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			got, err := p.facts()
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EACCES) {
				t.Skipf("the walk to %s: %v", m.Mountpoint, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			// Linux 6.11+ (skipWithoutProbe) gives the options of every mount
			// that has some.
			if !got.mountRoot || got.fsType != want.FSType || got.superOptions != want.SuperOptions {
				t.Errorf("probe: mount root %t, %q, %q; mountinfo: %q, %q", got.mountRoot, got.fsType, got.superOptions, want.FSType, want.SuperOptions)
			}
			checked++
		})
	}
	if checked == 0 {
		t.Fatal("no mount point was compared")
	}
	t.Logf("%d of %d mount points compared", checked, len(mounts))
}

// TestProbeNotAMountRoot: a directory inside a mount is not a mount root,
// and a missing path or a symlink is the table's to explain.
func TestProbeNotAMountRoot(t *testing.T) {
	skipWithoutProbe(t)
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		wantErr    error
	}{
		{"plain directory", dir, nil},
		{"missing", filepath.Join(dir, "missing"), unix.ENOENT},
		{"symlink", link, unix.ELOOP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := openProbe("/proc/self/mountinfo", tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			f, err := p.facts()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("facts: %v, want %v", err, tc.wantErr)
			}
			if err == nil && f.mountRoot {
				t.Fatalf("%s is not a mount root, the probe says it is (%+v)", tc.path, f)
			}
			if st, ok, err := p.safe(tc.path); ok || err != nil {
				t.Fatalf("safe = %+v, %t, %v; want not safe and no kernel error", st, ok, err)
			}
		})
	}
}

func TestOpenProbeNotProc(t *testing.T) {
	for _, path := range []string{filepath.Join(t.TempDir(), "mounts"), filepath.Join(t.TempDir(), "1", "mountinfo")} {
		if p, err := openProbe(path, "/sys/fs/cgroup"); err == nil {
			_ = p.Close()
			t.Errorf("openProbe(%q) opened a probe", path)
		}
	}
}

func TestSuperOptions(t *testing.T) {
	for _, tc := range []struct {
		flags uint32
		fs    string
		want  string
	}{
		{0, "", "rw"},
		{0, "nsdelegate,memory_recursiveprot", "rw,nsdelegate,memory_recursiveprot"},
		{sbRdonly, "", "ro"},
		{sbRdonly | sbSynchronous | sbDirsync | sbLazytime, "size=10k", "ro,sync,dirsync,lazytime,size=10k"},
	} {
		if got := superOptions(tc.flags, tc.fs); got != tc.want {
			t.Errorf("superOptions(%#x, %q) = %q, want %q", tc.flags, tc.fs, got, tc.want)
		}
	}
}

func TestCString(t *testing.T) {
	str := []byte("cgroup2\x00nsdelegate\x00")
	for _, tc := range []struct {
		off  uint32
		want string
	}{{0, "cgroup2"}, {8, "nsdelegate"}, {19, ""}, {200, ""}} {
		if got := cString(str, tc.off); got != tc.want {
			t.Errorf("cString(%d) = %q, want %q", tc.off, got, tc.want)
		}
	}
}

// BenchmarkMountCheck compares, in one run, the two ways to answer the
// mount check on this machine's real table: reading and parsing it whole
// (what a writable container's check cost after each mount change) and
// the probe's system calls. The table's size sets the first; the second
// does not depend on it.
func BenchmarkMountCheck(b *testing.B) {
	p, err := openProbe("/proc/self/mountinfo", "/proc")
	if err != nil {
		b.Skipf("no mount probe here: %v", err)
	}
	defer p.Close()
	if _, err := p.facts(); err != nil {
		b.Skipf("the kernel can not answer statmount here: %v", err)
	}
	b.Run("mountinfo", func(b *testing.B) {
		for b.Loop() {
			f, err := os.Open("/proc/self/mountinfo")
			if err != nil {
				b.Fatal(err)
			}
			_, err = ParseMountinfo(f, "/proc")
			_ = f.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("statmount", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.facts(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestProbeForeignMountNamespace: the plugin reads the host's table from a
// container, /proc/1/mountinfo in another mount namespace. A child in a
// new mount namespace mounts a tmpfs only it sees; the probe, given the
// child's table, finds it (through the child's root and its namespace's
// ID), and the probe of this process does not.
func TestProbeForeignMountNamespace(t *testing.T) {
	skipWithoutProbe(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a mount namespace and mount in it")
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `mount --make-rprivate / && mount -t tmpfs -o size=8k,mode=711 cgd-probe "$1" && touch "$1/../ready" && exec sleep 60`, "sh", filepath.Join(dir, "m"))
	if err := os.Mkdir(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Skipf("no mount namespace here: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if i == 100 {
			t.Skipf("the child could not mount a tmpfs in its namespace: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mountinfoPath := fmt.Sprintf("/proc/%d/mountinfo", cmd.Process.Pid)
	p, err := openProbe(mountinfoPath, filepath.Join(dir, "m"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.nsID == 0 {
		t.Fatal("the child's mount namespace is taken for this process's own")
	}
	got, err := p.facts()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(mountinfoPath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseMountinfo(strings.NewReader(string(data)), filepath.Join(dir, "m"))
	if err != nil {
		t.Fatal(err)
	}
	if !got.mountRoot || got.fsType != "tmpfs" || got.fsType != want.FSType || got.superOptions != want.SuperOptions {
		t.Errorf("probe in the child's namespace: mount root %t, %q, %q; its mountinfo: %q, %q", got.mountRoot, got.fsType, got.superOptions, want.FSType, want.SuperOptions)
	}
	own, err := openProbe("/proc/self/mountinfo", filepath.Join(dir, "m"))
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if f, err := own.facts(); err != nil || f.mountRoot {
		t.Errorf("this process's own view of %s: %+v, %v; want a plain directory", dir, f, err)
	}
}

// TestCheckerModeUnsafe: the probe is trusted only after it agreed with
// the table on a safe verdict; on a host that is not safe (no build
// machine has cgroup2 with nsdelegate), the Checker keeps reading the
// table and says so.
func TestCheckerModeUnsafe(t *testing.T) {
	skipWithoutProbe(t)
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := mountinfo.GetMountsFromReader(strings.NewReader(string(data)), mountinfo.FSTypeFilter("cgroup2", "tmpfs"))
	if err != nil || len(mounts) == 0 {
		t.Skipf("no cgroup2 or tmpfs mount to look at (%v)", err)
	}
	c := NewChecker("/proc/self/mountinfo", mounts[0].Mountpoint)
	defer c.Close()
	c.MaxAge = 0
	for range 2 {
		st, err := c.Check()
		if err != nil {
			t.Fatal(err)
		}
		if st.Err() == nil {
			t.Skipf("%s is safe here", mounts[0].Mountpoint)
		}
	}
	if mode := c.Mode(); mode != "mountinfo" {
		t.Errorf("Mode = %q after unsafe verdicts only, want mountinfo", mode)
	}
}
