package advert

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// eventCounts records the poster's counter calls.
type eventCounts struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (c *eventCounts) count(reason, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[[2]string]int{}
	}
	c.n[[2]string{reason, result}]++
}

func (c *eventCounts) get(reason, result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[[2]string{reason, result}]
}

// fakeNow is a clock the test moves.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeNow) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
}

// newPoster returns a poster (podEvents: on) on node "node-a" talking to
// f, its counts, its clock and its log.
func newPoster(t *testing.T, f *fakeAPI) (*EventPoster, *eventCounts, *fakeNow, *syncBuffer) {
	t.Helper()
	dir, getenv := f.serviceAccount(t)
	cfg := config.Default()
	cfg.PodEvents = config.NodeLabelOn
	cfg.ServiceAccountDir = dir
	logs := &syncBuffer{}
	counts := &eventCounts{}
	p, err := NewEventPoster(cfg, getenv, slog.New(slog.NewTextHandler(logs, nil)), counts.count)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		t.Fatal("podEvents: on returned no poster")
	}
	clk := &fakeNow{t: time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)}
	p.now = clk.now
	return p, counts, clk, logs
}

// drain runs p until want requests reached f (or a timeout), then stops it
// and waits for Run to return.
func drain(t *testing.T, p *EventPoster, f *fakeAPI, want int) []request {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(f.seen()) < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// Whatever else is queued goes too before the stop (none is expected).
	for len(p.queue) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	cancel()
	<-done
	return f.seen()
}

// sentEvent is the part of a posted Event a test checks.
type sentEvent struct {
	APIVersion, Kind string
	Metadata         struct{ Name, Namespace string }
	EventTime        string
	ReportingController, ReportingInstance,
	Action, Reason, Note, Type string
	Regarding struct {
		APIVersion, Kind, Namespace, Name, UID string
	}
}

func decodeEvent(t *testing.T, r request) sentEvent {
	t.Helper()
	var e sentEvent
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("posted body %q: %v", r.body, err)
	}
	return e
}

func podEvent(pod, reason, msg string) PodEvent {
	return PodEvent{Namespace: "team-a", Name: pod, UID: "uid-" + pod, Container: "app", Reason: reason, Action: "Audit", Message: msg}
}

// TestEventPosted: each reason reaches the API as an events.k8s.io/v1
// Event of type Warning on the pod (namespace, name, uid), from our
// controller on this node, naming the container and the cause.
func TestEventPosted(t *testing.T) {
	for _, reason := range EventReasons {
		t.Run(reason, func(t *testing.T) {
			f := newFakeAPI(t)
			p, counts, _, _ := newPoster(t, f)
			p.Post(podEvent("web-1", reason, "the cause"))
			got := drain(t, p, f, 1)
			if len(got) != 1 {
				t.Fatalf("%d requests, want 1: %+v", len(got), got)
			}
			r := got[0]
			if r.method != http.MethodPost || r.path != "/apis/events.k8s.io/v1/namespaces/team-a/events" ||
				r.contentType != "application/json" || r.auth != "Bearer token-1" {
				t.Errorf("request %s %s (%s, %s), want POST of an Event into team-a with the token", r.method, r.path, r.contentType, r.auth)
			}
			e := decodeEvent(t, r)
			if e.APIVersion != "events.k8s.io/v1" || e.Kind != "Event" || e.Type != "Warning" || e.Reason != reason ||
				e.ReportingController != EventController || e.ReportingInstance != "node-a" || e.Action != "Audit" {
				t.Errorf("event %+v", e)
			}
			if e.Regarding.APIVersion != "v1" || e.Regarding.Kind != "Pod" || e.Regarding.Namespace != "team-a" ||
				e.Regarding.Name != "web-1" || e.Regarding.UID != "uid-web-1" {
				t.Errorf("regarding %+v, want the pod team-a/web-1 uid-web-1", e.Regarding)
			}
			if e.Note != "container app: the cause" {
				t.Errorf("note %q", e.Note)
			}
			if e.Metadata.Namespace != "team-a" || !strings.HasPrefix(e.Metadata.Name, "web-1.") || e.EventTime != "2026-11-28T20:00:00.000000Z" {
				t.Errorf("metadata %+v, eventTime %q", e.Metadata, e.EventTime)
			}
			if counts.get(reason, EventPosted) != 1 {
				t.Errorf("counts %v, want one posted", counts.n)
			}
		})
	}
}

