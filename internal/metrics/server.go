package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Server serves /metrics on one address.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// ErrProfilingExposed means profiling was asked on an address that is not
// loopback only.
var ErrProfilingExposed = errors.New("profiles would be served beyond loopback")

// Listen binds addr (host:port) for h at /metrics and, with profiling,
// Go's runtime profiles at /debug/pprof/ (net/http/pprof's handlers, on
// this server only). It fails when the address can not be bound, naming
// it, and with profiling when the bound address is not a loopback one
// (ErrProfilingExposed): a profile holds the plugin's memory and command
// line, and the metrics address may be on the pod network. Call Serve to
// start answering.
func Listen(addr string, h http.Handler, profiling bool) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %q: %w", addr, err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); profiling && (!ok || !tcp.IP.IsLoopback()) {
		_ = ln.Close()
		return nil, fmt.Errorf("metrics: %w: profiling on %q (bound %s); bind metricsAddress to 127.0.0.1, [::1] or localhost", ErrProfilingExposed, addr, ln.Addr())
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	// No write timeout: a CPU profile answers after its seconds.
	return &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is the bound address (the port chosen for ":0").
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve answers until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve on %s: %w", s.ln.Addr(), err)
	}
	return nil
}

// Shutdown stops serving, waiting for scrapes under way until ctx is done,
// and releases the address, served or not.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if cerr := s.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	return err
}
