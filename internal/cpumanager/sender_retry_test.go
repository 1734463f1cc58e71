package cpumanager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// fakeClock moves only when the test advances it. Every wait the sender
// starts is reported on waits, so a test knows the sender is waiting for a
// retry (and for how long) before it moves the clock.
type fakeClock struct {
	waits chan time.Duration

	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{waits: make(chan time.Duration, 64), now: time.Unix(1_000_000, 0)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	t := fakeTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	c.waits <- d
	return t.c
}

// Advance moves the clock by d and fires the timers due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.timers = slices.DeleteFunc(c.timers, func(t fakeTimer) bool {
		if t.at.After(c.now) {
			return false
		}
		t.c <- c.now
		return true
	})
}

// testBackoff is short enough to give up in a few attempts.
var testBackoff = backoff{min: 100 * time.Millisecond, max: time.Second, attempts: 6}

// newRetrySender is a sender on m's current value with a fake clock and
// testBackoff, logging as JSON into the returned buffer (read it after
// Wait).
func newRetrySender(m *atomic.Pointer[Manager], rec UpdateRecorder) (*Sender, *fakeClock, *syncBuffer) {
	buf := &syncBuffer{}
	s := NewSender(slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), rec, m.Load, nil)
	clk := newFakeClock()
	s.clock, s.backoff, s.batch, s.hold = clk, testBackoff, 0, 0
	return s, clk, buf
}

func managerPtr(m *Manager) *atomic.Pointer[Manager] {
	var p atomic.Pointer[Manager]
	p.Store(m)
	return &p
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitDone is closed when s.Wait returns.
func waitDone(s *Sender) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		s.Wait()
		close(done)
	}()
	return done
}

// drive runs the sender to the end: it hands every wait the sender starts
// to onWait (by default: advance the clock by it) and returns the waits
// once Wait returns. A wait reported while Wait has returned fails the
// test: Wait covers retries.
func drive(t *testing.T, s *Sender, clk *fakeClock, onWait func(n int, d time.Duration)) []time.Duration {
	t.Helper()
	if onWait == nil {
		onWait = func(_ int, d time.Duration) { clk.Advance(d) }
	}
	done := waitDone(s)
	var waits []time.Duration
	for {
		select {
		case d := <-clk.waits:
			select {
			case <-done:
				t.Fatalf("Wait returned while a retry waited %s", d)
			default:
			}
			waits = append(waits, d)
			onWait(len(waits), d)
		case <-done:
			return waits
		case <-time.After(30 * time.Second): // a hang, not a synchronization
			t.Fatal("sender neither waits nor ends")
		}
	}
}

// nextWait returns the next wait the sender starts.
func nextWait(t *testing.T, clk *fakeClock) time.Duration {
	t.Helper()
	select {
	case d := <-clk.waits:
		return d
	case <-time.After(30 * time.Second): // a hang, not a synchronization
		t.Fatal("the sender never waited for a retry")
		return 0
	}
}

type failFunc func(i int, us []*api.ContainerUpdate) ([]*api.ContainerUpdate, error)

var errBroken = errors.New("connection closed")

// failCalls fails the calls in calls (by index) as a whole.
func failCalls(calls ...int) failFunc {
	return func(i int, _ []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
		if slices.Contains(calls, i) {
			return nil, errBroken
		}
		return nil, nil
	}
}

// failContainer has the runtime fail the update of id in calls (by index;
// none: in every call).
func failContainer(id string, calls ...int) failFunc {
	return func(i int, us []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
		if len(calls) > 0 && !slices.Contains(calls, i) {
			return nil, nil
		}
		var failed []*api.ContainerUpdate
		for _, u := range us {
			if u.GetContainerId() == id {
				failed = append(failed, u)
			}
		}
		return failed, nil
	}
}

