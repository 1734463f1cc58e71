package hostcheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Watch calls fn whenever the mount table at mountinfoPath changes, as
// procfs reports through poll(2), and in any case at least every interval.
// It returns ctx.Err() when ctx is done, or an error if the table can not
// be opened.
func Watch(ctx context.Context, mountinfoPath string, interval time.Duration, fn func()) error {
	if interval <= 0 {
		return fmt.Errorf("watch %q: interval %v must be positive", mountinfoPath, interval)
	}
	f, err := os.Open(mountinfoPath)
	if err != nil {
		return fmt.Errorf("watch mount table %q: %w", mountinfoPath, err)
	}
	defer f.Close()
	var sfs unix.Statfs_t
	pollable := unix.Fstatfs(int(f.Fd()), &sfs) == nil && sfs.Type == unix.PROC_SUPER_MAGIC

	// Wake up at least this often to notice ctx.
	step := min(interval, 250*time.Millisecond)
	last := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		changed := false
		if pollable {
			fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI}}
			n, err := unix.Poll(fds, int(step/time.Millisecond))
			if err != nil && !errors.Is(err, unix.EINTR) {
				return fmt.Errorf("poll mount table %q: %w", mountinfoPath, err)
			}
			changed = n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0
		} else {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(step):
			}
		}
		if changed || time.Since(last) >= interval {
			last = time.Now()
			fn()
		}
	}
}
