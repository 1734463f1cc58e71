package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	// A systemd host in unified mode (cgroup2 with nsdelegate).
	mountsV2Nsdelegate = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
24 23 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	// Unified mode without nsdelegate (e.g. mounted by hand).
	mountsV2Plain = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
24 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 rw
`
	// Hybrid: tmpfs at the root, v1 controllers, cgroup2 at unified.
	mountsHybrid = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/cpu rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpu
`
	// Legacy v1 only, as on these build machines.
	mountsV1 = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 30 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
`
	// cgroup2 at a non-standard mount point.
	mountsV2Elsewhere = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:40 / /run/cgroup2 rw,relatime shared:20 - cgroup2 none rw,nsdelegate
`
	// Stacked: a later mount at the same point hides the first.
	mountsStacked = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
24 22 0:23 / /sys/fs/cgroup rw,relatime shared:3 - cgroup2 cgroup2 rw,nsdelegate
25 24 0:24 / /sys/fs/cgroup rw,relatime shared:4 - tmpfs tmpfs rw
`
	mountsNone = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
`
)

func TestParse(t *testing.T) {
	tests := []struct {
		name       string
		table      string
		root       string
		wantVer    int
		wantNsdel  bool
		wantFSType string
		wantErr    error
		wantInErr  string
	}{
		{"v2 nsdelegate", mountsV2Nsdelegate, "/sys/fs/cgroup", 2, true, "cgroup2", nil, ""},
		{"v2 root with trailing slash", mountsV2Nsdelegate, "/sys/fs/cgroup/", 2, true, "cgroup2", nil, ""},
		{"v2 without nsdelegate", mountsV2Plain, "/sys/fs/cgroup", 2, false, "cgroup2", ErrNoNsdelegate, `options "rw"`},
		{"hybrid v1", mountsHybrid, "/sys/fs/cgroup", 1, false, "tmpfs", ErrCgroupV1, `cgroup2 only at "/sys/fs/cgroup/unified"`},
		{"legacy v1", mountsV1, "/sys/fs/cgroup", 1, false, "tmpfs", ErrCgroupV1, "tmpfs mount"},
		{"v2 at non-standard path", mountsV2Elsewhere, "/run/cgroup2", 2, true, "cgroup2", nil, ""},
		{"non-standard path not configured", mountsV2Elsewhere, "/sys/fs/cgroup", 0, false, "", ErrNoCgroupMount, `"/sys/fs/cgroup"`},
		{"stacked mounts: top wins", mountsStacked, "/sys/fs/cgroup", 1, false, "tmpfs", ErrCgroupV1, ""},
		{"nothing mounted", mountsNone, "/sys/fs/cgroup", 0, false, "", ErrNoCgroupMount, "nothing is mounted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseMountinfo(strings.NewReader(tc.table), tc.root)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if st.Version != tc.wantVer || st.NsDelegate != tc.wantNsdel || st.FSType != tc.wantFSType {
				t.Errorf("got version=%d nsdelegate=%v fstype=%q, want %d %v %q",
					st.Version, st.NsDelegate, st.FSType, tc.wantVer, tc.wantNsdel, tc.wantFSType)
			}
			verdict := st.Err()
			if !errors.Is(verdict, tc.wantErr) || (tc.wantErr == nil) != (verdict == nil) {
				t.Fatalf("Err() = %v, want %v", verdict, tc.wantErr)
			}
			if tc.wantInErr != "" && !strings.Contains(verdict.Error(), tc.wantInErr) {
				t.Errorf("Err() = %q, want it to mention %q", verdict, tc.wantInErr)
			}
		})
	}
}

func TestParseMalformed(t *testing.T) {
	_, err := ParseMountinfo(strings.NewReader("this is not a mount table\n"), "/sys/fs/cgroup")
	if err == nil {
		t.Fatal("want an error for a malformed table")
	}
}

func TestCheckerRereadsPlainFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(mountsV2Nsdelegate)
	c := NewChecker(path, "/sys/fs/cgroup")
	defer c.Close()
	st, err := c.Check()
	if err != nil || st.Err() != nil {
		t.Fatalf("first check: %v / %v", err, st.Err())
	}
	// A remount that drops nsdelegate must be seen by the next check.
	write(mountsV2Plain)
	st, err = c.Check()
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(st.Err(), ErrNoNsdelegate) {
		t.Fatalf("after remount: Err() = %v, want ErrNoNsdelegate", st.Err())
	}
}

func TestCheckerMissingTable(t *testing.T) {
	c := NewChecker(filepath.Join(t.TempDir(), "absent"), "/sys/fs/cgroup")
	_, err := c.Check()
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("Check() = %v, want a not-exist error naming the path", err)
	}
}

func TestCheckerProcfsCaches(t *testing.T) {
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Skip("no /proc/self/mountinfo on this machine")
	}
	c := NewChecker("/proc/self/mountinfo", "/")
	defer c.Close()
	first, err := c.Check()
	if err != nil {
		t.Fatal(err)
	}
	if c.w == nil || !c.w.procfs {
		t.Fatal("procfs mount table should use poll-based change detection")
	}
	second, err := c.Check()
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatalf("cached status differs: %+v vs %+v", first, second)
	}
}

