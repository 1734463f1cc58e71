package nri

import (
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// Option configures a Plugin.
type Option func(*options)

type options struct {
	metrics    metrics.Recorder
	timed      bool
	admission  []writable.Check
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

// WithConfigured calls fn after every successful Configure (the node
// advertisement refreshes there).
func WithConfigured(fn func()) Option {
	return func(o *options) { o.configured = fn }
}
