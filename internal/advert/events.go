package advert

// Pod Events: what the kubelet never reports about a pod (a container
// created without cgdelegate, a writable container on a host that turned
// unsafe, a CPU pinning update given up) is posted as an events.k8s.io/v1
// Event of type Warning on the pod, so that `kubectl describe pod` and
// `kubectl get events` show it, not only the plugin's log.
//
// Post never blocks: it drops a repeat of the same pod and reason within
// eventWindow (counted, and said in the next Event of that pod and reason),
// and queues the rest on a bounded queue (a full queue drops, counted). Run
// posts the queue, at most eventsPerMinute a minute, each Event once: an
// API error is logged and counted, never retried, never fatal.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// The reasons of cgdelegate's pod Events. The chart's policy
// (pod-events-policy.yaml) lets the plugin's token post only these.
const (
	// ReasonDelegationMissed: a container that asked for a writable (or
	// read-only) cgroup runs without cgdelegate's change: it was created
	// while cgdelegate was not connected (writable.ErrMissed).
	ReasonDelegationMissed = "CgroupDelegationMissed"
	// ReasonHostUnsafe: a writable container runs on a host that is no
	// longer safe for writable cgroups (nsdelegate gone).
	ReasonHostUnsafe = "HostUnsafe"
	// ReasonPinningUpdateFailed: the runtime failed every retry of a
	// container's CPU pinning update, which was given up.
	ReasonPinningUpdateFailed = "CPUPinningUpdateFailed"
)

// EventReasons are every reason cgdelegate posts, in the order above.
var EventReasons = []string{ReasonDelegationMissed, ReasonHostUnsafe, ReasonPinningUpdateFailed}

// The actions of cgdelegate's pod Events (what the plugin did, or failed
// to do), one per reason above; the chart's policy admits only these.
const (
	ActionAudit  = "Audit"
	ActionCheck  = "CheckHost"
	ActionUpdate = "UpdateContainer"
)

// EventActions are every action, in the order of EventReasons.
var EventActions = []string{ActionAudit, ActionCheck, ActionUpdate}

// EventController is the Events' reportingController; their
// reportingInstance is the node's name.
const EventController = "cgdelegate.io/plugin"

// Results of posting a pod Event, for the counter
// (cgdelegate_pod_events_total).
const (
	EventPosted      = "posted"
	EventFailed      = "failed"
	EventQueueFull   = "queue_full"
	EventRateLimited = "rate_limited"
)

// EventResults are every result, in the order above.
var EventResults = []string{EventPosted, EventFailed, EventQueueFull, EventRateLimited}

// Limits of the pod Events.
const (
	// eventWindow: a pod gets one Event of a reason within it; the
	// repeats are counted and said in the next one.
	eventWindow = 10 * time.Minute
	// eventsPerMinute caps the Events the node posts in a minute.
	eventsPerMinute = 30
	// eventQueue bounds the Events waiting to be posted.
	eventQueue = 64
	// maxNote is the API's limit of an Event's note (1 kB).
	maxNote = 1024
	// maxEventName is the API's limit of a name (a DNS subdomain).
	maxEventName = 253
)

// PodEvent is one Event about a pod: the pod as the runtime knows it (its
// namespace, name and UID from the NRI PodSandbox), the container it is
// about, the reason (one of EventReasons), the action the plugin took or
// failed, and the message.
type PodEvent struct {
	Namespace, Name, UID string
	Container            string
	Reason, Action       string
	Message              string
}

// eventKey is what the per-pod limit counts by.
type eventKey struct{ pod, reason string }

func (e PodEvent) key() eventKey {
	pod := e.UID
	if pod == "" {
		pod = e.Namespace + "/" + e.Name
	}
	return eventKey{pod, e.Reason}
}

// eventClient creates an Event (kubeClient.createEvent).
type eventClient interface {
	createEvent(ctx context.Context, namespace string, event []byte) error
}

// EventPoster posts pod Events for the plugin. A nil *EventPoster posts
// nothing (podEvents off).
type EventPoster struct {
	client eventClient
	node   string
	log    *slog.Logger
	// count records one Event's result (EventResults) by reason; never nil.
	count func(reason, result string)
	now   func() time.Time

	window    time.Duration
	perMinute int
	queue     chan queuedEvent

	mu sync.Mutex
	// last is when a pod's Event of a reason was last queued; repeats are
	// the ones dropped since.
	last    map[eventKey]time.Time
	repeats map[eventKey]int
	// minute is the start of the current minute of the global cap; sent,
	// what was posted in it.
	minute time.Time
	sent   int
}

type queuedEvent struct {
	PodEvent
	at      time.Time
	repeats int
}

// NewEventPoster returns the poster cfg.PodEvents asks for, or nil: off,
// or auto outside a pod that can reach the API (logged at info, naming
// what is missing); with on, what is missing is an error naming each.
// count records each Event's result by reason (nil: not counted).
func NewEventPoster(cfg config.Config, getenv func(string) string, log *slog.Logger, count func(reason, result string)) (*EventPoster, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.PodEvents == config.NodeLabelOff {
		return nil, nil
	}
	env := lookInCluster(getenv, cfg.ServiceAccountDir, true)
	if len(env.bad) > 0 {
		return nil, fmt.Errorf("podEvents: %q: %s", cfg.PodEvents, strings.Join(env.bad, "; "))
	}
	if len(env.missing) > 0 {
		why := strings.Join(env.missing, "; ")
		if cfg.PodEvents == config.NodeLabelOn {
			return nil, fmt.Errorf("podEvents: %q needs the Kubernetes API from a pod, but %s", cfg.PodEvents, why)
		}
		log.Info("no pod Events: not in a pod that can reach the Kubernetes API (podEvents: auto)", "missing", why)
		return nil, nil
	}
	c, err := newKubeClient(env)
	if err != nil {
		return nil, fmt.Errorf("podEvents: %w", err)
	}
	log.Info("what the kubelet does not report about a pod is posted as an Event on it", "node", env.node, "api", c.base)
	return newEventPoster(c, env.node, log, count), nil
}

