package host

import (
	"bytes"
	"fmt"
	"sync"
	"time"
)

// Checker re-checks the host mount table cheaply on every call.
//
// It keeps the table open and reads it again only when it changed: on
// procfs (/proc/<pid>/mountinfo) a non-blocking poll(2) asks the kernel,
// which raises POLLPRI on any mount, umount or remount; other files
// (fixtures, copies) are re-read when their inode, size or modification time
// changed. Watch uses the same change detection.
//
// As a safety net against a missed notification, an unsafe verdict is
// never served from the cache (a refusal costs one re-read, and a restored
// nsdelegate is seen at once), and no verdict is older than MaxAge.
//
// After a change, a /proc/<pid>/mountinfo table is not read again whole
// once the kernel's own answer about the cgroup root (statmount(2), Linux
// 6.11+; mountProbe) agreed with the table on a safe verdict: the probe
// costs a few system calls whatever the node's number of mounts. Any other
// verdict, and any probe that fails, goes back to the table. Mode says
// which is in use.
//
// Nothing watches the table in the background: every pod a runtime starts
// changes it several times, and a watcher woken at each change cost more
// than the poll(2) each check asks (a busy node's plugin spent an eighth
// of its CPU in one).
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
	// probe answers a safe verdict without reading the table (statmount.go)
	// once it agreed with the table; probeTried is set after the first
	// attempt to open one, and probeNote says why there is none.
	probe      *mountProbe
	probeOK    bool
	probeTried bool
	probeNote  string
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
	c.dropProbe("")
	c.probeTried = false
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
	if !c.probeTried && c.w.procfs {
		c.probeTried = true
		p, err := openProbe(c.path, c.root)
		if err != nil {
			c.probeNote = err.Error()
		}
		c.probe = p
	}
	if c.probe != nil && c.probeOK {
		st, ok, err := c.probe.safe(c.root)
		if err != nil {
			c.dropProbe(err.Error())
		}
		if ok {
			// The table's pending change notification is older than this
			// answer.
			_, _ = c.w.changed(nil, 0)
			return st, nil
		}
	}
	if err := c.w.readAll(&c.buf); err != nil {
		return Status{CgroupRoot: c.root}, err
	}
	st, err := ParseMountinfo(bytes.NewReader(c.buf.Bytes()), c.root)
	if err != nil {
		return st, fmt.Errorf("mount table %q: %w", c.path, err)
	}
	if c.probe != nil && !c.probeOK && st.Err() == nil {
		// Trust the probe once it agrees with the table on a safe verdict.
		pst, ok, err := c.probe.safe(c.root)
		switch {
		case err != nil:
			c.dropProbe(err.Error())
		case !ok || pst != st:
			c.dropProbe(fmt.Sprintf("statmount says %+v, the mount table %+v", pst, st))
		default:
			c.probeOK = true
		}
	}
	return st, nil
}

// dropProbe stops using the probe, for the reason note.
func (c *Checker) dropProbe(note string) {
	if c.probe != nil {
		_ = c.probe.Close()
	}
	c.probe, c.probeOK = nil, false
	if note != "" {
		c.probeNote = note
	}
}

// Mode says how the checker reads a safe verdict: "statmount" (the
// kernel's answer about the cgroup root, see mountProbe) or "mountinfo"
// (the whole table), with the reason statmount is not used when there is
// one.
func (c *Checker) Mode() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.probeOK:
		return "statmount"
	case c.probeNote != "":
		return "mountinfo (statmount: " + c.probeNote + ")"
	}
	return "mountinfo"
}
