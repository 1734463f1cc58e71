// Package reconnect keeps an NRI plugin connected: when the runtime drops
// the connection (a request over plugin_request_timeout, a runtime
// restart, a protocol error), it connects again after a backoff instead of
// exiting, so annotated pods wait for seconds, not for a supervisor's
// restart backoff.
//
// Use it around stub.Run: the NRI stub can be run again after Run returns.
// A reconnected plugin is configured and synchronized by the runtime again,
// which rebuilds its state. Not for anything that must not outlive a
// connection.
package reconnect

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Backoff is the wait before each reconnection: Min after a connection
// that lasted at least Reset, doubling on every quick failure up to Max.
type Backoff struct {
	// Min is the first wait (and the wait after a long connection).
	Min time.Duration
	// Max caps the doubling.
	Max time.Duration
	// Reset is how long a connection must last for the next wait to be
	// Min again.
	Reset time.Duration
}

// Default is the backoff cgdelegate runs with: a dropped plugin is back
// within a second, a runtime that is down is retried every 30 s at most.
var Default = Backoff{Min: time.Second, Max: 30 * time.Second, Reset: time.Minute}

// Run calls run until ctx is done, waiting between calls as b says, and
// logs every lost connection (run returning while ctx is not done). It
// returns nil once ctx is done.
func Run(ctx context.Context, log *slog.Logger, b Backoff, run func(context.Context) error) error {
	if b.Min <= 0 || b.Max < b.Min {
		return fmt.Errorf("reconnect: backoff Min %s, Max %s: want 0 < Min <= Max", b.Min, b.Max)
	}
	wait := b.Min
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		lasted := time.Since(start)
		if lasted >= b.Reset {
			wait = b.Min
		}
		log.Error("connection to the runtime lost; reconnecting",
			"error", err, "attempt", attempt, "connected", lasted.Round(time.Millisecond), "retryIn", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, b.Max)
	}
}
