package main

import (
	"bytes"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/logging"
)

// fakeCluster serves the node list (labelled: the names; with listCode, a
// refusal instead) and answers each PATCH with refuse[node], or 200, or
// with hang not at all; it returns the service-account directory and the
// environment of a pod that talks to it.
func fakeCluster(t *testing.T, labelled []string, refuse map[string]int, listCode int, hang bool) (string, func(string) string, func() []string) {
	t.Helper()
	var seen []string
	var mu sync.Mutex
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices a client that gives up
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet && listCode != 0 {
			w.WriteHeader(listCode)
			fmt.Fprintf(w, `{"kind":"Status","status":"Failure","message":"nodes is forbidden: cannot list","reason":"Forbidden","code":%d}`, listCode)
			return
		}
		if r.Method == http.MethodGet {
			items := make([]string, len(labelled))
			for i, n := range labelled {
				items[i] = fmt.Sprintf(`{"metadata":{"name":%q,"labels":{"cgdelegate.io/supports-cgroup-options":"true"}}}`, n)
			}
			fmt.Fprintf(w, `{"kind":"PartialObjectMetadataList","metadata":{},"items":[%s]}`, strings.Join(items, ","))
			return
		}
		if hang {
			// Never a success: should the client still read the answer
			// when its deadline ends the wait (the server's context ends
			// with the connection), it is a failure.
			<-r.Context().Done()
			w.WriteHeader(http.StatusGatewayTimeout)
			return
		}
		node := strings.TrimPrefix(r.URL.Path, "/api/v1/nodes/")
		if code, ok := refuse[node]; ok {
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"kind":"Status","status":"Failure","message":"nodes \"%s\" is forbidden: denied by policy","reason":"Forbidden","code":%d}`, node, code)
			return
		}
		fmt.Fprint(w, `{"kind":"Node"}`)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	for name, data := range map[string][]byte{"token": []byte("t\n"), "ca.crt": ca} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
	requests := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	return dir, func(k string) string { return env[k] }, requests
}

func TestNodeLabelWithdraw(t *testing.T) {
	tests := []struct {
		name     string
		labelled []string
		refuse   map[string]int
		listCode int
		hang     bool
		timeout  string
		wantCode int
		want     []string
		dontWant []string
	}{
		{
			name: "every node", labelled: []string{"a", "b"}, wantCode: 0,
			want: []string{`"msg":"node label removed","label":"cgdelegate.io/supports-cgroup-options","node":"a"`, `"node":"b"`, `"msg":"no node carries the label any more"`, `"removed":2`},
		},
		{name: "no node labelled", wantCode: 0, want: []string{`"removed":0`}},
		{
			name: "one refused", labelled: []string{"a", "b", "c"}, refuse: map[string]int{"b": http.StatusForbidden}, wantCode: 1,
			want: []string{
				`"msg":"cannot remove the node label"`, `"node":"b"`, `"status":403`, `"reason":"Forbidden"`,
				`HTTP 403: nodes \"b\" is forbidden: denied by policy`,
				`"msg":"the node label is still on some nodes"`, `"failed":1`, `"listed":3`, `"nodes":"b"`,
				`"msg":"node label removed","label":"cgdelegate.io/supports-cgroup-options","node":"c"`,
			},
			dontWant: []string{"no node carries the label any more"},
		},
		{
			name: "list refused", labelled: []string{"a"}, listCode: http.StatusForbidden, wantCode: 1,
			want:     []string{`"msg":"cannot list the labelled nodes"`, `"status":403`, "cannot list"},
			dontWant: []string{"no node carries the label any more", "node label removed"},
		},
		{
			name: "timeout", labelled: []string{"a", "b"}, hang: true, timeout: "300ms", wantCode: 1,
			want: []string{
				`"msg":"cannot remove the node label","label":"cgdelegate.io/supports-cgroup-options","node":"a"`,
				`"node":"b"`, "context deadline exceeded", `"nodes":"a,b"`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, getenv, seen := fakeCluster(t, tc.labelled, tc.refuse, tc.listCode, tc.hang)
			timeout := "20s"
			if tc.timeout != "" {
				timeout = tc.timeout
			}
			var errOut bytes.Buffer
			start := time.Now()
			code := runNodeLabel([]string{"withdraw", "-service-account-dir", dir, "-log-format", "json", "-timeout", timeout}, &errOut, getenv)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v with -timeout %s", d, timeout)
			}
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr=%s", code, tc.wantCode, errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("log lacks %s:\n%s", w, errOut.String())
				}
			}
			for _, w := range tc.dontWant {
				if strings.Contains(errOut.String(), w) {
					t.Errorf("log has %s:\n%s", w, errOut.String())
				}
			}
			wantRequests := 1 + len(tc.labelled)
			if tc.listCode != 0 {
				wantRequests = 1
			}
			if got := seen(); len(got) != wantRequests {
				t.Errorf("requests %q, want the list and one patch per node", got)
			}
		})
	}
}

// Outside a pod the withdrawal fails at once, naming what is missing.
func TestNodeLabelWithdrawOutsideAPod(t *testing.T) {
	for _, k := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if code := run([]string{"node-label", "withdraw", "-service-account-dir", dir}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1; stderr=%s", code, errOut.String())
	}
	for _, w := range []string{"cannot withdraw the node label", "$KUBERNETES_SERVICE_HOST is not set", filepath.Join(dir, "token")} {
		if !strings.Contains(errOut.String(), w) {
			t.Errorf("stderr lacks %s:\n%s", w, errOut.String())
		}
	}
}

func TestParseWithdrawFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want withdrawFlags
	}{
		{"defaults", []string{"withdraw"}, withdrawFlags{timeout: time.Minute, saDir: "/var/run/secrets/kubernetes.io/serviceaccount", level: slog.LevelInfo}},
		{
			"everything",
			[]string{"withdraw", "-timeout", "50s", "-service-account-dir", "/sa", "-log-level", "debug", "-log-format", "json"},
			withdrawFlags{timeout: 50 * time.Second, saDir: "/sa", level: slog.LevelDebug, format: logging.JSON},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var errOut bytes.Buffer
			got, err := parseWithdrawFlags(tc.args, &errOut)
			if err != nil || got != tc.want {
				t.Fatalf("parseWithdrawFlags = %+v, %v; want %+v; stderr=%s", got, err, tc.want, errOut.String())
			}
		})
	}
	var errOut bytes.Buffer
	if _, err := parseWithdrawFlags([]string{"-h"}, &errOut); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut.String(), "-timeout") {
		t.Errorf("-h: %v, usage %s", err, errOut.String())
	}
}