func BenchmarkCheckerProcfs(b *testing.B) {
	c := NewChecker("/proc/self/mountinfo", "/sys/fs/cgroup")
	defer c.Close()
	for b.Loop() {
		if _, err := c.Check(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseProcfs(b *testing.B) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		if _, err := ParseMountinfo(strings.NewReader(string(data)), "/sys/fs/cgroup"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestWatchCallsPeriodically(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(mountsV2Nsdelegate), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan struct{}, 10)
	done := make(chan error, 1)
	go func() {
		done <- WatchMountinfo(ctx, path, 20*time.Millisecond, 0, func() { calls <- struct{}{} })
	}()
	for range 2 {
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatal("Watch did not call fn")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled", err)
	}
}

// A rewritten plain table is reported long before the interval.
func TestWatchSeesPlainFileChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(mountsV2Nsdelegate), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan struct{}, 10)
	done := make(chan error, 1)
	go func() {
		done <- WatchMountinfo(ctx, path, time.Hour, 0, func() { calls <- struct{}{} })
	}()
	// Watch may open the table after any one write: keep rewriting it.
	tables := []string{mountsV2Plain, mountsV2Nsdelegate}
	deadline := time.After(5 * time.Second)
	for i := 0; ; i++ {
		if err := os.WriteFile(path, []byte(tables[i%2]), 0o600); err != nil {
			t.Fatal(err)
		}
		select {
		case <-calls:
		case <-time.After(100 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("Watch did not report the rewritten table")
		}
		break
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled", err)
	}
}

// TestWatchGap: a change right after a call is reported when the gap
// since that call ends, not sooner, and not lost; with no gap it is
// reported within the watcher's step (250 ms).
func TestWatchGap(t *testing.T) {
	for _, gap := range []time.Duration{0, 600 * time.Millisecond} {
		t.Run(gap.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mountinfo")
			if err := os.WriteFile(path, []byte(mountsV2Nsdelegate), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			calls := make(chan time.Time, 10)
			done := make(chan error, 1)
			go func() {
				done <- WatchMountinfo(ctx, path, time.Hour, gap, func() { calls <- time.Now() })
			}()
			// Rewrite until a call reports a change (the watcher may open
			// the table after any one write), then once more at once.
			tables := []string{mountsV2Plain, mountsV2Nsdelegate}
			var first time.Time
			for i := 0; first.IsZero(); i++ {
				if i > 50 {
					t.Fatal("Watch did not report the rewritten table")
				}
				if err := os.WriteFile(path, []byte(tables[i%2]), 0o600); err != nil {
					t.Fatal(err)
				}
				select {
				case first = <-calls:
				case <-time.After(100 * time.Millisecond):
				}
			}
			if err := os.WriteFile(path, []byte(mountsV2Plain+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			select {
			case second := <-calls:
				d := second.Sub(first)
				if gap > 0 && d < gap-50*time.Millisecond {
					t.Errorf("second call %s after the first, want at least the gap %s", d, gap)
				}
				if gap == 0 && d > time.Second {
					t.Errorf("second call %s after the first, want it within the step", d)
				}
			case <-time.After(gap + 3*time.Second):
				t.Fatal("the change after the first call was never reported")
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Watch returned %v, want context.Canceled", err)
			}
		})
	}
}

// TestWatchGapUnderChurn: a table that changes all the time makes one call
// a gap, and the last change is followed by a call.
func TestWatchGapUnderChurn(t *testing.T) {
	const gap, churn = 400 * time.Millisecond, 1500 * time.Millisecond
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(mountsV2Nsdelegate), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan time.Time, 100)
	done := make(chan error, 1)
	go func() {
		done <- WatchMountinfo(ctx, path, time.Hour, gap, func() { calls <- time.Now() })
	}()
	start := time.Now()
	var lastWrite time.Time
	for i := 0; time.Since(start) < churn; i++ {
		// A different size every time: the plain file's stamp changes.
		if err := os.WriteFile(path, []byte(mountsV2Nsdelegate+strings.Repeat("\n", i%7+1)), 0o600); err != nil {
			t.Fatal(err)
		}
		lastWrite = time.Now()
		time.Sleep(10 * time.Millisecond)
	}
	// The call after the last write comes within a gap and a step.
	deadline := time.After(gap + time.Second)
	var got []time.Time
	for len(got) == 0 || !got[len(got)-1].After(lastWrite) {
		select {
		case c := <-calls:
			got = append(got, c)
		case <-deadline:
			t.Fatalf("no call after the last change (calls at %v, last write at %v)", got, lastWrite.Sub(start))
		}
	}
	for i := 1; i < len(got); i++ {
		if d := got[i].Sub(got[i-1]); d < gap-50*time.Millisecond {
			t.Errorf("calls %d and %d %s apart, want at least the gap %s", i-1, i, d, gap)
		}
	}
	if max := int(churn/gap) + 2; len(got) > max {
		t.Errorf("%d calls during %s of changes, want at most %d", len(got), churn, max)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled", err)
	}
}

func TestWatchErrors(t *testing.T) {
	if err := WatchMountinfo(context.Background(), "/nonexistent/mountinfo", time.Second, 0, func() {}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing table: %v", err)
	}
	if err := WatchMountinfo(context.Background(), "/proc/self/mountinfo", 0, 0, func() {}); err == nil {
		t.Fatal("zero interval: want an error")
	}
	if err := WatchMountinfo(context.Background(), "/proc/self/mountinfo", time.Second, -time.Second, func() {}); err == nil {
		t.Fatal("negative gap: want an error")
	}
}

// A table replaced by rename (as atomic writers do) is seen.
func TestCheckerSeesRenamedTable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(path, []byte(mountsV2Nsdelegate), 0o600); err != nil {
		t.Fatal(err)
	}
	c := NewChecker(path, "/sys/fs/cgroup")
	defer c.Close()
	for i, tc := range []struct {
		table string
		want  error
	}{{mountsV2Nsdelegate, nil}, {mountsV2Plain, ErrNoNsdelegate}, {mountsHybrid, ErrCgroupV1}, {mountsV2Nsdelegate, nil}} {
		tmp := filepath.Join(dir, "next")
		if err := os.WriteFile(tmp, []byte(tc.table), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		st, err := c.Check()
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Err(); !errors.Is(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Fatalf("step %d: Err() = %v, want %v", i, got, tc.want)
		}
	}
}

// writeSameStamp rewrites path with content of the same length and puts the
// old modification time back, so that only a re-read can see the change.
func writeSameStamp(t *testing.T, path, content string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(content)) != fi.Size() {
		t.Fatalf("fixture sizes differ: %d vs %d", len(content), fi.Size())
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// An unsafe verdict is never served from the cache: once nsdelegate is
// back, the next check sees it even if no change was signalled.
func TestCheckerNeverCachesUnsafe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	unsafe := strings.Replace(mountsV2Nsdelegate, "rw,nsdelegate,memory_recursiveprot", "rw,nsdelegatX,memory_recursiveprot", 1)
	if err := os.WriteFile(path, []byte(unsafe), 0o600); err != nil {
		t.Fatal(err)
	}
	c := NewChecker(path, "/sys/fs/cgroup")
	defer c.Close()
	st, err := c.Check()
	if err != nil || !errors.Is(st.Err(), ErrNoNsdelegate) {
		t.Fatalf("first check: %v / %v", err, st.Err())
	}
	writeSameStamp(t, path, mountsV2Nsdelegate)
	st, err = c.Check()
	if err != nil || st.Err() != nil {
		t.Fatalf("after nsdelegate came back: %v / %v", err, st.Err())
	}
	// A safe verdict is cached while the stamp is unchanged...
	writeSameStamp(t, path, unsafe)
	if st, _ := c.Check(); st.Err() != nil {
		t.Fatalf("a safe verdict with an unchanged stamp should be cached, got %v", st.Err())
	}
	// ...but never longer than MaxAge.
	c.MaxAge = 0
	if st, _ := c.Check(); !errors.Is(st.Err(), ErrNoNsdelegate) {
		t.Fatalf("past MaxAge the table must be re-read, got %v", st.Err())
	}
}

// BenchmarkCheck measures the hot path of Check, the one every container
// creation takes: a safe verdict served from the cache after asking the
// kernel (procfs) or the file system (plain file) whether the table changed.
func BenchmarkCheck(b *testing.B) {
	plain := filepath.Join(b.TempDir(), "mountinfo")
	if err := os.WriteFile(plain, []byte(mountsV2Nsdelegate), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name, path, root string
	}{
		{"plain", plain, "/sys/fs/cgroup"},
		// No build machine has cgroup2 with nsdelegate: take the real
		// procfs table and poll(2), and pretend its verdict was safe.
		{"procfs", "/proc/self/mountinfo", "/"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := NewChecker(bc.path, bc.root)
			defer c.Close()
			c.MaxAge = time.Hour
			if _, err := c.Check(); err != nil {
				b.Skip(err)
			}
			c.cached = &Status{CgroupRoot: bc.root, Mounted: true, FSType: "cgroup2", Version: 2, NsDelegate: true}
			c.readAt = time.Now()
			for b.Loop() {
				st, err := c.Check()
				if err != nil || st.Err() != nil {
					b.Fatal(err, st.Err())
				}
			}
		})
	}
}

// An unsafe verdict empties the cache: the safe verdict read before it is
// not served again, not even while the table does not change.
func TestCheckerUnsafeEmptiesCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(mountsV2Nsdelegate), 0o600); err != nil {
		t.Fatal(err)
	}
	c := NewChecker(path, "/sys/fs/cgroup")
	defer c.Close()
	c.MaxAge = time.Hour
	if st, err := c.Check(); err != nil || st.Err() != nil {
		t.Fatalf("first check: %v / %v", err, st.Err())
	}
	if err := os.WriteFile(path, []byte(mountsV2Plain), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if st, err := c.Check(); err != nil || !errors.Is(st.Err(), ErrNoNsdelegate) {
			t.Fatalf("check %d after the remount: %v / %v, want ErrNoNsdelegate", i, err, st.Err())
		}
	}
}
