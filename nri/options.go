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
	timed      bool
	admission  []writable.Check
	policies   []func(config.Config) writable.Check
	configured func()
}

func newOptions(opts []Option) options {
	o := options{metrics: metrics.Nop{}}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithMetrics sends what the plugin does to r. Without it nothing is
// recorded and no event is timed.
func WithMetrics(r metrics.Recorder) Option {
	return func(o *options) {
		if r != nil {
			o.metrics, o.timed = r, true
		}
	}
}

// WithAdmission adds rules that every container must pass before it gets
// writable cgroups (an opt-in policy). They run before the host and spec
// checks, on annotated and runtime-writable (guarded) containers alike.
func WithAdmission(checks ...writable.Check) Option {
	return func(o *options) { o.admission = append(o.admission, checks...) }
}

// WithPolicy adds an admission rule built from the config in force (the
// node's opt-in policy, optinpolicy.FromConfig): build is called with every
// config the plugin takes (New, Configure, Reload), so the rule always
// follows the config. A nil rule means the config sets none. It runs where
// WithAdmission's rules run, after them.
func WithPolicy(build func(config.Config) writable.Check) Option {
	return func(o *options) { o.policies = append(o.policies, build) }
}

// admissionFor returns the admission rules for cfg.
func (o *options) admissionFor(cfg config.Config) []writable.Check {
	if len(o.policies) == 0 {
		return o.admission
	}
	checks := append([]writable.Check(nil), o.admission...)
	for _, build := range o.policies {
		if c := build(cfg); c != nil {
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
