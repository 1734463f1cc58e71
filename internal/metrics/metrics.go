// Package metrics defines what the NRI plugin reports about its work: the
// Recorder interface and a no-op implementation.
//
// Use Recorder to count something cgdelegate did: the plugin calls it from
// its event handlers (internal to nri, wired with nri.WithMetrics). The
// Prometheus exporter, internal/metrics/prom, implements it; nothing here
// serves or stores anything.
package metrics

import "time"

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
}

// Nop records nothing.
type Nop struct{}

// Container implements Recorder.
func (Nop) Container(string, error) {}

// Event implements Recorder.
func (Nop) Event(string, time.Duration) {}

// Updates implements Recorder.
func (Nop) Updates(int, int) {}
