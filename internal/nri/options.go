package nri

import (
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// Option configures a Plugin.
type Option func(*options)

type options struct {
	metrics    metrics.Recorder
	outcomes   *metrics.Outcomes
	admission  []func(cfg config.Config, runtime string) writable.Check
	configured func()
}

func newOptions(opts []Option) options {
	o := options{metrics: metrics.Nop{}}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithMetrics sends what the plugin decides to r (Recorder.Outcomes, else
// Recorder.Container; Recorder.Updates). The handlers read no clock: events are timed where
// they arrive, on the stub's ttrpc server (internal/metrics/nritimer).
func WithMetrics(r metrics.Recorder) Option {
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

// WithConfigured calls fn after every successful Configure or Reload (the
// node advertisement refreshes there).
func WithConfigured(fn func()) Option {
	return func(o *options) { o.configured = fn }
}