func newEventPoster(c eventClient, node string, log *slog.Logger, count func(reason, result string)) *EventPoster {
	if count == nil {
		count = func(string, string) {}
	}
	return &EventPoster{
		client: c, node: node, log: log.With("node", node), count: count, now: time.Now,
		window: eventWindow, perMinute: eventsPerMinute, queue: make(chan queuedEvent, eventQueue),
		last: map[eventKey]time.Time{}, repeats: map[eventKey]int{},
	}
}

// Post queues ev, or drops it: a repeat of its pod and reason within the
// window (rate_limited), or a full queue (queue_full). It never blocks and
// never calls the API; safe for concurrent use and on a nil poster.
func (p *EventPoster) Post(ev PodEvent) {
	if p == nil {
		return
	}
	now := p.now()
	k := ev.key()
	p.mu.Lock()
	if t, ok := p.last[k]; ok && now.Sub(t) < p.window {
		p.repeats[k]++
		p.mu.Unlock()
		p.count(ev.Reason, EventRateLimited)
		return
	}
	q := queuedEvent{PodEvent: ev, at: now, repeats: p.repeats[k]}
	select {
	case p.queue <- q:
		p.last[k] = now
		delete(p.repeats, k)
		p.forgetOld(now)
		p.mu.Unlock()
	default:
		p.mu.Unlock()
		p.count(ev.Reason, EventQueueFull)
		p.log.Warn("pod Event dropped: the queue is full", "namespace", ev.Namespace, "pod", ev.Name, "reason", ev.Reason)
	}
}

// forgetOld drops the limit's entries older than the window, under p.mu,
// when there are many: the map holds at most the pods of one window.
func (p *EventPoster) forgetOld(now time.Time) {
	if len(p.last) < 2*eventQueue {
		return
	}
	for k, t := range p.last {
		if now.Sub(t) >= p.window {
			delete(p.last, k)
			delete(p.repeats, k)
		}
	}
}

// Run posts the queued Events until ctx is done, then returns (what is
// still queued is dropped); a request under way is cancelled with ctx.
func (p *EventPoster) Run(ctx context.Context) {
	if p == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case q := <-p.queue:
			p.post(ctx, q)
		}
	}
}

// post sends one Event, within the cap per minute.
func (p *EventPoster) post(ctx context.Context, q queuedEvent) {
	now := p.now()
	p.mu.Lock()
	if now.Sub(p.minute) >= time.Minute {
		p.minute, p.sent = now, 0
	}
	over := p.sent >= p.perMinute
	if !over {
		p.sent++
	}
	p.mu.Unlock()
	log := p.log.With("namespace", q.Namespace, "pod", q.Name, "container", q.Container, "reason", q.Reason)
	if over {
		p.count(q.Reason, EventRateLimited)
		log.Warn("pod Event dropped: the node posted its limit of Events this minute", "limit", p.perMinute)
		return
	}
	body, err := json.Marshal(p.event(q))
	if err == nil {
		err = p.client.createEvent(ctx, q.Namespace, body)
	}
	if err != nil {
		p.count(q.Reason, EventFailed)
		log.Error("cannot post the pod Event; it is in this log only", "error", err, "message", q.Message)
		return
	}
	p.count(q.Reason, EventPosted)
	log.Debug("pod Event posted")
}

// eventObject is an events.k8s.io/v1 Event as the API takes it.
type eventObject struct {
	APIVersion          string         `json:"apiVersion"`
	Kind                string         `json:"kind"`
	Metadata            eventMeta      `json:"metadata"`
	EventTime           string         `json:"eventTime"`
	ReportingController string         `json:"reportingController"`
	ReportingInstance   string         `json:"reportingInstance"`
	Action              string         `json:"action"`
	Reason              string         `json:"reason"`
	Regarding           eventRegarding `json:"regarding"`
	Note                string         `json:"note"`
	Type                string         `json:"type"`
}

type eventMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

type eventRegarding struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
}

// microTime is the API's MicroTime format.
const microTime = "2006-01-02T15:04:05.000000Z07:00"

// event builds q's Event: named as client-go's recorders name theirs (the
// pod's name, a dot, the time in hex nanoseconds).
func (p *EventPoster) event(q queuedEvent) eventObject {
	suffix := fmt.Sprintf(".%x", q.at.UnixNano())
	name := q.Name
	if len(name)+len(suffix) > maxEventName {
		name = name[:maxEventName-len(suffix)]
	}
	note := q.Message
	if q.Container != "" {
		note = "container " + q.Container + ": " + note
	}
	if q.repeats > 0 {
		note = fmt.Sprintf("%s (and %d more times since the last Event of this reason, not posted)", note, q.repeats)
	}
	if len(note) > maxNote {
		note = strings.ToValidUTF8(note[:maxNote-3], "") + "..."
	}
	return eventObject{
		APIVersion: "events.k8s.io/v1", Kind: "Event",
		Metadata:            eventMeta{Name: name + suffix, Namespace: q.Namespace},
		EventTime:           q.at.UTC().Format(microTime),
		ReportingController: EventController,
		ReportingInstance:   p.node,
		Action:              q.Action,
		Reason:              q.Reason,
		Regarding:           eventRegarding{APIVersion: "v1", Kind: "Pod", Namespace: q.Namespace, Name: q.Name, UID: q.UID},
		Note:                note,
		Type:                "Warning",
	}
}
