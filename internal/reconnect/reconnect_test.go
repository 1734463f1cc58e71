package reconnect

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRunBacksOff(t *testing.T) {
	tests := []struct {
		name string
		b    Backoff
		// connected is how long each run lasts before it fails.
		connected time.Duration
		// want are the minimum gaps between the ends and starts of runs.
		want []time.Duration
	}{
		{
			"quick failures double up to Max",
			Backoff{Min: 20 * time.Millisecond, Max: 80 * time.Millisecond, Reset: time.Hour},
			0,
			[]time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond, 80 * time.Millisecond},
		},
		{
			"long connections wait Min",
			Backoff{Min: 20 * time.Millisecond, Max: 80 * time.Millisecond, Reset: 10 * time.Millisecond},
			15 * time.Millisecond,
			[]time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			var starts, ends []time.Time
			run := func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				starts = append(starts, time.Now())
				time.Sleep(tc.connected)
				ends = append(ends, time.Now())
				if len(starts) == len(tc.want)+1 {
					cancel()
				}
				return errors.New("ttrpc: server closed")
			}
			var logs bytes.Buffer
			if err := Run(ctx, slog.New(slog.NewTextHandler(&logs, nil)), tc.b, run); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if len(starts) != len(tc.want)+1 {
				t.Fatalf("run called %d times, want %d", len(starts), len(tc.want)+1)
			}
			for i, w := range tc.want {
				gap := starts[i+1].Sub(ends[i])
				if gap < w || gap > w+time.Second {
					t.Errorf("wait %d: %s, want %s", i+1, gap, w)
				}
			}
			if n := strings.Count(logs.String(), "connection to the runtime lost"); n != len(tc.want) {
				t.Errorf("%d losses logged, want %d:\n%s", n, len(tc.want), logs.String())
			}
			if !strings.Contains(logs.String(), "ttrpc: server closed") {
				t.Errorf("the loss's error is not logged:\n%s", logs.String())
			}
		})
	}
}

// A cancelled context ends the wait, not only a run.
func TestRunStopsDuringWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	run := func(context.Context) error {
		calls++
		time.AfterFunc(10*time.Millisecond, cancel)
		return errors.New("lost")
	}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, slog.New(slog.DiscardHandler), Backoff{Min: time.Hour, Max: time.Hour}, run) }()
	select {
	case err := <-done:
		if err != nil || calls != 1 {
			t.Errorf("Run = %v after %d calls, want nil after 1", err, calls)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its context was cancelled during the wait")
	}
}

func TestRunRefusesBadBackoff(t *testing.T) {
	for _, b := range []Backoff{{}, {Min: time.Second, Max: time.Millisecond}} {
		err := Run(context.Background(), slog.New(slog.DiscardHandler), b, func(context.Context) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "Min") {
			t.Errorf("backoff %+v: %v, want an error naming Min", b, err)
		}
	}
}

// GiveUp quick losses in a row end Run with ErrGaveUp and the last loss; a
// long connection in between starts the count again.
func TestRunGivesUp(t *testing.T) {
	tests := []struct {
		name string
		// lasts is how long each run lasts; the test fails if Run calls
		// run more often.
		lasts []time.Duration
		want  int // calls before Run gives up
	}{
		{"three quick losses", []time.Duration{0, 0, 0}, 3},
		{"a long connection resets the count", []time.Duration{0, 0, 30 * time.Millisecond, 0, 0, 0}, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			last := errors.New("ttrpc: server closed")
			run := func(context.Context) error {
				if calls == len(tc.lasts) {
					t.Fatalf("run called %d times, want %d", calls+1, tc.want)
				}
				time.Sleep(tc.lasts[calls])
				calls++
				return last
			}
			b := Backoff{Min: time.Millisecond, Max: time.Millisecond, Reset: 20 * time.Millisecond, GiveUp: 3}
			err := Run(context.Background(), slog.New(slog.DiscardHandler), b, run)
			if !errors.Is(err, ErrGaveUp) || !errors.Is(err, last) {
				t.Errorf("Run = %v, want ErrGaveUp wrapping the last loss", err)
			}
			if calls != tc.want {
				t.Errorf("run called %d times, want %d", calls, tc.want)
			}
		})
	}
}
