package prom

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgdelegate/cgdelegate/internal/metrics"
)

// OutcomeNames are the result labels of the decisions the plugin counts in
// metrics.Outcomes, by index: the writable.Outcome values in order (a test
// holds them to writable.Outcome.String).
var OutcomeNames = []string{"unchanged", "privileged", "readonly", "writable", "guarded"}

// containers is cgdelegate_containers_total: plain atomic counts, so the
// plugin's one atomic add (metrics.Outcomes.Inc) is the whole cost of
// counting a container; the series are built at scrape time.
type containers struct {
	desc     *prometheus.Desc
	outcomes metrics.Outcomes
	refused  atomic.Uint64

	mu    sync.Mutex
	other map[string]uint64 // results added since, by name
}

func newContainers() *containers {
	return &containers{
		desc: prometheus.NewDesc(ContainersTotal,
			"CreateContainer decisions, by result: the cgroup mount outcome (unchanged, writable, readonly, guarded, privileged) or refused.",
			[]string{"result"}, nil),
		other: map[string]uint64{},
	}
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
	for i, name := range OutcomeNames {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.outcomes.Load(i)), name)
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.refused.Load()), "refused")
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, n := range c.other {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), name)
	}
}
