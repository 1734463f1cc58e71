package hostcheck

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Checker re-checks the host mount table cheaply on every call.
//
// When the mount table is a procfs file (/proc/<pid>/mountinfo), Checker
// keeps it open and asks the kernel, with a non-blocking poll(2), whether the
// mount namespace changed since the last read; procfs raises POLLPRI on any
// mount, umount or remount. Only then does it read and parse the table
// again. For other files (fixtures, copies) it re-reads when the file's
// inode, size or modification time changed.
//
// As a safety net against a missed notification, an unsafe verdict is
// never served from the cache (a refusal costs one re-read, and a restored
// nsdelegate is seen at once), and no verdict is older than MaxAge.
type Checker struct {
	path string
	root string
	// MaxAge bounds how long a safe verdict is served from the cache.
	MaxAge time.Duration

	mu     sync.Mutex
	f      *os.File
	pollOK bool
	last   Status
	lastOK bool
	readAt time.Time
	stamp  fileStamp
	buf    bytes.Buffer
}

// fileStamp identifies one version of a regular file.
type fileStamp struct {
	ino, size uint64
	mtime     unix.Timespec
}

func statStamp(path string) (fileStamp, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileStamp{}, false
	}
	return stampOf(&st), true
}

func stampOf(st *unix.Stat_t) fileStamp {
	return fileStamp{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim}
}

// DefaultMaxAge is the Checker's default MaxAge.
const DefaultMaxAge = time.Second

// NewChecker returns a Checker for the mount table at mountinfoPath and the
// cgroup root cgroupRoot. It does not open anything until the first Check.
func NewChecker(mountinfoPath, cgroupRoot string) *Checker {
	return &Checker{path: mountinfoPath, root: cgroupRoot, MaxAge: DefaultMaxAge}
}

// MountinfoPath returns the mount table the checker reads.
func (c *Checker) MountinfoPath() string { return c.path }

// CgroupRoot returns the cgroup root the checker looks at.
func (c *Checker) CgroupRoot() string { return c.root }

// Check returns the current status and its safety verdict (Status.Err). The
// first error is about reading the table; the verdict is in Status.Err.
func (c *Checker) Check() (Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastOK && c.last.Err() == nil && time.Since(c.readAt) < c.MaxAge {
		if c.pollOK && !c.changed() {
			return c.last, nil
		}
		if !c.pollOK {
			if st, ok := statStamp(c.path); ok && st == c.stamp {
				return c.last, nil
			}
		}
	}
	st, err := c.read()
	if err != nil {
		c.lastOK = false
		_ = c.closeLocked()
		return st, err
	}
	c.last, c.lastOK, c.readAt = st, true, time.Now()
	return st, nil
}

// Close releases the mount table file.
func (c *Checker) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeLocked()
}

func (c *Checker) closeLocked() error {
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	c.lastOK = false
	return err
}

// changed polls the open mount table without blocking. procfs reports
// POLLERR|POLLPRI once per change of the mount namespace.
func (c *Checker) changed() bool {
	fds := []unix.PollFd{{Fd: int32(c.f.Fd()), Events: unix.POLLPRI}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return true
		}
		return n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0
	}
}

func (c *Checker) read() (Status, error) {
	if c.f != nil && !c.pollOK {
		// A plain file may have been replaced by rename: reopen it.
		_ = c.closeLocked()
	}
	if c.f == nil {
		f, err := os.Open(c.path)
		if err != nil {
			return Status{CgroupRoot: c.root}, fmt.Errorf("open mount table %q: %w", c.path, err)
		}
		c.f = f
		var sfs unix.Statfs_t
		c.pollOK = unix.Fstatfs(int(f.Fd()), &sfs) == nil && sfs.Type == unix.PROC_SUPER_MAGIC
		if !c.pollOK {
			// Stamp the opened file, not the path: a file renamed over the
			// path after the open must still be seen as a change.
			var st unix.Stat_t
			if unix.Fstat(int(f.Fd()), &st) == nil {
				c.stamp = stampOf(&st)
			}
		}
	} else if _, err := c.f.Seek(0, io.SeekStart); err != nil {
		return Status{CgroupRoot: c.root}, fmt.Errorf("rewind mount table %q: %w", c.path, err)
	}
	if c.pollOK {
		// Consume any pending change notification before reading, so a
		// change during the read is seen by the next Check.
		c.changed()
	}
	c.buf.Reset()
	if _, err := c.buf.ReadFrom(c.f); err != nil {
		return Status{CgroupRoot: c.root}, fmt.Errorf("read mount table %q: %w", c.path, err)
	}
	st, err := Parse(bytes.NewReader(c.buf.Bytes()), c.root)
	if err != nil {
		return st, fmt.Errorf("mount table %q: %w", c.path, err)
	}
	return st, nil
}
