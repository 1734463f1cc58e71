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
// After a change, a /proc/<pid>/mountinfo table is not read again whole
// once the kernel's own answer about the cgroup root (statmount(2), Linux
// 6.11+; mountProbe) agreed with the table on a safe verdict: the probe
// costs a few system calls whatever the node's number of mounts. Mode says
// which is in use.
//
// decideCheck holds every rule about what is served from the cache and
// when the probe is trusted; among them, as a safety net against a missed
// notification, an unsafe verdict is never cached (a refusal costs one
// re-read, and a restored nsdelegate is seen at once), and no verdict is
// older than MaxAge.
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
	// one.
	w *tableWatcher
	// cached is the verdict kept for later checks, read at readAt; nil
	// when there is none (w is nil, or the last verdict was not safe).
	cached *Status
	readAt time.Time
	buf    bytes.Buffer
	// probe answers a safe verdict without reading the table (statmount.go)
	// once it agreed with the table (probeOK). It is opened with the
	// table, and probeNote says why there is none.
	probe     *mountProbe
	probeOK   bool
	probeNote string
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
// It looks at what decideCheck asks for, one thing at a time.
func (c *Checker) Check() (Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil {
		if err := c.open(); err != nil {
			_ = c.closeLocked()
			return Status{CgroupRoot: c.root}, err
		}
	}
	f := checkFacts{cached: c.cached, age: time.Since(c.readAt), maxAge: c.MaxAge, probe: c.trust()}
	for {
		d := decideCheck(f)
		if d.consume {
			// Best effort: after a failed poll the next one fails too, and
			// the verdict is not served from the cache.
			_, _ = c.w.changed(nil, 0)
		}
		switch d.next {
		case stepPoll:
			f.poll = pollQuiet
			if changed, err := c.w.changed(nil, 0); err != nil {
				f.poll = pollFailed
			} else if changed {
				f.poll = pollChanged
			}
		case stepProbe:
			st, ok, err := c.probe.safe(c.root)
			f.probed = &probeAnswer{st: st, safe: ok, err: err}
		case stepTable:
			st, err := c.readTable()
			f.table, f.tableErr = &st, err
		default:
			return c.apply(d, f)
		}
	}
}

// apply carries out decideCheck's final decision d on the facts f.
func (c *Checker) apply(d checkDecision, f checkFacts) (Status, error) {
	switch {
	case d.probe == probeAbsent && c.probe != nil:
		c.dropProbe(d.note)
	case d.probe == probeTrusted:
		c.probeOK = true
	}
	var st Status
	switch d.from {
	case fromCache:
		return *c.cached, nil
	case fromError:
		_ = c.closeLocked()
		return *f.table, f.tableErr
	case fromProbe:
		st = f.probed.st
	case fromTable:
		st = *f.table
	}
	c.cached = nil
	if d.keep {
		// A copy of its own: taking st's address would move st to the
		// heap on every call, the cached ones too.
		kept := st
		c.cached, c.readAt = &kept, time.Now()
	}
	return st, nil
}

// trust says how far the probe is trusted now.
func (c *Checker) trust() probeTrust {
	switch {
	case c.probe == nil:
		return probeAbsent
	case c.probeOK:
		return probeTrusted
	}
	return probeUntrusted
}

// Close releases the mount table file.
func (c *Checker) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeLocked()
}

func (c *Checker) closeLocked() error {
	c.dropProbe("")
	c.cached = nil
	if c.w == nil {
		return nil
	}
	err := c.w.Close()
	c.w = nil
	return err
}

// open opens the table and, for a procfs table, the probe.
func (c *Checker) open() error {
	w, err := openTable(c.path)
	if err != nil {
		return err
	}
	c.w = w
	if w.procfs {
		p, err := openProbe(c.path, c.root)
		if err != nil {
			c.probeNote = err.Error()
		}
		c.probe = p
	}
	return nil
}

// readTable reads and parses the whole table.
func (c *Checker) readTable() (Status, error) {
	if err := c.w.readAll(&c.buf); err != nil {
		return Status{CgroupRoot: c.root}, err
	}
	st, err := ParseMountinfo(bytes.NewReader(c.buf.Bytes()), c.root)
	if err != nil {
		return st, fmt.Errorf("mount table %q: %w", c.path, err)
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
