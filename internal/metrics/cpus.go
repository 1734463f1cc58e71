package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// cpus exports cgdelegate_cpus{pool} from the pinning snapshot, taken at
// scrape time.
type cpus struct {
	desc    *prometheus.Desc
	pinning func() *status.Pinning
}

func cpuCollector(pinning func() *status.Pinning) *cpus {
	return &cpus{
		desc: prometheus.NewDesc(CPUs,
			"CPUs by pool while CPU pinning is active: reserved (never handed out), node_shared (the node shared pool), "+
				"pod_bubbles (in pod bubbles), exclusive (held by exclusive containers).",
			[]string{"pool"}, nil),
		pinning: pinning,
	}
}

func (c *cpus) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *cpus) Collect(ch chan<- prometheus.Metric) {
	st := c.pinning()
	if st == nil || !st.Active || st.Allocations == nil {
		return
	}
	for pool, n := range PoolSizes(*st.Allocations) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), pool)
	}
}

// PoolSizes counts the CPUs of every pool of cgdelegate_cpus in an
// allocation table. Exclusive CPUs are counted once however many
// containers (an init container and its successor) hold them.
func PoolSizes(s policy.Status) map[string]int {
	bubbles, exclusive := cpuset.New(), cpuset.New()
	for _, p := range s.Pods {
		bubbles = bubbles.Union(parse(p.Bubble))
		for _, c := range p.Containers {
			if c.Pool == policy.PoolExclusive {
				exclusive = exclusive.Union(parse(c.CPUs))
			}
		}
	}
	return map[string]int{
		PoolReserved:   parse(s.ReservedCPUs).Size(),
		PoolNodeShared: parse(s.NodeSharedPool).Size(),
		PoolPodBubbles: bubbles.Size(),
		PoolExclusive:  exclusive.Size(),
	}
}

// parse reads a cpuset list the policy wrote; it is always valid.
func parse(list string) cpuset.CPUSet {
	s, err := cpuset.Parse(list)
	if err != nil {
		return cpuset.New()
	}
	return s
}
