// Package workstation runs the cluster boot's kubectl and helm where an
// operator runs them: on a machine beside the cluster (the host), not on
// the node. The guest's scenarios are Go tests inside the VM; they send
// each command to the host's Server and get its output and exit status
// back, as a user at a workstation would see them.
//
// Why not in the guest: under emulation (TCG) every kubectl or helm
// process cost the guest 1 to 5 seconds of CPU before its first request
// (ClusterAdmissionPolicy spent 89 of its 105 s in 19 kubectl runs), time
// the node's kubelet, containerd and cgdelegate then did not get.
package workstation

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// File is where the cluster boot's initramfs holds the guest's Endpoint
// (JSON), relative to the guest's root.
const File = "cgd/workstation.json"

// Endpoint is how a guest reaches the Server.
type Endpoint struct {
	// URL is the server's base URL, http://<the host's bridge address>:<port>.
	URL string `json:"url"`
	// Token is the bearer token the server requires.
	Token string `json:"token"`
}

// Request is one command to run.
type Request struct {
	// Tool names the program: one of the Server's Tools.
	Tool string `json:"tool"`
	// Args are its arguments, without the program.
	Args []string `json:"args"`
	// Stdin is its standard input; empty reads nothing.
	Stdin []byte `json:"stdin,omitempty"`
	// Kubeconfig, when set, is the kubeconfig the command runs with
	// instead of the Server's (kubectl as another account).
	Kubeconfig []byte `json:"kubeconfig,omitempty"`
}

// Result is what the command printed and how it ended.
type Result struct {
	Stdout []byte `json:"stdout"`
	Stderr []byte `json:"stderr"`
	// ExitCode is the command's exit status; -1 when it did not start
	// or was killed (Error says why).
	ExitCode int `json:"exitCode"`
	// Error is why the command did not run or end by itself; empty when
	// it exited, with any status.
	Error string `json:"error,omitempty"`
}

// Server runs Requests with the admin kubeconfig.
type Server struct {
	// Tools maps a tool's name to its program's path.
	Tools map[string]string
	// Kubeconfig is the admin kubeconfig every command runs with.
	Kubeconfig string
	// Home is the commands' HOME (helm's configuration and cache).
	Home string
	// Token is the bearer token a request must carry.
	Token string
}

// Validate says what is missing from s.
func (s *Server) Validate() error {
	var errs []error
	if len(s.Tools) == 0 {
		errs = append(errs, errors.New("workstation: no tools"))
	}
	for name, path := range s.Tools {
		if !filepath.IsAbs(path) {
			errs = append(errs, fmt.Errorf("workstation: tool %q: path %q is not absolute", name, path))
		}
	}
	if !filepath.IsAbs(s.Kubeconfig) {
		errs = append(errs, fmt.Errorf("workstation: kubeconfig %q is not an absolute path", s.Kubeconfig))
	}
	if !filepath.IsAbs(s.Home) {
		errs = append(errs, fmt.Errorf("workstation: home %q is not an absolute path", s.Home))
	}
	if len(s.Token) < 16 {
		errs = append(errs, errors.New("workstation: token shorter than 16 characters"))
	}
	return errors.Join(errs...)
}

// ServeHTTP runs one POST /run Request and answers its Result as JSON.
// The command is killed when the request's context ends (the guest gave
// up or went away).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/run" {
		http.Error(w, "POST /run only", http.StatusNotFound)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+s.Token)) != 1 {
		http.Error(w, "bad or missing bearer token", http.StatusUnauthorized)
		return
	}
	var req Request
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
		http.Error(w, "request: "+err.Error(), http.StatusBadRequest)
		return
	}
	path, ok := s.Tools[req.Tool]
	if !ok {
		http.Error(w, fmt.Sprintf("tool %q: not one of this workstation's", req.Tool), http.StatusBadRequest)
		return
	}
	res := s.run(r.Context(), path, req)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}

func (s *Server) run(ctx context.Context, path string, req Request) Result {
	kubeconfig := s.Kubeconfig
	if len(req.Kubeconfig) > 0 {
		dir, err := os.MkdirTemp("", "workstation-")
		if err != nil {
			return Result{ExitCode: -1, Error: err.Error()}
		}
		defer os.RemoveAll(dir)
		kubeconfig = filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(kubeconfig, req.Kubeconfig, 0o600); err != nil {
			return Result{ExitCode: -1, Error: err.Error()}
		}
	}
	cmd := exec.CommandContext(ctx, path, req.Args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + s.Home, "KUBECONFIG=" + kubeconfig}
	cmd.Dir = s.Home
	// Killed with its children (kubectl exec's, helm's) when the caller
	// gives up; pipes a grandchild still holds are closed soon after.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = bytes.NewReader(req.Stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		res.ExitCode = exit.ExitCode()
	default:
		res.ExitCode, res.Error = -1, err.Error()
	}
	return res
}

// Client sends Requests to a Server.
type Client struct {
	Endpoint Endpoint
	// HTTP is the client used; nil is http.DefaultClient.
	HTTP *http.Client
}

// Run runs req on the workstation. The error is about getting the
// command run; how it ended is the Result's.
func (c *Client) Run(ctx context.Context, req Request) (Result, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Result{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.Endpoint.URL, "/")+"/run", bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("workstation: %w", err)
	}
	hr.Header.Set("Authorization", "Bearer "+c.Endpoint.Token)
	hr.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return Result{}, fmt.Errorf("workstation: %s %s: %w", req.Tool, strings.Join(req.Args, " "), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return Result{}, fmt.Errorf("workstation: %s %s: reading the answer: %w", req.Tool, strings.Join(req.Args, " "), err)
	}
	if resp.StatusCode != http.StatusOK {
		return Result{}, fmt.Errorf("workstation: %s %s: %s: %s", req.Tool, strings.Join(req.Args, " "), resp.Status, bytes.TrimSpace(raw))
	}
	var res Result
	if err := json.Unmarshal(raw, &res); err != nil {
		return Result{}, fmt.Errorf("workstation: %s %s: the answer: %w", req.Tool, strings.Join(req.Args, " "), err)
	}
	return res, nil
}