func TestBackoffDelay(t *testing.T) {
	tests := []struct {
		name string
		b    backoff
		n    int
		want time.Duration
	}{
		{name: "first failure", b: defaultBackoff, n: 1, want: 100 * time.Millisecond},
		{name: "doubles", b: defaultBackoff, n: 2, want: 200 * time.Millisecond},
		{name: "last below the cap", b: defaultBackoff, n: 6, want: 3200 * time.Millisecond},
		{name: "capped", b: defaultBackoff, n: 7, want: 5 * time.Second},
		{name: "capped far on, no overflow", b: defaultBackoff, n: 1 << 20, want: 5 * time.Second},
		{name: "min is max", b: backoff{min: time.Second, max: time.Second}, n: 3, want: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.delay(tc.n); got != tc.want {
				t.Errorf("delay(%d) = %s, want %s", tc.n, got, tc.want)
			}
		})
	}
	t.Run("default gives up within 30s", func(t *testing.T) {
		var total time.Duration
		for n := 1; n < defaultBackoff.attempts; n++ {
			total += defaultBackoff.delay(n)
		}
		if total > 30*time.Second || total < 10*time.Second {
			t.Errorf("default retries wait %s in all", total)
		}
	})
}

// TestSenderRetry: a call that failed as a whole is sent again, every
// container of it; a container the runtime failed is sent again alone;
// each after the backoff, doubling; what the runtime reports failed but
// was not sent is ignored. Wait returns after the retries. Each failed
// send is counted failed, each sent one sent.
func TestSenderRetry(t *testing.T) {
	tests := []struct {
		name         string
		fail         failFunc
		want         [][]string
		waits        []time.Duration
		sent, failed int
	}{
		{
			name: "whole call failed", fail: failCalls(0),
			want:  [][]string{{"a", "b", "c"}, {"a", "b", "c"}},
			waits: []time.Duration{100 * time.Millisecond}, sent: 3, failed: 3,
		},
		{
			name: "whole call failed twice", fail: failCalls(0, 1),
			want:  [][]string{{"a", "b", "c"}, {"a", "b", "c"}, {"a", "b", "c"}},
			waits: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, sent: 3, failed: 6,
		},
		{
			name: "runtime failed one", fail: failContainer("b", 0),
			want:  [][]string{{"a", "b", "c"}, {"b"}},
			waits: []time.Duration{100 * time.Millisecond}, sent: 3, failed: 1,
		},
		{
			name: "runtime failed one twice", fail: failContainer("b", 0, 1),
			want:  [][]string{{"a", "b", "c"}, {"b"}, {"b"}},
			waits: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, sent: 3, failed: 2,
		},
		{
			name: "failed update never sent is ignored",
			fail: func(i int, _ []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
				if i == 0 {
					return []*api.ContainerUpdate{{ContainerId: "x"}}, nil
				}
				return nil, nil
			},
			want: [][]string{{"a", "b", "c"}}, sent: 3,
		},
		{name: "all sent", want: [][]string{{"a", "b", "c"}}, sent: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			rec := &countUpdates{}
			s, clk, _ := newRetrySender(managerPtr(m), rec)
			u := &fakeUpdater{fail: tc.fail}
			s.SetUpdater(u)
			s.Enqueue(queued("a", "b", "c"))
			waits := drive(t, s, clk, nil)
			calls, overlap := u.result()
			if overlap {
				t.Error("two UpdateContainers calls ran at once")
			}
			if !reflect.DeepEqual(calls, tc.want) {
				t.Fatalf("calls = %v, want %v", calls, tc.want)
			}
			if !slices.Equal(waits, tc.waits) {
				t.Errorf("waits = %v, want %v", waits, tc.waits)
			}
			if rec.sent != tc.sent || rec.failed != tc.failed {
				t.Errorf("counted sent %d failed %d, want %d and %d", rec.sent, rec.failed, tc.sent, tc.failed)
			}
			// The sender is not stuck: the next batch goes out (with a
			// change, or the runtime holds it already).
			shrinkNodePool(t, m)
			s.Enqueue(queued("b"))
			s.Wait()
			if calls, _ := u.result(); !reflect.DeepEqual(calls[len(calls)-1], []string{"b"}) || len(calls) != len(tc.want)+1 {
				t.Fatalf("calls = %v, want the next batch sent", calls)
			}
		})
	}
}

