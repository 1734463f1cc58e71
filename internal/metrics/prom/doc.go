// Package prom exports what the NRI plugin records as Prometheus metrics
// (client_golang), served at /metrics.
//
// Use New for the metrics.Recorder handed to nri.WithMetrics, and Listen
// to serve it when metricsAddress is set, and hand the same Recorder to
// nritimer.StubOption so that events are timed on the stub's ttrpc server.
// Recording is cheap: a container decision is one atomic add on the
// Recorder's metrics.Outcomes, none for the most common one (unchanged),
// whose count is derived from the timed CreateContainer requests
// (containers.unchanged says why that is exact), and every other counter
// and histogram an event touches is resolved when the Recorder is built. Gauges that describe the node (support, CPU pools) are
// read at scrape time from the functions given in Options, so they cost
// nothing between scrapes.
//
// Do not use it to decide anything: it only counts. The metric names and
// the fixed set of refusal causes are listed in docs/metrics.md and
// in names.go; contrib/grafana/cgdelegate.json is built on them.
package prom
