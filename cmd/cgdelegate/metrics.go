package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/metrics"
)

// listenMetrics builds the Prometheus recorder and binds addr for it; all
// nil when addr is "" (metrics off). Binding here makes a busy or bad
// address a start-up error. The node's gauges are added once the parts
// they read exist (Recorder.ObserveNode).
func listenMetrics(addr string, profiling bool) (*metrics.Recorder, *metrics.Server, error) {
	if addr == "" {
		return nil, nil, nil
	}
	rec := metrics.New(metrics.Options{})
	srv, err := metrics.Listen(addr, rec.Handler(), profiling)
	if err != nil {
		return nil, nil, err
	}
	return rec, srv, nil
}

// stopMetrics stops the metrics server, giving scrapes under way a moment.
func stopMetrics(srv *metrics.Server, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("metrics server shutdown", "error", err)
	}
}
