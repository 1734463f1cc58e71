//go:build integration_vm

package vm

// The cluster boot's workstation: kubectl and helm run on the host, as an
// operator runs them beside a cluster, for the guest's scenarios
// (integration/internal/workstation says why).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/workstation"
)

// workstationEndpoint is the guest's view of the workstation server that
// startWorkstation runs for a, as JSON for workstation.File.
func workstationEndpoint(a *clusterArtifacts) ([]byte, error) {
	if a.WorkstationPort == 0 || a.WorkstationToken == "" {
		return nil, errors.New("workstation: no port or token chosen")
	}
	return json.Marshal(workstation.Endpoint{
		URL:   "http://" + net.JoinHostPort(clusterHostIP, strconv.Itoa(a.WorkstationPort)),
		Token: a.WorkstationToken,
	})
}

// newWorkstationToken is a random bearer token for this run's server.
func newWorkstationToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("workstation token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// startWorkstation serves a's kubectl and helm, with the admin
// kubeconfig and a HOME of its own under dir, on the host's bridge
// address at a.WorkstationPort until the test ends.
func startWorkstation(t *testing.T, log *slog.Logger, a *clusterArtifacts, dir string) error {
	t.Helper()
	home := filepath.Join(dir, "workstation")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("workstation: %w", err)
	}
	s := &workstation.Server{
		Tools:      map[string]string{"kubectl": filepath.Join(a.Bin, "kubectl"), "helm": a.Helm},
		Kubeconfig: a.PKI.Kubeconfig("admin"),
		Home:       home,
		Token:      a.WorkstationToken,
	}
	if err := s.Validate(); err != nil {
		return err
	}
	addr := net.JoinHostPort(clusterHostIP, strconv.Itoa(a.WorkstationPort))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("workstation: %w", err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("workstation server", "err", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			_ = hs.Close()
		}
	})
	log.Info("workstation up", "addr", addr)
	return nil
}