// TestEventRateLimit: one Event per pod and reason within the window (the
// repeats counted, and said in the next one); other pods and reasons are
// not held back; the node's cap per minute drops the rest, counted.
func TestEventRateLimit(t *testing.T) {
	tests := []struct {
		name      string
		perMinute int
		// posts are the events, with the time advanced before each.
		posts []struct {
			after time.Duration
			ev    PodEvent
		}
		wantNotes   []string
		wantLimited int
	}{
		{
			name: "repeats of a pod and reason within the window", perMinute: 30,
			posts: []struct {
				after time.Duration
				ev    PodEvent
			}{
				{0, podEvent("web-1", ReasonHostUnsafe, "x")},
				{time.Minute, podEvent("web-1", ReasonHostUnsafe, "x")},
				{time.Minute, podEvent("web-1", ReasonHostUnsafe, "x")},
				{0, podEvent("web-2", ReasonHostUnsafe, "y")},       // another pod
				{0, podEvent("web-1", ReasonDelegationMissed, "z")}, // another reason
				{eventWindow, podEvent("web-1", ReasonHostUnsafe, "x")},
			},
			wantNotes: []string{
				"container app: x", "container app: y", "container app: z",
				"container app: x (and 2 more times since the last Event of this reason, not posted)",
			},
			wantLimited: 2,
		},
		{
			name: "the node's cap per minute", perMinute: 2,
			posts: []struct {
				after time.Duration
				ev    PodEvent
			}{
				{0, podEvent("web-1", ReasonHostUnsafe, "1")},
				{0, podEvent("web-2", ReasonHostUnsafe, "2")},
				{0, podEvent("web-3", ReasonHostUnsafe, "3")},
			},
			wantNotes:   []string{"container app: 1", "container app: 2"},
			wantLimited: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			p, counts, clk, _ := newPoster(t, f)
			p.perMinute = tc.perMinute
			for _, s := range tc.posts {
				clk.advance(s.after)
				p.Post(s.ev)
			}
			got := drain(t, p, f, len(tc.wantNotes))
			var notes []string
			for _, r := range got {
				notes = append(notes, decodeEvent(t, r).Note)
			}
			if strings.Join(notes, "\n") != strings.Join(tc.wantNotes, "\n") {
				t.Errorf("posted notes\n%s\nwant\n%s", strings.Join(notes, "\n"), strings.Join(tc.wantNotes, "\n"))
			}
			limited := 0
			for _, r := range EventReasons {
				limited += counts.get(r, EventRateLimited)
			}
			if limited != tc.wantLimited {
				t.Errorf("%d rate limited, want %d", limited, tc.wantLimited)
			}
		})
	}
}

