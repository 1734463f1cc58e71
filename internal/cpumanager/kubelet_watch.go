package cpumanager

import (
	"os"
)

// stateWatcher tells whether the state file changed since it last looked, from
// what stat says: the file appeared or disappeared, or its identity, size
// or modification time differ. The kubelet writes its checkpoint by
// renaming a new file over the old one, so every write shows. A call costs
// one stat. Not safe for concurrent use.
type stateWatcher struct {
	path string
	last os.FileInfo // nil: missing or unreadable
	seen bool
}

// newStateWatcher returns a watcher of path that has looked once: call it before
// reading the file, so a write after the read shows as a change.
func newStateWatcher(path string) *stateWatcher {
	w := &stateWatcher{path: path}
	w.Changed()
	return w
}

// Changed reports whether the file changed since the last call (always
// true on the first one, and after Forget).
func (w *stateWatcher) Changed() bool {
	fi, err := os.Stat(w.path)
	if err != nil {
		fi = nil
	}
	changed := !w.seen || !sameFile(w.last, fi)
	w.last, w.seen = fi, true
	return changed
}

// Forget makes the next Changed report a change, so that a state that
// could not be read is read again.
func (w *stateWatcher) Forget() { w.seen = false }

func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
