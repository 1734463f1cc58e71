package hostcheck

import (
	"bytes"
	"fmt"
	"sync"
	"time"
)

// Checker re-checks the host mount table cheaply on every call.
//
// It keeps the table open and reads and parses it again only when it
// changed: on procfs (/proc/<pid>/mountinfo) a non-blocking poll(2) asks the
// kernel, which raises POLLPRI on any mount, umount or remount; other files
// (fixtures, copies) are re-read when their inode, size or modification time
// changed. Watch uses the same change detection.
//
// As a safety net against a missed notification, an unsafe verdict is
// never served from the cache (a refusal costs one re-read, and a restored
// nsdelegate is seen at once), and no verdict is older than MaxAge.
type Checker struct {
	path string
	root string
	// MaxAge bounds how long a safe verdict is served from the cache.
	MaxAge time.Duration

	mu sync.Mutex
	// w is the open table; nil before the first read and after a failed
	// one, so that no verdict is cached then.
	w      *tableWatcher
	last   Status
	readAt time.Time
	buf    bytes.Buffer
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
	if c.w != nil && c.last.Err() == nil && time.Since(c.readAt) < c.MaxAge {
		if changed, err := c.w.changed(nil, 0); err == nil && !changed {
			return c.last, nil
		}
	}
	st, err := c.read()
	if err != nil {
		_ = c.closeLocked()
		return st, err
	}
	c.last, c.readAt = st, time.Now()
	return st, nil
}

// Close releases the mount table file.
func (c *Checker) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeLocked()
}

func (c *Checker) closeLocked() error {
	if c.w == nil {
		return nil
	}
	err := c.w.Close()
	c.w = nil
	return err
}

func (c *Checker) read() (Status, error) {
	if c.w == nil {
		w, err := openTable(c.path)
		if err != nil {
			return Status{CgroupRoot: c.root}, err
		}
		c.w = w
	}
	if err := c.w.readAll(&c.buf); err != nil {
		return Status{CgroupRoot: c.root}, err
	}
	st, err := Parse(bytes.NewReader(c.buf.Bytes()), c.root)
	if err != nil {
		return st, fmt.Errorf("mount table %q: %w", c.path, err)
	}
	return st, nil
}
