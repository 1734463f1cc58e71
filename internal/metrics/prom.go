package metrics

import (
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/internal/version"
)

// Options are the node's state, read at scrape time.
type Options struct {
	// Supported reports whether the node supports writable cgroups now
	// (the node advertisement); nil leaves cgdelegate_node_supported out.
	Supported func() bool
	// FailClosed is whether the runtime enforces required-plugins (the
	// advertisement's report); nil leaves cgdelegate_fail_closed out.
	FailClosed func() *status.FailClosed
	// Pinning is the CPU pinning state (nri.Plugin.Pinning); cgdelegate_cpus
	// is exported only while it reports active pinning.
	Pinning func() *status.Pinning
	// Delegation looks at the node's writable pods and containers
	// (nri.Plugin.Delegation), once per scrape; nil leaves the
	// delegation gauges out.
	Delegation func() *status.Delegation
}

// Recorder keeps the plugin's metrics in its own registry.
type Recorder struct {
	reg *prometheus.Registry

	// containers are the cgdelegate_containers_total counts; refusals are
	// by cause.
	containers   *containers
	refusals     map[string]prometheus.Counter
	events       *events
	sent, failed prometheus.Counter
	// podEvents are the cgdelegate_pod_events_total counts, by reason
	// and result.
	podEvents map[[2]string]prometheus.Counter
}

// New builds a Recorder and registers every metric, with the Go and
// process collectors, in a new registry.
func New(o Options) *Recorder {
	r := &Recorder{reg: prometheus.NewRegistry(), refusals: make(map[string]prometheus.Counter, len(Causes))}
	r.events = newEvents()
	r.containers = newContainers(r.events.get(createContainer))
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: RefusalsTotal,
		Help: "Refused containers, by cause: " + strings.Join(Causes, ", ") + ".",
	}, []string{"cause"})
	for _, c := range Causes {
		r.refusals[c] = refusals.WithLabelValues(c)
	}
	updates := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: ContainerUpdatesTotal,
		Help: "Container updates sent to the runtime after an event (CPU pool changes), by result: sent or failed.",
	}, []string{"result"})
	r.sent, r.failed = updates.WithLabelValues(UpdateSent), updates.WithLabelValues(UpdateFailed)
	podEvents := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: PodEventsTotal,
		Help: "Kubernetes Events cgdelegate meant to post on pods, by reason (" + strings.Join(advert.EventReasons, ", ") +
			") and result: " + strings.Join(advert.EventResults, ", ") + ".",
	}, []string{"reason", "result"})
	r.podEvents = make(map[[2]string]prometheus.Counter, len(advert.EventReasons)*len(advert.EventResults))
	for _, reason := range advert.EventReasons {
		for _, result := range advert.EventResults {
			r.podEvents[[2]string{reason, result}] = podEvents.WithLabelValues(reason, result)
		}
	}
	r.reg.MustRegister(r.containers, refusals, r.events, updates, podEvents, buildInfo(version.String(), runtime.Version()),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.ObserveNode(o)
	return r
}

// buildInfo is cgdelegate_build_info: always 1, its labels say which build
// runs (the version as -version prints it, and the Go release it was built
// with), so a query can join them to any series of the same target.
func buildInfo(v, goVersion string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        BuildInfo,
		Help:        "Always 1; the labels say which build of cgdelegate runs: version (as -version prints it) and goversion.",
		ConstLabels: prometheus.Labels{"version": v, "goversion": goVersion},
	})
	g.Set(1)
	return g
}

// ObserveNode registers the gauges that read the node's state at scrape
// time from o (each only when its function is set), for a Recorder built
// before the objects that know that state. Call it once per Recorder, with
// New's Options left empty.
func (r *Recorder) ObserveNode(o Options) {
	if o.Supported != nil {
		r.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: NodeSupported,
			Help: "1 when the node supports writable cgroups (cgroup v2 with nsdelegate), else 0.",
		}, func() float64 { return boolValue(o.Supported()) }))
	}
	if o.FailClosed != nil {
		r.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: FailClosed,
			Help: "1 when the runtime's NRI default validator enforces the pod annotation required-plugins.noderesource.dev " +
				"(an opted-in pod is refused while cgdelegate is down), 0 when it is off or not known.",
		}, func() float64 { return boolValue(o.FailClosed().Enforced()) }))
	}
	if o.Pinning != nil {
		r.reg.MustRegister(cpuCollector(o.Pinning))
	}
	if o.Delegation != nil {
		r.reg.MustRegister(delegationCollector(o.Delegation))
	}
}

// Registry is where the metrics are registered, for serving and tests.
func (r *Recorder) Registry() *prometheus.Registry { return r.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (r *Recorder) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
}

// Container implements nri.Metrics. A refusal is also counted by
// cause (Cause).
func (r *Recorder) Container(outcome string, err error) {
	if err != nil {
		r.containers.count("refused")
		r.refusals[Cause(err)].Inc()
		return
	}
	r.containers.count(outcome)
}

// Outcomes implements nri.Metrics: the counts behind
// cgdelegate_containers_total, by writable.Outcome (OutcomeNames).
func (r *Recorder) Outcomes() *Outcomes { return &r.containers.outcomes }

// Event implements EventRecorder. A CreateContainer request also
// counts towards the derived unchanged count (containers.unchanged), before
// it enters the histogram.
func (r *Recorder) Event(name string, d time.Duration, failed bool) {
	if name == createContainer {
		r.containers.answered(failed)
	}
	r.events.get(name).observe(d)
}

// Updates implements nri.Metrics.
func (r *Recorder) Updates(sent, failed int) {
	r.sent.Add(float64(sent))
	r.failed.Add(float64(failed))
}

// PodEvent counts one pod Event by reason (advert.EventReasons) and result
// (advert.EventResults); other values are not counted.
// advert.EventPoster calls it.
func (r *Recorder) PodEvent(reason, result string) {
	if c, ok := r.podEvents[[2]string{reason, result}]; ok {
		c.Inc()
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
