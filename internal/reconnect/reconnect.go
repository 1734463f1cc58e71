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
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ErrGaveUp is returned when the connection was lost too often in a row.
var ErrGaveUp = errors.New("reconnect: giving up")

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
	// GiveUp ends Run with an error after this many losses in a row of
	// connections shorter than Reset (0: never), so that a process stuck in
	// a bad state is restarted by its supervisor instead of timing out
	// every new connection.
	GiveUp int
}

// Default is the backoff cgdelegate runs with: a dropped plugin is back
// within a second; after 6 quick losses in a row (about a minute of
// waits) the plugin exits and the kubelet or systemd restarts it.
var Default = Backoff{Min: time.Second, Max: 30 * time.Second, Reset: time.Minute, GiveUp: 6}

// Run calls run until ctx is done, waiting between calls as b says, and
// logs every lost connection (run returning while ctx is not done). It
// returns nil once ctx is done, and an error wrapping ErrGaveUp and the
// last loss after b.GiveUp quick losses in a row.
func Run(ctx context.Context, log *slog.Logger, b Backoff, run func(context.Context) error) error {
	if b.Min <= 0 || b.Max < b.Min {
		return fmt.Errorf("reconnect: backoff Min %s, Max %s: want 0 < Min <= Max", b.Min, b.Max)
	}
	wait, quick := b.Min, 0
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		lasted := time.Since(start)
		if lasted >= b.Reset {
			wait, quick = b.Min, 0
		} else if quick++; b.GiveUp > 0 && quick >= b.GiveUp {
			return fmt.Errorf("%w: %d connections in a row lasted less than %s; last: %w", ErrGaveUp, quick, b.Reset, err)
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
