//go:build integration_guest

package guest

import (
	"sync"
	"testing"
	"time"
)

// toolCalls counts the kubectl and helm commands a scenario runs on the
// workstation and the time they took, from the guest's side. The scenario
// runner prints them as a CGD-METRIC line when a scenario ran any.
type toolCalls struct {
	mu    sync.Mutex
	calls map[string]*toolStat
}

type toolStat struct {
	n        int
	sum, min time.Duration
}

var tools = &toolCalls{}

func (c *toolCalls) record(name string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]*toolStat{}
	}
	s := c.calls[name]
	if s == nil {
		s = &toolStat{min: d}
		c.calls[name] = s
	}
	s.n++
	s.sum += d
	s.min = min(s.min, d)
}

// take returns what was recorded since the last take, as metric values
// (<tool>_n, <tool>_s, <tool>_min_s), and starts again from nothing.
func (c *toolCalls) take() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) == 0 {
		return nil
	}
	v := map[string]float64{}
	for name, s := range c.calls {
		v[name+"_n"] = float64(s.n)
		v[name+"_s"] = seconds(s.sum)
		v[name+"_min_s"] = seconds(s.min)
	}
	c.calls = nil
	return v
}

// printToolCalls prints the scenario's tool calls, if any, as CGD-METRIC
// tool_calls.
func printToolCalls(t *testing.T, scenario string) {
	t.Helper()
	if v := tools.take(); v != nil {
		clusterMetric(t, scenario, "tool_calls", v)
	}
}
