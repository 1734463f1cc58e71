//go:build integration_guest

package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/workstation"
)

// The cluster boot's kubectl and helm run on the host, as on an
// operator's workstation beside the cluster (integration/internal/
// workstation says why); the scenarios ask it to run each command.

var (
	wsOnce   sync.Once
	wsClient *workstation.Client
	wsErr    error
)

// theWorkstation is the client of the host's workstation, from the
// endpoint the initramfs holds (cluster boots only).
func theWorkstation() (*workstation.Client, error) {
	wsOnce.Do(func() {
		raw, err := os.ReadFile("/" + workstation.File)
		if err != nil {
			wsErr = fmt.Errorf("workstation (kubectl and helm run on the host in the cluster boots only): %w", err)
			return
		}
		var ep workstation.Endpoint
		if err := json.Unmarshal(raw, &ep); err != nil {
			wsErr = fmt.Errorf("workstation: %s: %w", workstation.File, err)
			return
		}
		wsClient = &workstation.Client{Endpoint: ep}
	})
	return wsClient, wsErr
}

// onWorkstation runs req on the host's workstation and records it in
// tools. The error covers a command that did not run or exited non-zero
// and carries its stderr; the Result is returned either way.
func onWorkstation(ctx context.Context, req workstation.Request) (workstation.Result, error) {
	ws, err := theWorkstation()
	if err != nil {
		return workstation.Result{ExitCode: -1}, err
	}
	start := time.Now()
	res, err := ws.Run(ctx, req)
	tools.record(req.Tool, time.Since(start))
	switch {
	case err != nil:
		return workstation.Result{ExitCode: -1}, err
	case res.Error != "":
		return res, fmt.Errorf("%s %s: %s: %s", req.Tool, strings.Join(req.Args, " "), res.Error, strings.TrimSpace(string(res.Stderr)))
	case res.ExitCode != 0:
		return res, fmt.Errorf("%s %s: exit status %d: %s", req.Tool, strings.Join(req.Args, " "), res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return res, nil
}
