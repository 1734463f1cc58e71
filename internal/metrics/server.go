package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Server serves /metrics on one address.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen binds addr (host:port) for h at /metrics. It fails when the
// address can not be bound, naming it; call Serve to start answering.
func Listen(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
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
