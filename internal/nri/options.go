package nri

import (
	"time"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// Option configures a Plugin.
type Option func(*options)

type options struct {
	metrics   Metrics
	outcomes  *metrics.Outcomes
	admission []func(cfg config.Config, runtime string) writable.Check
	// hold, when set, replaces the update sender's hold.
	hold *time.Duration
	// post posts an Event on a pod (WithEvents); nil posts none.
	post func(advert.PodEvent)
}

func newOptions(opts []Option) options {
	o := options{metrics: nopMetrics{}}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Metrics receives what the handlers decide (internal/metrics.Recorder is
// one). It is called on the container creation path, so implementations
// must be cheap and safe for concurrent use. The handlers read no clock:
// events are timed where they arrive, on the stub's ttrpc server
// (metrics.StubOption).
type Metrics interface {
	// Container records one CreateContainer decision: outcome is the
	// writable.Outcome's name ("writable", "readonly", "guarded",
	// "privileged", "unchanged"), and err the refusal (outcome is then
	// "refused"), which carries its cause (internal/refusal).
	Container(outcome string, err error)
	// Updates records one batch of container updates sent after an event:
	// how many were sent and how many the runtime failed.
	Updates(sent, failed int)
	// Outcomes is where the plugin counts the decisions that are not
	// refusals, by writable.Outcome value, instead of calling Container:
	// one atomic add, no call through this interface. Nil: they go to
	// Container too.
	Outcomes() *metrics.Outcomes
}

// nopMetrics records nothing.
type nopMetrics struct{}

func (nopMetrics) Container(string, error)     {}
func (nopMetrics) Updates(int, int)            {}
func (nopMetrics) Outcomes() *metrics.Outcomes { return nil }

// WithMetrics sends what the plugin decides to r (Metrics.Outcomes, else
// Metrics.Container; Metrics.Updates).
func WithMetrics(r Metrics) Option {
	return func(o *options) {
		if r != nil {
			o.metrics, o.outcomes = r, r.Outcomes()
		}
	}
}

// WithAdmission adds an admission rule (an opt-in policy) built from the
// config in force: build is called with every config the plugin takes
// (New, Configure, Reload), so the rule follows the config; a nil rule
// means the config sets none (writable.OptInPolicy is one). Rules run
// before the host and spec checks, on annotated and runtime-writable
// (guarded) containers alike.
func WithAdmission(build func(config.Config) writable.Check) Option {
	return WithRuntimeAdmission(func(cfg config.Config, _ string) writable.Check { return build(cfg) })
}

// WithRuntimeAdmission is WithAdmission for a rule that also depends on the
// runtime: build gets the name of the runtime seen in Configure ("" before
// it; no container comes before Configure).
func WithRuntimeAdmission(build func(cfg config.Config, runtime string) writable.Check) Option {
	return func(o *options) { o.admission = append(o.admission, build) }
}

// admissionFor returns the admission rules for cfg under the runtime.
func (o *options) admissionFor(cfg config.Config, runtime string) []writable.Check {
	var checks []writable.Check
	for _, build := range o.admission {
		if c := build(cfg, runtime); c != nil {
			checks = append(checks, c)
		}
	}
	return checks
}

// WithUpdateHold makes the plugin send its unsolicited container updates
// once no event has queued any for hold (0: at once), instead of the
// default (cpumanager.Sender). Tests that step through events use it.
func WithUpdateHold(hold time.Duration) Option {
	return func(o *options) { o.hold = &hold }
}
