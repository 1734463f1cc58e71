package metrics

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// OutcomeNames are the result labels of the decisions the plugin counts in
// Outcomes, by index: the writable.Outcome values in order (a test
// holds them to writable.Outcome.String).
var OutcomeNames = []string{"unchanged", "privileged", "readonly", "writable", "guarded"}

// containers is cgdelegate_containers_total: plain atomic counts, so the
// plugin's one atomic add (Outcomes.Inc) is the whole cost of
// counting a container; the series are built at scrape time.
//
// The unchanged count costs the plugin nothing once the CreateContainer
// requests are timed (the event timer, StubOption, which cmd/cgdelegate installs
// whenever metrics are on): it is derived, see unchanged.
type containers struct {
	desc     *prometheus.Desc
	outcomes Outcomes
	refused  atomic.Uint64
	// create is the CreateContainer duration histogram: its count is every
	// CreateContainer request answered; failed those answered with an
	// error.
	create *histogram
	failed atomic.Uint64

	mu    sync.Mutex
	other map[string]uint64 // results added since, by name
	// shown is the unchanged count last reported (derived counts only).
	shown uint64
}

func newContainers(create *histogram) *containers {
	return &containers{
		desc: prometheus.NewDesc(ContainersTotal,
			"CreateContainer decisions, by result: the cgroup mount outcome (unchanged, writable, readonly, guarded, privileged) or refused.",
			[]string{"result"}, nil),
		create: create,
		other:  map[string]uint64{},
	}
}

// answered records one CreateContainer request answered, before the
// request enters the histogram (failed first: see unchanged). From the
// first one on, the unchanged count is derived.
func (c *containers) answered(failed bool) {
	if failed {
		c.failed.Add(1)
	}
	if !c.outcomes.Implicit() {
		c.outcomes.SetImplicit()
	}
}

// unchanged is the count of unchanged decisions. Until a CreateContainer
// request is seen answered it is counted (Outcomes index 0). After that it
// is derived, with no cost on the container path:
//
//	unchanged = answered - failed - (writable + readonly + guarded + privileged)
//
// Why that is exact: the NRI stub's ttrpc server is the only way a
// CreateContainer reaches the plugin, and the interceptor sees every one
// answered. Each answered request is exactly one of: an error (counted in
// failed: a refusal, which the handler also counts as refused, or a request
// that could not be decoded, which reached no handler and is no decision),
// a decision the handler counted (writable, readonly, guarded,
// privileged), or an unchanged one, which the handler does not count (a
// request without pod or container is left unchanged too). A panic in a
// handler is not recovered (neither ttrpc nor the stub recovers), so the
// plugin exits and every count starts again from zero, as Prometheus
// expects of a restarted process. A runtime that gives up waiting (its
// timeout) does not stop the handler: the request is still answered and
// counted.
//
// Under concurrency the three counts are read at different moments. Each
// request's own count (failed, or the handler's) is made before it enters
// the histogram, and the histogram is read first: so the difference never
// exceeds the unchanged requests answered by the time the histogram was
// read, and falls short only while a counted request is between its
// decision and its answer (microseconds). The reported value is the
// largest one computed so far, so it never goes down; it is always a value
// the true count has had, and it catches up at the next scrape.
func (c *containers) unchanged() uint64 {
	n := c.outcomes.Load(0) // counted before the derivation began
	if !c.outcomes.Implicit() {
		return n
	}
	answered := c.create.count()
	derived := int64(answered) - int64(c.failed.Load())
	for i := 1; i < len(OutcomeNames); i++ {
		derived -= int64(c.outcomes.Load(i))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shown = max(c.shown, n, uint64(max(derived, 0)))
	return c.shown
}

// count counts one decision named outcome.
func (c *containers) count(outcome string) {
	switch i := outcomeIndex(outcome); {
	case outcome == "refused":
		c.refused.Add(1)
	case i >= 0:
		c.outcomes.Inc(i)
	default:
		c.mu.Lock()
		c.other[outcome]++
		c.mu.Unlock()
	}
}

// outcomeIndex is outcome's place in OutcomeNames, without a map lookup.
func outcomeIndex(outcome string) int {
	switch outcome {
	case "unchanged":
		return 0
	case "privileged":
		return 1
	case "readonly":
		return 2
	case "writable":
		return 3
	case "guarded":
		return 4
	}
	return -1
}

func (c *containers) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *containers) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.unchanged()), OutcomeNames[0])
	for i, name := range OutcomeNames[1:] {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.outcomes.Load(i+1)), name)
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.refused.Load()), "refused")
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, n := range c.other {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), name)
	}
}
