package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// tableWatcher keeps a mount table open and tells whether it changed. It is
// the one change detector behind both Checker and Watch.
//
// On procfs (/proc/<pid>/mountinfo) the kernel raises POLLPRI|POLLERR on the
// open file once per mount, umount or remount in that mount namespace, and
// the poll(2) that sees it consumes it. Any other file (fixtures, copies) is
// compared by inode, size and modification time with the version last
// seen, so a rewrite or a rename over the path counts as a change.
type tableWatcher struct {
	path   string
	f      *os.File
	fd     int32
	procfs bool
	// stamp is the version of a plain file last opened or reported.
	stamp fileStamp
	// read is set once the open file has been read: the next read must
	// rewind (procfs) or reopen (plain files).
	read bool
}

// fileStamp identifies one version of a regular file; the zero value
// stands for a missing file.
type fileStamp struct {
	ino, size uint64
	mtime     unix.Timespec
}

func stampOf(st *unix.Stat_t) fileStamp {
	return fileStamp{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim}
}

// openTable opens the mount table at path.
func openTable(path string) (*tableWatcher, error) {
	w := &tableWatcher{path: path}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

// open (re)opens the table and finds out how to watch it.
func (w *tableWatcher) open() error {
	_ = w.Close()
	f, err := os.Open(w.path)
	if err != nil {
		return fmt.Errorf("open mount table %q: %w", w.path, err)
	}
	w.f, w.fd, w.read = f, int32(f.Fd()), false
	var sfs unix.Statfs_t
	w.procfs = unix.Fstatfs(int(w.fd), &sfs) == nil && sfs.Type == unix.PROC_SUPER_MAGIC
	if !w.procfs {
		// Stamp the opened file, not the path: a file renamed over the
		// path after the open must still be seen as a change.
		var st unix.Stat_t
		if unix.Fstat(int(w.fd), &st) == nil {
			w.stamp = stampOf(&st)
		}
	}
	return nil
}

// Close releases the table.
func (w *tableWatcher) Close() error {
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// changed reports whether the table changed since it was opened or last
// reported as changed, waiting up to timeout for a change (0: do not wait)
// or until done is closed.
func (w *tableWatcher) changed(done <-chan struct{}, timeout time.Duration) (bool, error) {
	if w.procfs {
		fds := []unix.PollFd{{Fd: w.fd, Events: unix.POLLPRI}}
		for {
			n, err := unix.Poll(fds, int(timeout/time.Millisecond))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return true, fmt.Errorf("poll mount table %q: %w", w.path, err)
			}
			return n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0, nil
		}
	}
	if timeout > 0 {
		t := time.NewTimer(timeout)
		select {
		case <-done:
			t.Stop()
			return false, nil
		case <-t.C:
		}
	}
	var st unix.Stat_t
	now := fileStamp{}
	if unix.Stat(w.path, &st) == nil {
		now = stampOf(&st)
	}
	if now == w.stamp {
		return false, nil
	}
	w.stamp = now
	return true, nil
}

// readAll reads the current table into buf, replacing its contents. A
// change that happens during the read is reported by the next changed.
func (w *tableWatcher) readAll(buf *bytes.Buffer) error {
	if w.read {
		if w.procfs {
			if _, err := w.f.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("rewind mount table %q: %w", w.path, err)
			}
		} else if err := w.open(); err != nil {
			// A plain file may have been replaced by rename.
			return err
		}
	}
	if w.procfs {
		// Consume any pending notification: it is older than this read.
		// Best effort: after a failed poll the next changed fails too, and
		// the Checker re-reads.
		_, _ = w.changed(nil, 0)
	}
	w.read = true
	buf.Reset()
	if _, err := buf.ReadFrom(w.f); err != nil {
		return fmt.Errorf("read mount table %q: %w", w.path, err)
	}
	return nil
}

// WatchMountinfo calls fn whenever the mount table at mountinfoPath changes, as
// procfs reports through poll(2) (or, for a plain file, as its inode, size
// or modification time show), but not sooner than gap after its last call:
// the changes meanwhile make one call when the gap ends (every container a
// runtime starts or removes mounts and unmounts on the host, and fn may
// read the whole table). It calls fn at least every interval anyway. It
// returns ctx.Err() when ctx is done, or an error if the table can not be
// opened or polled.
func WatchMountinfo(ctx context.Context, mountinfoPath string, interval, gap time.Duration, fn func()) error {
	if interval <= 0 || gap < 0 {
		return fmt.Errorf("watch %q: interval %v must be positive and gap %v not negative", mountinfoPath, interval, gap)
	}
	w, err := openTable(mountinfoPath)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer w.Close()
	return w.loop(ctx, interval, gap, fn)
}

// loop is Watch on an open table. While a call is pending (a change seen,
// the gap not over) it sleeps until the gap ends instead of waking at every
// further change: the call reads the table as it is then. The changes it
// slept through are still pending in the kernel, so the next poll reports
// them and no change goes without a call after it.
func (w *tableWatcher) loop(ctx context.Context, interval, gap time.Duration, fn func()) error {
	// Wake up at least this often to notice ctx.
	step := min(interval, 250*time.Millisecond)
	// The first change is seen at once, as after a quiet gap.
	last := time.Now().Add(-gap)
	pending := false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if pending {
			if rest := min(gap, interval) - time.Since(last); rest > 0 {
				t := time.NewTimer(rest)
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
			}
			last, pending = time.Now(), false
			fn()
			continue
		}
		changed, err := w.changed(ctx.Done(), step)
		if err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		if ctx.Err() != nil {
			continue
		}
		pending = changed
		if !pending && time.Since(last) >= interval {
			last = time.Now()
			fn()
		}
	}
}
