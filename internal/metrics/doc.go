// Package metrics exports what the NRI plugin does as Prometheus metrics
// (client_golang), served at /metrics, and times the NRI requests on the
// plugin's ttrpc server.
//
// Use New for the Recorder handed to nri.WithMetrics, Listen to serve it
// when metricsAddress is set, and StubOption with the same Recorder so that
// events are timed on the stub's ttrpc server. Recording is cheap: a
// container decision is one atomic add on the Recorder's Outcomes, none for
// the most common one (unchanged), whose count is derived from the timed
// CreateContainer requests (containers.unchanged says why that is exact),
// and every other counter and histogram an event touches is resolved when
// the Recorder is built. Gauges that describe the node (support, CPU pools)
// are read at scrape time from the functions given in Options, so they cost
// nothing between scrapes. A refusal is counted by the cause it carries
// (internal/refusal); nothing here classifies errors.
//
// Do not use it to decide anything: it only counts. The metric names and
// the fixed set of refusal causes are listed in the README ("Metrics") and
// in names.go; the chart's dashboard
// (contrib/helm/cgdelegate/dashboards/cgdelegate.json) is built on them.
package metrics