// TestEventQueueFull: with nothing posting, Post never blocks; the Events
// past the queue's bound are dropped, counted and logged.
func TestEventQueueFull(t *testing.T) {
	f := newFakeAPI(t)
	p, counts, _, logs := newPoster(t, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range eventQueue + 3 {
			p.Post(podEvent("web-"+strings.Repeat("x", i+1), ReasonPinningUpdateFailed, "m"))
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Post blocked on a full queue")
	}
	if n := counts.get(ReasonPinningUpdateFailed, EventQueueFull); n != 3 {
		t.Errorf("%d dropped for a full queue, want 3", n)
	}
	if !strings.Contains(logs.String(), "queue is full") {
		t.Errorf("the drop is not logged:\n%s", logs)
	}
	if got := f.seen(); len(got) != 0 {
		t.Errorf("requests without Run: %+v", got)
	}
	// What was queued is posted once Run runs.
	p.perMinute = eventQueue
	if got := drain(t, p, f, eventQueue); len(got) != eventQueue {
		t.Errorf("%d posted, want the %d queued", len(got), eventQueue)
	}
}

// TestEventAPIErrors: a refused Event (RBAC, the policy) is logged with the
// API's message and counted; the poster goes on with the next.
func TestEventAPIErrors(t *testing.T) {
	f := newFakeAPI(t,
		answer{http.StatusForbidden, `{"kind":"Status","reason":"Forbidden","message":"events.events.k8s.io is forbidden: ValidatingAdmissionPolicy denied"}`},
		answer{http.StatusCreated, `{}`})
	p, counts, _, logs := newPoster(t, f)
	p.Post(podEvent("web-1", ReasonHostUnsafe, "a"))
	p.Post(podEvent("web-2", ReasonHostUnsafe, "b"))
	got := drain(t, p, f, 2)
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	if counts.get(ReasonHostUnsafe, EventFailed) != 1 || counts.get(ReasonHostUnsafe, EventPosted) != 1 {
		t.Errorf("counts %v, want one failed and one posted", counts.n)
	}
	for _, want := range []string{"level=ERROR", "cannot post the pod Event", "ValidatingAdmissionPolicy denied", "pod=web-1"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
}

// TestEventRunStops: Run returns when its context is done, a request
// under way (an API that never answers) included, and leaves no goroutine.
func TestEventRunStops(t *testing.T) {
	block := make(chan struct{})
	f := newFakeAPI(t)
	inner := f.srv.Config.Handler
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
		inner.ServeHTTP(w, r)
	})
	defer close(block)
	p, counts, _, _ := newPoster(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	p.Post(podEvent("web-1", ReasonHostUnsafe, "a"))
	deadline := time.Now().Add(5 * time.Second)
	for len(p.queue) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the request is under way
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context was done")
	}
	if counts.get(ReasonHostUnsafe, EventFailed) != 1 {
		t.Errorf("the cancelled request is not counted failed: %v", counts.n)
	}
	p.client.(*kubeClient).http.CloseIdleConnections()
	// No goroutine of the poster, nor of its client's connections, is left.
	var left string
	for time.Now().Before(deadline) {
		if left = clientGoroutines(); left == "" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if left != "" {
		t.Errorf("goroutines left after Run returned:\n%s", left)
	}
}

// clientGoroutines are the stacks of the goroutines of an EventPoster or
// of an HTTP client connection.
func clientGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "(*EventPoster)") || strings.Contains(g, "(*persistConn)") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}

// TestNewEventPoster: off posts nothing; auto outside a pod posts nothing
// and says why; on outside a pod is an error naming what is missing; a nil
// poster's Post and Run do nothing.
func TestNewEventPoster(t *testing.T) {
	none := func(string) string { return "" }
	tests := []struct {
		name    string
		mode    config.NodeLabelMode
		wantErr string
		wantLog string
	}{
		{name: "off", mode: config.NodeLabelOff},
		{name: "auto outside a pod", mode: config.NodeLabelAuto, wantLog: "no pod Events"},
		{name: "on outside a pod", mode: config.NodeLabelOn, wantErr: `podEvents: "on" needs the Kubernetes API from a pod, but $NODE_NAME is not set`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.PodEvents = tc.mode
			cfg.ServiceAccountDir = t.TempDir()
			logs := &syncBuffer{}
			p, err := NewEventPoster(cfg, none, slog.New(slog.NewTextHandler(logs, nil)), nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || p != nil {
				t.Fatalf("got %v, %v; want no poster", p, err)
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log %q does not say %q", logs, tc.wantLog)
			}
			p.Post(podEvent("web-1", ReasonHostUnsafe, "a"))
			p.Run(context.Background())
		})
	}
}

// TestEventLimits: a long pod name and a long message stay within the
// API's limits of a name and a note.
func TestEventLimits(t *testing.T) {
	p := newEventPoster(nil, "node-a", slog.New(slog.DiscardHandler), nil)
	ev := podEvent(strings.Repeat("a", 253), ReasonHostUnsafe, strings.Repeat("é", 2000))
	e := p.event(queuedEvent{PodEvent: ev, at: time.Unix(1, 0)})
	if len(e.Metadata.Name) > maxEventName || len(e.Note) > maxNote {
		t.Errorf("name %d bytes, note %d bytes; want at most %d and %d", len(e.Metadata.Name), len(e.Note), maxEventName, maxNote)
	}
	if !strings.HasSuffix(e.Note, "...") || !utf8.ValidString(e.Note) {
		t.Errorf("note %q is not cut cleanly", e.Note)
	}
	if e.Regarding.Name != ev.Name {
		t.Errorf("regarding %q, want the pod's full name", e.Regarding.Name)
	}
}
