package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// histogram counts durations into EventBuckets with two atomic adds per
// observation (its bucket, the sum); the count is the buckets' total, added
// up at scrape time. A scrape racing an observation may see the sum and
// the count one observation apart.
type histogram struct {
	// counts are per bucket, not cumulative; the last is +Inf.
	counts [len(eventBounds) + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

// eventBounds are EventBuckets as durations.
var eventBounds = [...]time.Duration{
	5 * time.Microsecond, 10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 100 * time.Millisecond, time.Second,
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(eventBounds) && d > eventBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// count is the number of observations.
func (h *histogram) count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

func (h *histogram) metric(desc *prometheus.Desc, event string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(eventBounds))
	var n uint64
	for i, b := range eventBounds {
		n += h.counts[i].Load()
		buckets[b.Seconds()] = n
	}
	n += h.counts[len(eventBounds)].Load()
	return prometheus.MustNewConstHistogram(desc, n, time.Duration(h.sum.Load()).Seconds(), buckets, event)
}

const createContainer = "CreateContainer"

// events are the duration histograms by event name: Events resolved
// once, others added on first use.
type events struct {
	desc  *prometheus.Desc
	known [5]histogram

	mu    sync.Mutex
	other map[string]*histogram
}

func newEvents() *events {
	return &events{
		desc: prometheus.NewDesc(EventDuration, "Time the plugin took to answer an NRI request, by event name: from the request reaching the plugin's ttrpc server to the answer (decoding, dispatch, handler).",
			[]string{"event"}, nil),
		other: map[string]*histogram{},
	}
}

// get is the histogram for an event name.
func (e *events) get(name string) *histogram {
	switch name {
	case createContainer:
		return &e.known[0]
	case "RunPodSandbox":
		return &e.known[1]
	case "StopContainer":
		return &e.known[2]
	case "RemoveContainer":
		return &e.known[3]
	case "RemovePodSandbox":
		return &e.known[4]
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	h, ok := e.other[name]
	if !ok {
		h = new(histogram)
		e.other[name] = h
	}
	return h
}

func (e *events) Describe(ch chan<- *prometheus.Desc) { ch <- e.desc }

func (e *events) Collect(ch chan<- prometheus.Metric) {
	for i, name := range Events {
		ch <- e.known[i].metric(e.desc, name)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, h := range e.other {
		ch <- h.metric(e.desc, name)
	}
}
