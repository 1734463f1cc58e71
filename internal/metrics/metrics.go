// Package metrics defines what the NRI plugin reports about its work: the
// Recorder interface and a no-op implementation.
//
// Use Recorder to count something cgdelegate did: the plugin calls it from
// its event handlers (internal to nri, wired with nri.WithMetrics). The
// Prometheus exporter, internal/metrics/prom, implements it; nothing here
// serves or stores anything.
package metrics

import (
	"sync/atomic"
	"time"
)

// Recorder receives what the plugin did. It is called on the container
// creation path, so implementations must be cheap and safe for concurrent
// use.
type Recorder interface {
	// Container records one CreateContainer decision: outcome is the
	// writable.Outcome's name ("writable", "readonly", "guarded",
	// "privileged", "unchanged"), and err the refusal (outcome is then
	// "refused").
	Container(outcome string, err error)
	// Event records how long the plugin took to answer one NRI request
	// (its NRI event name, e.g. "CreateContainer"), and whether the answer
	// was an error (a refused container, or a request that could not be
	// decoded).
	Event(name string, d time.Duration, failed bool)
	// Updates records one batch of container updates sent after an event:
	// how many were sent and how many the runtime failed.
	Updates(sent, failed int)
	// Outcomes is where the plugin counts the decisions that are not
	// refusals, by writable.Outcome value, instead of calling Container:
	// one atomic add, no call through this interface. Nil: they go to
	// Container too.
	Outcomes() *Outcomes
}

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

// Nop records nothing.
type Nop struct{}

// Container implements Recorder.
func (Nop) Container(string, error) {}

// Event implements Recorder.
func (Nop) Event(string, time.Duration, bool) {}

// Updates implements Recorder.
func (Nop) Updates(int, int) {}

// Outcomes implements Recorder: nil, nothing is counted.
func (Nop) Outcomes() *Outcomes { return nil }
