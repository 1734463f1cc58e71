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
	// Event records how long the plugin took to handle one NRI event
	// (its NRI name, e.g. "CreateContainer").
	Event(name string, d time.Duration)
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
type Outcomes struct{ n [MaxOutcomes]atomic.Uint64 }

// MaxOutcomes bounds the indexes Outcomes counts.
const MaxOutcomes = 8

// Inc counts one decision with index i; an index out of range is not
// counted.
func (o *Outcomes) Inc(i int) {
	if i >= 0 && i < MaxOutcomes {
		o.n[i].Add(1)
	}
}

// Load is the count of index i (0 out of range).
func (o *Outcomes) Load(i int) uint64 {
	if i >= 0 && i < MaxOutcomes {
		return o.n[i].Load()
	}
	return 0
}

// Nop records nothing.
type Nop struct{}

// Container implements Recorder.
func (Nop) Container(string, error) {}

// Event implements Recorder.
func (Nop) Event(string, time.Duration) {}

// Updates implements Recorder.
func (Nop) Updates(int, int) {}

// Outcomes implements Recorder: nil, nothing is counted.
func (Nop) Outcomes() *Outcomes { return nil }
