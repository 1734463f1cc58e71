package metrics

import "sync/atomic"

// Outcomes counts CreateContainer decisions exactly, by index (the
// writable.Outcome value), with one atomic add each: the only metrics cost
// on the container path. The Recorder that hands it out reads it at scrape
// time.
//
// Index 0 (writable.Unchanged: nothing asked, the mount left alone, by far
// the most common decision) costs nothing once the Recorder derives its
// count from the CreateContainer requests it sees answered (SetImplicit):
// Inc(0) then only reads a flag, so the default container's path has no
// atomic add at all.
type Outcomes struct {
	n        [MaxOutcomes]atomic.Uint64
	implicit atomic.Bool
}

// MaxOutcomes bounds the indexes Outcomes counts.
const MaxOutcomes = 8

// Inc counts one decision with index i; an index out of range is not
// counted, nor is index 0 once it is implicit.
func (o *Outcomes) Inc(i int) {
	if i == 0 && o.implicit.Load() {
		return
	}
	if i >= 0 && i < MaxOutcomes {
		o.n[i].Add(1)
	}
}

// Load is the count of index i (0 out of range). Index 0 stops growing
// once it is implicit.
func (o *Outcomes) Load(i int) uint64 {
	if i >= 0 && i < MaxOutcomes {
		return o.n[i].Load()
	}
	return 0
}

// SetImplicit stops counting index 0: the Recorder derives it from now on.
// It can not be undone.
func (o *Outcomes) SetImplicit() { o.implicit.Store(true) }

// Implicit reports whether index 0 is derived rather than counted.
func (o *Outcomes) Implicit() bool { return o.implicit.Load() }
