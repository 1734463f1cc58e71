package workstation

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeTool writes a shell script that prints its arguments, its stdin,
// $HOME and the kubeconfig's first line, and exits with $1 when it is a
// number.
func fakeTool(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "tool")
	script := `#!/bin/sh
echo "args:$*"
echo "home:$HOME"
echo "kubeconfig:$(head -n1 "$KUBECONFIG")"
cat
echo "to stderr" >&2
case "$1" in sleep) sleep 30;; [0-9]*) exit "$1";; esac
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func newServer(t *testing.T) (*Server, *Client) {
	t.Helper()
	dir := t.TempDir()
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kc, []byte("admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Server{Tools: map[string]string{"kubectl": fakeTool(t, dir)}, Kubeconfig: kc, Home: dir, Token: "0123456789abcdef0123"}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, &Client{Endpoint: Endpoint{URL: hs.URL, Token: s.Token}}
}

func TestRun(t *testing.T) {
	s, c := newServer(t)
	for _, tc := range []struct {
		name       string
		req        Request
		exit       int
		wantStdout []string
	}{
		{
			"args and stdin",
			Request{Tool: "kubectl", Args: []string{"apply", "-f", "-"}, Stdin: []byte("kind: Pod\n")},
			0,
			[]string{"args:apply -f -", "home:" + s.Home, "kubeconfig:admin", "kind: Pod"},
		},
		{"exit status", Request{Tool: "kubectl", Args: []string{"3"}}, 3, []string{"args:3"}},
		{
			"another kubeconfig",
			Request{Tool: "kubectl", Args: []string{"get"}, Kubeconfig: []byte("token-user\n")},
			0,
			[]string{"kubeconfig:token-user"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.Run(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.exit || res.Error != "" {
				t.Errorf("exit %d, error %q; want %d and none", res.ExitCode, res.Error, tc.exit)
			}
			for _, w := range tc.wantStdout {
				if !strings.Contains(string(res.Stdout), w) {
					t.Errorf("stdout %q lacks %q", res.Stdout, w)
				}
			}
			if string(res.Stderr) != "to stderr\n" {
				t.Errorf("stderr %q", res.Stderr)
			}
		})
	}
}

func TestRunRefuses(t *testing.T) {
	_, c := newServer(t)
	for _, tc := range []struct {
		name  string
		token string
		req   Request
		want  string
	}{
		{"no token", "", Request{Tool: "kubectl"}, "401"},
		{"wrong token", "0123456789abcdef0124", Request{Tool: "kubectl"}, "401"},
		{"unknown tool", c.Endpoint.Token, Request{Tool: "sh", Args: []string{"-c", "id"}}, `tool "sh": not one of this workstation's`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := *c
			bad.Endpoint.Token = tc.token
			_, err := bad.Run(context.Background(), tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// A command whose caller gives up is killed, not left running.
func TestRunCancelled(t *testing.T) {
	_, c := newServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Run(ctx, Request{Tool: "kubectl", Args: []string{"sleep"}}); err == nil {
		t.Fatal("a cancelled request returned no error")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the cancelled request returned after %s", d)
	}
}

func TestServerValidate(t *testing.T) {
	ok := Server{Tools: map[string]string{"kubectl": "/bin/kubectl"}, Kubeconfig: "/k", Home: "/h", Token: "0123456789abcdef"}
	for _, tc := range []struct {
		name string
		edit func(*Server)
		want string
	}{
		{"valid", func(*Server) {}, ""},
		{"no tools", func(s *Server) { s.Tools = nil }, "no tools"},
		{"relative tool", func(s *Server) { s.Tools = map[string]string{"helm": "helm"} }, `tool "helm": path "helm" is not absolute`},
		{"relative kubeconfig", func(s *Server) { s.Kubeconfig = "k" }, `kubeconfig "k"`},
		{"no home", func(s *Server) { s.Home = "" }, `home ""`},
		{"short token", func(s *Server) { s.Token = "abc" }, "token shorter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			err := s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}