// TestSenderRetryOrder: a retry sends the container's assignment at the
// time of the retry, never the one that failed, and an older assignment
// never follows a newer one: a container queued again by an event while it
// waits for a retry (or while its failed send was in flight) goes at once,
// and its retry is not sent after it.
func TestSenderRetryOrder(t *testing.T) {
	tests := []struct {
		name string
		// inFlight runs inside call 0; onWait when the first retry wait
		// starts (it advances the clock or not).
		inFlight, onWait func(m *Manager, s *Sender, clk *fakeClock, d time.Duration)
		fail             failFunc
		want             [][]string
		waits            int
	}{
		{
			name: "changed while waiting for the retry", fail: failContainer("a", 0),
			onWait: func(m *Manager, _ *Sender, clk *fakeClock, d time.Duration) {
				shrinkNodePool(t, m)
				clk.Advance(d)
			},
			want: [][]string{{"a", "b"}, {"a"}}, waits: 1,
		},
		{
			name: "queued again while waiting for the retry", fail: failContainer("a", 0),
			onWait: func(m *Manager, s *Sender, _ *fakeClock, _ time.Duration) {
				shrinkNodePool(t, m)
				s.Enqueue(queued("a")) // sent at once; the clock does not move
			},
			want: [][]string{{"a", "b"}, {"a"}}, waits: 1,
		},
		{
			name: "queued again in flight, then failed", fail: failContainer("a", 0),
			inFlight: func(m *Manager, s *Sender, _ *fakeClock, _ time.Duration) {
				shrinkNodePool(t, m)
				s.Enqueue(queued("a"))
			},
			// b changed in flight too, and goes again at once.
			want: [][]string{{"a", "b"}, {"a", "b"}}, waits: 0,
		},
		{
			name: "changed in flight, whole call failed", fail: failCalls(0),
			inFlight: func(m *Manager, _ *Sender, _ *fakeClock, _ time.Duration) {
				shrinkNodePool(t, m)
			},
			want: [][]string{{"a", "b"}, {"a", "b"}}, waits: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			old, _ := m.Assignment("a")
			s, clk, _ := newRetrySender(managerPtr(m), nopUpdates{})
			u := &fakeUpdater{fail: tc.fail, during: func(i int) {
				if i == 0 && tc.inFlight != nil {
					tc.inFlight(m, s, clk, 0)
				}
			}}
			s.SetUpdater(u)
			s.Enqueue(queued("a", "b"))
			waits := drive(t, s, clk, func(n int, d time.Duration) {
				if n == 1 && tc.onWait != nil {
					tc.onWait(m, s, clk, d)
					return
				}
				clk.Advance(d)
			})
			calls, overlap := u.result()
			if overlap {
				t.Error("two UpdateContainers calls ran at once")
			}
			if !reflect.DeepEqual(calls, tc.want) || len(waits) != tc.waits {
				t.Fatalf("calls = %v after %d waits, want %v after %d", calls, len(waits), tc.want, tc.waits)
			}
			checkRetryOrder(t, m, u, old.CPUs.String(), tc.inFlight != nil)
		})
	}
}

// checkRetryOrder: a, whose assignment was old, failed with it once, then
// went with its current one, and nothing older after it. When its
// assignment changed in flight, b's last update is its current assignment
// too (otherwise b was sent before the change and nothing queued it:
// shrinkNodePool enqueues nothing).
func checkRetryOrder(t *testing.T, m *Manager, u *fakeUpdater, old string, inFlight bool) {
	t.Helper()
	cur, _ := m.Assignment("a")
	if cur.CPUs.String() == old {
		t.Fatalf("assignment of a stayed %s: the test did not change it", old)
	}
	if want := []string{old, cur.CPUs.String()}; !slices.Equal(u.tried["a"], want) {
		t.Errorf("a was sent %v, want %v", u.tried["a"], want)
	}
	if b, _ := m.Assignment("b"); inFlight && u.cpus["b"] != b.CPUs.String() {
		t.Errorf("b: last sent %q, current %q", u.cpus["b"], b.CPUs)
	}
}

