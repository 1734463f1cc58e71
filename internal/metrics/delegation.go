package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgdelegate/cgdelegate/internal/status"
)

// delegation exports the ledger of writable pods (nri.Plugin.Delegation),
// looked at once per scrape: the node budget of delegated cgroups, what the
// writable pods reserve of it, the dying cgroups, and the writable
// containers running on an unsafe host.
type delegation struct {
	budget, reserved, pods, ctrs, dying, unsafe *prometheus.Desc
	look                                        func() *status.Delegation
}

func delegationCollector(look func() *status.Delegation) *delegation {
	return &delegation{
		budget: prometheus.NewDesc(DelegatedCgroupsBudget,
			"The node budget of delegated cgroups (nodeMaxDelegatedCgroups); 0 when it is off.", nil, nil),
		reserved: prometheus.NewDesc(DelegatedCgroupsReserved,
			"Delegated cgroups reserved by the live writable pods: the sum of their cgroup.max.descendants.", nil, nil),
		pods: prometheus.NewDesc(WritablePods, "Live pods with writable cgroups.", nil, nil),
		ctrs: prometheus.NewDesc(WritableContainers, "Containers with writable cgroups that run or are created.", nil, nil),
		dying: prometheus.NewDesc(DyingCgroups,
			"Removed cgroups the kernel still keeps (nr_dying_descendants), by scope: writable_pods (below the writable pods' "+
				"cgroups, each pod's within its own reservation) or node (below the cgroup root; those outside the writable pods count against the node budget).", []string{"scope"}, nil),
		unsafe: prometheus.NewDesc(UnsafeWritableContainers,
			"Writable containers running while the host is not safe for writable cgroups (no cgroup2 with nsdelegate).", nil, nil),
		look: look,
	}
}

func (c *delegation) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.budget, c.reserved, c.pods, c.ctrs, c.dying, c.unsafe} {
		ch <- d
	}
}

func (c *delegation) Collect(ch chan<- prometheus.Metric) {
	d := c.look()
	if d == nil {
		return
	}
	ctrs := 0
	for _, p := range d.Pods {
		ctrs += len(p.Containers)
	}
	gauge := func(desc *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(c.budget, d.Budget)
	gauge(c.reserved, d.Reserved)
	gauge(c.pods, len(d.Pods))
	gauge(c.ctrs, ctrs)
	gauge(c.dying, d.DyingInPods, ScopeWritablePods)
	if d.Node != nil {
		gauge(c.dying, d.Node.DyingDescendants, ScopeNode)
	}
	gauge(c.unsafe, len(d.Unsafe))
}
