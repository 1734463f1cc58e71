package cpumanager

import (
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// backoff is the wait before each retry of a container's failed update:
// min after its first failure, doubling up to max; after attempts failed
// sends in a row its update is given up.
type backoff struct {
	min, max time.Duration
	attempts int
}

// defaultBackoff retries a container for about 21 s: waits of 100 ms,
// 200 ms, … 3.2 s, then 5 s, ten sends in all.
var defaultBackoff = backoff{min: 100 * time.Millisecond, max: 5 * time.Second, attempts: 10}

// delay is the wait after the n-th failure in a row (n >= 1).
func (b backoff) delay(n int) time.Duration {
	d := b.min
	for i := 1; i < n && d < b.max; i++ {
		d *= 2
	}
	return min(d, b.max)
}

// clock is the time retries are scheduled by; tests inject a fake one.
type clock interface {
	Now() time.Time
	After(time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// retry is a queued container: how many of its sends failed in a row,
// when it is due (the zero time: at once) and since when it is queued.
type retry struct {
	failures int
	due      time.Time
	since    time.Time
}

// settle queues, after a send, the failed containers for a retry and the
// sent ones whose assignment changed meanwhile for at once, each only if
// the Manager in force still knows it and an event did not queue it
// again already (it then goes at once, with its current assignment).
func (s *Sender) settle(batch []policy.Assignment, taken map[string]int, failed map[string]bool) {
	pn := s.manager()
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, a := range batch {
		id := a.ContainerID
		cur, known := pn.Assignment(id)
		if _, queued := s.queue[id]; queued || !known {
			continue
		}
		if !failed[id] {
			if !sameCPUs(cur, a) {
				s.queue[id] = retry{}
			}
			continue
		}
		n := taken[id] + 1
		if n >= s.backoff.attempts {
			s.log.Error("container update given up; the container keeps its cpuset until its next update or Synchronize",
				"container", id, "attempts", n)
			if s.gaveUp != nil {
				s.gaveUp(cur, n)
			}
			continue
		}
		d := s.backoff.delay(n)
		s.queue[id] = retry{failures: n, due: now.Add(d)}
		s.log.Debug("container update retried", "container", id, "failures", n, "retryIn", d)
	}
}

// failureLog is where a failed send is logged: a warning when a container
// of it failed before, info when each failed for the first time. A
// container that stops while its update is in flight fails once (the
// runtime can not update a task that exited), and is dropped when its
// StopContainer arrives: no warning for that.
func (s *Sender) failureLog(taken map[string]int, failed map[string]bool) func(msg string, args ...any) {
	for id := range failed {
		if taken[id] > 0 {
			return s.log.Warn
		}
	}
	return s.log.Info
}

// failedIDs are the ids of the failed updates that were sent (in batch).
func failedIDs(us []*api.ContainerUpdate, batch []policy.Assignment) map[string]bool {
	failed := make(map[string]bool, len(us))
	for _, u := range us {
		failed[u.GetContainerId()] = true
	}
	ids := make(map[string]bool, len(us))
	for _, a := range batch {
		if failed[a.ContainerID] {
			ids[a.ContainerID] = true
		}
	}
	return ids
}