// TestSenderRetryDropsGone: a container the Manager in force no longer
// knows is not retried: removed while it waited, removed while its failed
// send was in flight, or pinning gone.
func TestSenderRetryDropsGone(t *testing.T) {
	tests := []struct {
		name             string
		fail             failFunc
		inFlight, onWait func(m *Manager, pin *atomic.Pointer[Manager])
		want             [][]string
	}{
		{
			name: "removed while waiting", fail: failContainer("a", 0),
			onWait: func(m *Manager, _ *atomic.Pointer[Manager]) { m.policy.RemoveContainer("a") },
			want:   [][]string{{"a", "b"}},
		},
		{
			name: "removed in flight, whole call failed", fail: failCalls(0),
			inFlight: func(m *Manager, _ *atomic.Pointer[Manager]) { m.policy.RemoveContainer("a") },
			want:     [][]string{{"a", "b"}, {"b"}},
		},
		{
			name: "removed in flight, runtime failed it", fail: failContainer("a", 0),
			inFlight: func(m *Manager, _ *atomic.Pointer[Manager]) { m.policy.RemoveContainer("a") },
			want:     [][]string{{"a", "b"}},
		},
		{
			name: "pinning off while waiting", fail: failCalls(0),
			onWait: func(_ *Manager, pin *atomic.Pointer[Manager]) { pin.Store(nil) },
			want:   [][]string{{"a", "b"}},
		},
		{
			name: "manager rebuilt without it while waiting", fail: failCalls(0),
			onWait: func(m *Manager, pin *atomic.Pointer[Manager]) {
				fresh := senderManager(t)
				fresh.policy.RemoveContainer("b")
				pin.Store(fresh)
			},
			want: [][]string{{"a", "b"}, {"a"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			pin := managerPtr(m)
			s, clk, _ := newRetrySender(pin, nopUpdates{})
			u := &fakeUpdater{fail: tc.fail, during: func(i int) {
				if i == 0 && tc.inFlight != nil {
					tc.inFlight(m, pin)
				}
			}}
			s.SetUpdater(u)
			s.Enqueue(queued("a", "b"))
			drive(t, s, clk, func(n int, d time.Duration) {
				if n == 1 && tc.onWait != nil {
					tc.onWait(m, pin)
				}
				clk.Advance(d)
			})
			if calls, _ := u.result(); !reflect.DeepEqual(calls, tc.want) {
				t.Fatalf("calls = %v, want %v", calls, tc.want)
			}
		})
	}
}

// TestSenderGivesUp: a container that keeps failing is retried with the
// backoff doubling up to its cap, given up after the last attempt (logged
// with its id, each failure counted), and never holds back a container
// queued meanwhile, which goes at once.
func TestSenderGivesUp(t *testing.T) {
	ms := func(n time.Duration) time.Duration { return n * time.Millisecond }
	tests := []struct {
		name         string
		fail         failFunc
		want         [][]string
		waits        []time.Duration
		sent, failed int
		givenUp      []string
	}{
		{
			name: "runtime fails one every time", fail: failContainer("b"),
			want: [][]string{{"a", "b"}, {"c"}, {"b"}, {"b"}, {"b"}, {"b"}, {"b"}},
			// The wait for the first retry starts again after c went.
			waits: []time.Duration{ms(100), ms(100), ms(200), ms(400), ms(800), time.Second},
			sent:  2, failed: 6, givenUp: []string{"b"},
		},
		{
			name: "every call fails", fail: func(int, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) { return nil, errBroken },
			// c failed at the time a and b did, so their retries go together.
			want:  [][]string{{"a", "b"}, {"c"}, {"a", "b", "c"}, {"a", "b", "c"}, {"a", "b", "c"}, {"a", "b", "c"}, {"a", "b", "c"}},
			waits: []time.Duration{ms(100), ms(100), ms(200), ms(400), ms(800), time.Second},
			sent:  0, failed: 18, givenUp: []string{"a", "b", "c"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			rec := &countUpdates{}
			s, clk, logs := newRetrySender(managerPtr(m), rec)
			// The give-up callback (the pod Event's) hears of each, once,
			// with the attempts made.
			var toldMu sync.Mutex
			var told []string
			s.SetGiveUp(func(a policy.Assignment, n int) {
				toldMu.Lock()
				defer toldMu.Unlock()
				if n != testBackoff.attempts {
					t.Errorf("%s given up after %d attempts, told %d", a.ContainerID, testBackoff.attempts, n)
				}
				told = append(told, a.ContainerID)
			})
			u := &fakeUpdater{fail: tc.fail}
			s.SetUpdater(u)
			s.Enqueue(queued("a", "b"))
			waits := drive(t, s, clk, func(n int, d time.Duration) {
				if n == 1 {
					s.Enqueue(queued("c")) // while a or b waits for its retry
					return
				}
				clk.Advance(d)
			})
			if calls, _ := u.result(); !reflect.DeepEqual(calls, tc.want) {
				t.Fatalf("calls = %v, want %v", calls, tc.want)
			}
			if !slices.Equal(waits, tc.waits) {
				t.Errorf("waits = %v, want %v", waits, tc.waits)
			}
			for _, d := range waits {
				if d > testBackoff.max {
					t.Errorf("waited %s, over the cap %s", d, testBackoff.max)
				}
			}
			if rec.sent != tc.sent || rec.failed != tc.failed {
				t.Errorf("counted sent %d failed %d, want %d and %d", rec.sent, rec.failed, tc.sent, tc.failed)
			}
			if got := givenUp(t, logs.String()); !slices.Equal(got, tc.givenUp) {
				t.Errorf("given up %v, want %v; logs:\n%s", got, tc.givenUp, logs)
			}
			toldMu.Lock()
			slices.Sort(told)
			if !slices.Equal(told, tc.givenUp) {
				t.Errorf("the give-up callback was told %v, want %v", told, tc.givenUp)
			}
			toldMu.Unlock()
		})
	}
}

// givenUp are the containers whose give-up the JSON logs record, sorted.
func givenUp(t *testing.T, logs string) []string {
	t.Helper()
	var ids []string
	for line := range strings.Lines(logs) {
		var rec struct {
			Msg       string
			Container string
			Attempts  int
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.HasPrefix(rec.Msg, "container update given up") {
			if rec.Attempts != testBackoff.attempts {
				t.Errorf("%s given up after %d attempts, want %d", rec.Container, rec.Attempts, testBackoff.attempts)
			}
			ids = append(ids, rec.Container)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestSenderClose: Close ends the sender for good: it waits for a send
// under way (no longer than its context allows), drops what is queued and
// the retries, and later Enqueue and SetUpdater calls send nothing; a
// second Close only waits.
func TestSenderClose(t *testing.T) {
	tests := []struct {
		name string
		// at is where Close is called: "idle", "in flight" or "waiting"
		// (for a retry).
		at   string
		want [][]string
	}{
		{name: "idle", at: "idle", want: nil},
		{name: "mid-send: bounded, waits for it, drops the queue and its retry", at: "in flight", want: [][]string{{"a"}}},
		{name: "waiting for a retry", at: "waiting", want: [][]string{{"a"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			s, clk, _ := newRetrySender(managerPtr(m), nopUpdates{})
			started, release := make(chan struct{}), make(chan struct{})
			u := &fakeUpdater{fail: failCalls(0), during: func(i int) {
				if i == 0 && tc.at == "in flight" {
					close(started)
					<-release
				}
			}}
			s.SetUpdater(u)
			switch tc.at {
			case "in flight":
				s.Enqueue(queued("a"))
				<-started
				s.Enqueue(queued("b")) // queued behind the send: dropped
				closeMidSend(t, s, u, release)
			case "waiting":
				s.Enqueue(queued("a"))
				nextWait(t, clk) // a failed and waits for its retry
				if err := s.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			default:
				if err := s.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			s.Wait() // ended, without the clock moving
			if err := s.Close(context.Background()); err != nil {
				t.Errorf("second Close: %v", err)
			}

			// Enqueue after Close: nothing sent, nothing started.
			s.Enqueue(queued("a", "b", "c"))
			s.SetUpdater(u)
			s.mu.Lock()
			running, queue := s.running, len(s.queue)
			s.mu.Unlock()
			if running || queue != 0 {
				t.Errorf("after Close: running %v, %d queued", running, queue)
			}
			s.Wait()
			if calls, _ := u.result(); !reflect.DeepEqual(calls, tc.want) {
				t.Fatalf("calls = %v, want %v", calls, tc.want)
			}
		})
	}
}

// closeMidSend closes s while u's call is held until release: a Close
// whose context is done returns at once, saying a send is under way; one
// without a deadline returns only once the send ended.
func closeMidSend(t *testing.T, s *Sender, u *fakeUpdater, release chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with a done context during a send: %v, want it cancelled", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the send was in flight", err)
	case <-time.After(20 * time.Millisecond): // a negative check, not a synchronization
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.inflight != 0 {
		t.Error("Close returned while the send was in flight")
	}
}

// TestSenderNoLeakClosed: Close ends the sending goroutine even while it
// waits for a retry that would never come (the clock never moves).
func TestSenderNoLeakClosed(t *testing.T) {
	base := runtime.NumGoroutine()
	m := senderManager(t)
	s, clk, _ := newRetrySender(managerPtr(m), nopUpdates{})
	u := &fakeUpdater{fail: failCalls(0)}
	s.SetUpdater(u)
	s.Enqueue(queued("a", "b", "c"))
	nextWait(t, clk)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSenderHold: nothing is sent until no event has queued anything for
// the hold, and no container waits longer than the longest hold after it
// was first queued, however often events come; a retry keeps its own time.
func TestSenderHold(t *testing.T) {
	const hold, maxHold = time.Second, 5 * time.Second
	t0 := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name string
		last time.Time // the last event
		r    retry
		want time.Time
	}{
		{name: "one event", last: t0, r: retry{since: t0}, want: at(hold)},
		{name: "a later event renews the hold", last: at(600 * time.Millisecond), r: retry{since: t0}, want: at(1600 * time.Millisecond)},
		{name: "a steady stream waits the longest hold", last: at(4800 * time.Millisecond), r: retry{since: t0}, want: at(maxHold)},
		{name: "a retry keeps its time", last: t0, r: retry{failures: 1, due: at(3 * time.Second)}, want: at(3 * time.Second)},
		{name: "a retry due in the hold waits for it", last: t0, r: retry{failures: 1, due: at(100 * time.Millisecond), since: t0}, want: at(hold)},
		// Queued with no time (a container whose assignment changed in
		// flight): due long ago, so at once.
		{name: "changed in flight: at once", last: t0, r: retry{}, want: time.Time{}.Add(maxHold)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sender{hold: hold, maxHold: maxHold, last: tc.last}
			if got := s.dueAt(tc.r); !got.Equal(tc.want) {
				t.Fatalf("dueAt = %s, want %s", got, tc.want)
			}
		})
	}

	// Wired: an Enqueue makes the sender wait the hold, then send.
	m := senderManager(t)
	s, clk, _ := newRetrySender(managerPtr(m), &countUpdates{})
	s.hold, s.maxHold = hold, maxHold
	u := &fakeUpdater{}
	s.SetUpdater(u)
	s.Enqueue(queued("a"))
	if d := nextWait(t, clk); d != hold {
		t.Fatalf("the sender waits %s, want the hold %s", d, hold)
	}
	if calls, _ := u.result(); len(calls) != 0 {
		t.Fatalf("sent during the hold: %v", calls)
	}
	clk.Advance(hold)
	s.Wait()
	if calls, _ := u.result(); !reflect.DeepEqual(calls, [][]string{{"a"}}) {
		t.Fatalf("calls = %v after the hold, want [[a]]", calls)
	}
}

// TestSenderFailureLevel: a container's first failed send is logged at
// info, a later one as a warning.
func TestSenderFailureLevel(t *testing.T) {
	m := senderManager(t)
	s, clk, buf := newRetrySender(managerPtr(m), &countUpdates{})
	u := &fakeUpdater{fail: failContainer("b", 0, 1)}
	s.SetUpdater(u)
	s.Enqueue(queued("a", "b"))
	drive(t, s, clk, nil)
	var levels []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(rec.Msg, "runtime failed some container updates") {
			levels = append(levels, rec.Level)
		}
	}
	if want := []string{"INFO", "WARN"}; !slices.Equal(levels, want) {
		t.Fatalf("failed sends logged at %v, want %v:\n%s", levels, want, buf.String())
	}
}
