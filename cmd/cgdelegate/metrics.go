package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/metrics/prom"
)

// listenMetrics builds the Prometheus recorder and binds addr for it; all
// nil when addr is "" (metrics off). Binding here makes a busy or bad
// address a start-up error.
func listenMetrics(addr string, o prom.Options) (*prom.Recorder, *prom.Server, error) {
	if addr == "" {
		return nil, nil, nil
	}
	rec := prom.New(o)
	srv, err := prom.Listen(addr, rec.Handler())
	if err != nil {
		return nil, nil, err
	}
	return rec, srv, nil
}

// stopMetrics stops the metrics server, giving scrapes under way a moment.
func stopMetrics(srv *prom.Server, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("metrics server shutdown", "error", err)
	}
}
