package advert

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// request is what the fake API server saw.
type request struct {
	method, path, contentType, auth, body string
}

// fakeAPI is an API server over TLS that records every request and answers
// from a script (then 200 with an empty Node).
type fakeAPI struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []request
	answers  []answer
	// redirect, when set, is the Location every answer carries (with the
	// answer's code, a 3xx).
	redirect string
}

type answer struct {
	code int
	body string
}

func newFakeAPI(t *testing.T, answers ...answer) *fakeAPI {
	f := &fakeAPI{answers: answers}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, request{
		method: r.Method, path: r.URL.EscapedPath(), contentType: r.Header.Get("Content-Type"),
		auth: r.Header.Get("Authorization"), body: string(body),
	})
	a := answer{code: http.StatusOK, body: `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`}
	if len(f.answers) > 0 {
		a, f.answers = f.answers[0], f.answers[1:]
	}
	redirect := f.redirect
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if redirect != "" {
		w.Header().Set("Location", redirect)
	}
	w.WriteHeader(a.code)
	_, _ = io.WriteString(w, a.body)
}

func (f *fakeAPI) seen() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.requests...)
}

// serviceAccount writes a token and the fake server's CA into a new
// directory and returns the directory and the environment a pod on node-a
// would have.
func (f *fakeAPI) serviceAccount(t *testing.T) (string, func(string) string) {
	dir := t.TempDir()
	writeToken(t, dir, "token-1")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, caFile), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{EnvServiceHost: host, EnvServicePort: port, EnvNodeName: "node-a"}
	return dir, func(k string) string { return env[k] }
}

func writeToken(t *testing.T, dir, token string) {
	t.Helper()
	// As the kubelet does: a new file put in place, with a newline.
	tmp := filepath.Join(dir, ".token.tmp")
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, tokenFile)); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log sink safe for the labeler's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newLabeler returns a labeler (nodeLabel: on) on node "node-a" talking to
// f, fast retries, and its log.
func newLabeler(t *testing.T, f *fakeAPI) (*NodeLabeler, string, *syncBuffer) {
	t.Helper()
	dir, getenv := f.serviceAccount(t)
	cfg := config.Default()
	cfg.NodeLabel = config.NodeLabelOn
	cfg.ServiceAccountDir = dir
	logs := &syncBuffer{}
	l, err := NewNodeLabeler(cfg, getenv, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if l == nil {
		t.Fatal("nodeLabel: on returned no labeler")
	}
	l.retryMin, l.retryMax = 5*time.Millisecond, 20*time.Millisecond
	return l, dir, logs
}

const (
	setBody    = `{"metadata":{"labels":{"cgdelegate.io/supports-cgroup-options":"true"}}}`
	removeBody = `{"metadata":{"labels":{"cgdelegate.io/supports-cgroup-options":null}}}`
	// stopBody is the withdrawal when the plugin stops: the label removed,
	// the reason plugin_stopped.
	stopBody = `{"metadata":{"annotations":{"cgdelegate.io/supports-cgroup-options-reason":"plugin_stopped"},` +
		`"labels":{"cgdelegate.io/supports-cgroup-options":null}}}`
)

func TestLabelPatch(t *testing.T) {
	if got := string(labelPatch(stateSet.value())); got != setBody {
		t.Errorf("set patch %s, want %s", got, setBody)
	}
	if got := string(labelPatch(stateRemoved.value())); got != removeBody {
		t.Errorf("remove patch %s, want %s", got, removeBody)
	}
	// The value is the one the NFD feature file gives the label.
	if want := FeatureLabel + "=" + *stateSet.value() + "\n"; !strings.HasSuffix(FeatureContent(true), want) {
		t.Errorf("feature file %q does not end with %q", FeatureContent(true), want)
	}
}

// TestAPIRedirectRefused plays an API address that redirects the node
// label's patch and the uninstall's list to another server (same CA, same
// host, another port): the client follows no redirect, so that server
// never sees the token or the request, and the error names the location.
func TestAPIRedirectRefused(t *testing.T) {
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			elsewhere := newFakeAPI(t)
			target := elsewhere.srv.URL + "/api/v1/nodes/node-a"
			f := newFakeAPI(t, answer{code, ""}, answer{code, ""})
			f.redirect = target
			dir, getenv := f.serviceAccount(t)
			c, err := newKubeClient(lookInCluster(getenv, dir, true))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			errPatch := c.patchNode(ctx, "node-a", labelPatch(nil))
			_, errList := c.listNodes(ctx, FeatureLabel, nil)
			for _, err := range []error{errPatch, errList} {
				if !errors.Is(err, ErrRedirect) || !strings.Contains(err.Error(), strconv.Quote(target)) {
					t.Errorf("err = %v, want ErrRedirect naming %q", err, target)
				}
			}
			if got := elsewhere.seen(); len(got) != 0 {
				t.Fatalf("the redirect was followed: the other server saw %+v", got)
			}
			if got := f.seen(); len(got) != 2 {
				t.Fatalf("the API address saw %d requests, want 2: %+v", len(got), got)
			}
		})
	}
}

// Each change is one merge patch of the own Node, with the token as it is
// at the time of the request; an unchanged state sends nothing.
func TestNodeLabelRequests(t *testing.T) {
	f := newFakeAPI(t)
	l, dir, _ := newLabeler(t, f)
	ctx := context.Background()

	l.Set(true)
	l.converge(ctx)
	l.Set(true)
	l.converge(ctx)
	writeToken(t, dir, "token-2") // a projected token rotated
	l.Set(false)
	l.converge(ctx)
	l.Set(true)
	l.converge(ctx)

	want := []request{
		{http.MethodPatch, "/api/v1/nodes/node-a", "application/merge-patch+json", "Bearer token-1", setBody},
		{http.MethodPatch, "/api/v1/nodes/node-a", "application/merge-patch+json", "Bearer token-2", removeBody},
		{http.MethodPatch, "/api/v1/nodes/node-a", "application/merge-patch+json", "Bearer token-2", setBody},
	}
	got := f.seen()
	if len(got) != len(want) {
		t.Fatalf("requests %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if r := l.Result(); !r.Applied || r.Want != "true" || r.Node != "node-a" || r.Error != "" || r.At.IsZero() {
		t.Errorf("result %+v", r)
	}
}

func TestNodeLabelWithdraw(t *testing.T) {
	f := newFakeAPI(t)
	l, _, _ := newLabeler(t, f)
	ctx := context.Background()
	l.Set(true)
	l.converge(ctx)
	if err := l.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	// A refresh racing the shutdown does not bring the label back, and a
	// second withdrawal has nothing left to send.
	l.Set(true)
	l.Set(false)
	l.converge(ctx)
	if err := l.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	got := f.seen()
	if len(got) != 2 || got[1].method != http.MethodPatch || got[1].body != stopBody || got[1].path != "/api/v1/nodes/node-a" {
		t.Fatalf("requests %+v, want the set then one removal", got)
	}
}

// A refusal by the admission policy names the node, the status and the
// policy's message, in the returned error and in the retry log.
func TestNodeLabelForbidden(t *testing.T) {
	const msg = `nodes "node-b" is forbidden: ValidatingAdmissionPolicy 'cgdelegate-node-label' with binding 'cgdelegate-node-label' denied request: only the own node's cgdelegate.io/supports-cgroup-options label`
	status := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"` +
		strings.ReplaceAll(msg, `"`, `\"`) + `","reason":"Forbidden","code":403}`
	f := newFakeAPI(t, answer{http.StatusForbidden, status}, answer{http.StatusForbidden, status})
	l, _, _ := newLabeler(t, f)

	err := l.Withdraw(context.Background())
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != http.StatusForbidden || ae.Message != msg || ae.Reason != "Forbidden" {
		t.Fatalf("Withdraw = %v, want an APIError 403 with the policy's message", err)
	}
	for _, w := range []string{`node "node-a"`, "HTTP 403", "ValidatingAdmissionPolicy 'cgdelegate-node-label'", "PATCH /api/v1/nodes/node-a"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}

	// In the background the refusal is logged, and retried.
	l2, _, logs2 := newLabeler(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l2.Run(ctx) }()
	l2.Set(true)
	waitFor(t, func() bool { return l2.Result().Applied })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	log := logs2.String()
	for _, w := range []string{"node=node-a", "status=403", "reason=Forbidden", "ValidatingAdmissionPolicy", "cannot update the node label"} {
		if !strings.Contains(log, w) {
			t.Errorf("log does not mention %q:\n%s", w, log)
		}
	}
}

// A failing API server is retried with backoff until it answers.
func TestNodeLabelRetries(t *testing.T) {
	f := newFakeAPI(t, answer{http.StatusInternalServerError, "etcd is down"}, answer{http.StatusServiceUnavailable, ""})
	l, _, logs := newLabeler(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	l.Set(true)
	waitFor(t, func() bool { return l.Result().Applied })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	got := f.seen()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3 (500, 503, then success): %+v", len(got), got)
	}
	for i, r := range got {
		if r.body != setBody {
			t.Errorf("request %d body %s", i, r.body)
		}
	}
	log := logs.String()
	for _, w := range []string{"status=500", "etcd is down", "attempt=1", "status=503", "attempt=2", "node label set"} {
		if !strings.Contains(log, w) {
			t.Errorf("log does not mention %q:\n%s", w, log)
		}
	}
}

// The API unreachable: Set still returns at once, and Withdraw gives up
// when its context ends.
func TestNodeLabelNeverBlocks(t *testing.T) {
	f := newFakeAPI(t)
	l, _, _ := newLabeler(t, f)
	f.srv.Close()
	start := time.Now()
	for range 100 {
		l.Set(true)
		l.Set(false)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Set took %v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := l.Withdraw(ctx); err == nil || !strings.Contains(err.Error(), `node "node-a"`) {
		t.Fatalf("Withdraw against a closed server = %v, want an error naming the node", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNewNodeLabeler(t *testing.T) {
	f := newFakeAPI(t)
	dir, getenv := f.serviceAccount(t)
	without := func(keys ...string) func(string) string {
		return func(k string) string {
			for _, drop := range keys {
				if k == drop {
					return ""
				}
			}
			return getenv(k)
		}
	}
	with := func(key, value string) func(string) string {
		return func(k string) string {
			if k == key {
				return value
			}
			return getenv(k)
		}
	}
	empty := t.TempDir()
	tests := []struct {
		name      string
		mode      config.NodeLabelMode
		saDir     string
		getenv    func(string) string
		wantLabel bool
		wantErr   []string
	}{
		{name: "auto in a pod", mode: config.NodeLabelAuto, saDir: dir, getenv: getenv, wantLabel: true},
		{name: "on in a pod", mode: config.NodeLabelOn, saDir: dir, getenv: getenv, wantLabel: true},
		{name: "off in a pod", mode: config.NodeLabelOff, saDir: dir, getenv: getenv},
		{name: "auto on the host", mode: config.NodeLabelAuto, saDir: empty, getenv: func(string) string { return "" }},
		{name: "auto without NODE_NAME", mode: config.NodeLabelAuto, saDir: dir, getenv: without(EnvNodeName)},
		{name: "auto without a token", mode: config.NodeLabelAuto, saDir: empty, getenv: getenv},
		{
			name: "on on the host", mode: config.NodeLabelOn, saDir: empty, getenv: func(string) string { return "" },
			wantErr: []string{`nodeLabel: "on"`, "$NODE_NAME is not set", "$KUBERNETES_SERVICE_HOST is not set", "$KUBERNETES_SERVICE_PORT is not set", filepath.Join(empty, "token"), filepath.Join(empty, "ca.crt")},
		},
		{name: "auto with a bad port", mode: config.NodeLabelAuto, saDir: dir, getenv: with(EnvServicePort, "https"), wantErr: []string{`$KUBERNETES_SERVICE_PORT: "https" is not a port number`}},
		{name: "on with port 0", mode: config.NodeLabelOn, saDir: dir, getenv: with(EnvServicePort, "0"), wantErr: []string{`$KUBERNETES_SERVICE_PORT: "0" is not a port number`}},
		{name: "auto with a path for a node", mode: config.NodeLabelAuto, saDir: dir, getenv: with(EnvNodeName, "a/b"), wantErr: []string{`$NODE_NAME: "a/b" is not a node name`}},
		{name: "on without NODE_NAME", mode: config.NodeLabelOn, saDir: dir, getenv: without(EnvNodeName), wantErr: []string{"$NODE_NAME is not set"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.NodeLabel, cfg.ServiceAccountDir = tc.mode, tc.saDir
			l, err := NewNodeLabeler(cfg, tc.getenv, nil)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("want an error mentioning %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (l != nil) != tc.wantLabel {
				t.Fatalf("labeler %v, want one: %v", l, tc.wantLabel)
			}
			if l != nil && l.Node() != "node-a" {
				t.Errorf("node %q", l.Node())
			}
		})
	}
}

// An empty token is an error naming the file, not a request without
// credentials.
func TestNodeLabelEmptyToken(t *testing.T) {
	f := newFakeAPI(t)
	l, dir, _ := newLabeler(t, f)
	writeToken(t, dir, "  ")
	err := l.Withdraw(context.Background())
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, tokenFile)+" is empty") {
		t.Fatalf("Withdraw = %v, want an error naming the empty token", err)
	}
	if n := len(f.seen()); n != 0 {
		t.Fatalf("%d requests without a token", n)
	}
}

func TestNewNodeLabelerBadCA(t *testing.T) {
	f := newFakeAPI(t)
	dir, getenv := f.serviceAccount(t)
	if err := os.WriteFile(filepath.Join(dir, caFile), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.ServiceAccountDir = dir
	_, err := NewNodeLabeler(cfg, getenv, nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, caFile)) || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("err = %v, want one naming the CA file", err)
	}
}

// The advertisement drives the label: Refresh sets it from the readiness
// report (sent by Watch), Withdraw removes it; without a labeler nothing is
// sent.
func TestAdvertiserNodeLabel(t *testing.T) {
	f := newFakeAPI(t)
	l, _, _ := newLabeler(t, f)
	src := newSource(t)
	if err := os.WriteFile(src.cfg.MountinfoPath, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := New(src, nil, WithNodeLabel(l))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Watch(ctx, time.Hour) }()
	a.Refresh()
	waitFor(t, func() bool { return l.Result().Applied && l.Result().Want == "true" })

	src.mu.Lock()
	src.st.NsDelegate = false
	src.mu.Unlock()
	a.Refresh()
	waitFor(t, func() bool { return l.Result().Applied && l.Result().Want == "absent" })
	if r := a.NodeLabel(); r == nil || r.Want != "absent" || !r.Applied || r.Node != "node-a" {
		t.Errorf("NodeLabel() = %+v", r)
	}
	a.Refresh() // publishes the last result
	pub, err := status.ReadPublished(src.cfg.StatusFile)
	if err != nil {
		t.Fatal(err)
	}
	if pub.NodeLabel == nil || pub.NodeLabel.Want != "absent" || !pub.NodeLabel.Applied {
		t.Errorf("published node label %+v", pub.NodeLabel)
	}

	src.mu.Lock()
	src.st.NsDelegate = true
	src.mu.Unlock()
	a.Refresh()
	waitFor(t, func() bool { return l.Result().Applied && l.Result().Want == "true" })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if err := a.Withdraw(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := f.seen()
	bodies := make([]string, len(got))
	for i, r := range got {
		bodies[i] = r.body
	}
	reasonBody := func(label, reason string) string {
		return `{"metadata":{"annotations":{"cgdelegate.io/supports-cgroup-options-reason":` + reason + `},` +
			`"labels":{"cgdelegate.io/supports-cgroup-options":` + label + `}}}`
	}
	want := []string{
		reasonBody(`"true"`, "null"), reasonBody("null", `"no_nsdelegate"`), reasonBody(`"true"`, "null"), stopBody,
	}
	if strings.Join(bodies, "\n") != strings.Join(want, "\n") {
		t.Fatalf("bodies\n%s\nwant\n%s", strings.Join(bodies, "\n"), strings.Join(want, "\n"))
	}
}

// nodeLabel: off in a pod that could reach the API: no labeler, and the
// advertisement sends nothing.
func TestAdvertiserNoNodeLabel(t *testing.T) {
	f := newFakeAPI(t)
	dir, getenv := f.serviceAccount(t)
	src := newSource(t)
	src.cfg.NodeLabel, src.cfg.ServiceAccountDir = config.NodeLabelOff, dir
	if err := os.WriteFile(src.cfg.MountinfoPath, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := NewNodeLabeler(src.cfg, getenv, nil)
	if err != nil || l != nil {
		t.Fatalf("NewNodeLabeler(off) = %v, %v; want none", l, err)
	}
	a := New(src, nil, WithNodeLabel(l))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Watch(ctx, time.Hour) }()
	a.Refresh()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if err := a.Withdraw(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.NodeLabel() != nil || a.Report().NodeLabel != nil || len(f.seen()) != 0 {
		t.Fatalf("label off: result %v, requests %+v", a.NodeLabel(), f.seen())
	}
}

// The wanted state is sent again every resync period, so a label removed
// behind the plugin's back comes back.
func TestNodeLabelResync(t *testing.T) {
	f := newFakeAPI(t)
	l, _, _ := newLabeler(t, f)
	l.resync = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	l.Set(true)
	waitFor(t, func() bool { return len(f.seen()) >= 3 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	for i, r := range f.seen() {
		if r.body != setBody {
			t.Errorf("request %d body %s, want the set", i, r.body)
		}
	}
}

// While a request hangs, Set still returns at once, and stopping Run ends
// the request so that Withdraw can go.
func TestNodeLabelHangingAPI(t *testing.T) {
	release := make(chan struct{})
	hanging := make(chan struct{}) // closed when the first request hangs
	f := newFakeAPI(t)
	inner := f.srv.Config.Handler
	var first sync.Once
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hang := false
		first.Do(func() { hang = true })
		if hang {
			close(hanging)
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		inner.ServeHTTP(w, r)
	})
	defer close(release)
	l, _, _ := newLabeler(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	l.Set(true)
	// The first request hangs; waiting for it (not a fixed sleep) keeps a
	// loaded machine from sending it after cancel, when it would be
	// Withdraw's own request that hangs.
	select {
	case <-hanging:
	case <-time.After(30 * time.Second):
		t.Fatal("the first request never reached the API server")
	}
	start := time.Now()
	l.Set(false)
	l.Set(true)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Set blocked %v behind a hanging request", d)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	// 10 s: a TLS handshake under -race on a loaded 2-core machine took
	// more than 2 s once.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := l.Withdraw(wctx); err != nil {
		t.Fatalf("Withdraw after Run stopped: %v", err)
	}
	if got := f.seen(); len(got) != 1 || got[0].body != stopBody {
		t.Fatalf("requests answered %+v, want only the removal", got)
	}
}

// With the fail-closed report on (SetFailClosed), every patch carries the
// annotation beside the label, a change of either is one patch, and the
// withdrawal removes both.
func TestNodeLabelFailClosedAnnotation(t *testing.T) {
	f := newFakeAPI(t)
	l, _, _ := newLabeler(t, f)
	ctx := context.Background()
	l.SetFailClosed(status.FailClosedOff)
	l.Set(true)
	l.converge(ctx)
	l.SetFailClosed(status.FailClosedOff) // unchanged: nothing sent
	l.converge(ctx)
	l.SetFailClosed(status.FailClosedEnforced)
	l.converge(ctx)
	if r := l.Result(); !r.Applied || r.FailClosed != status.FailClosedEnforced {
		t.Errorf("result %+v", r)
	}
	if err := l.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"metadata":{"annotations":{"cgdelegate.io/fail-closed":"off"},"labels":{"cgdelegate.io/supports-cgroup-options":"true"}}}`,
		`{"metadata":{"annotations":{"cgdelegate.io/fail-closed":"enforced"},"labels":{"cgdelegate.io/supports-cgroup-options":"true"}}}`,
		`{"metadata":{"annotations":{"cgdelegate.io/fail-closed":null,"cgdelegate.io/supports-cgroup-options-reason":"plugin_stopped"},` +
			`"labels":{"cgdelegate.io/supports-cgroup-options":null}}}`,
	}
	got := f.seen()
	bodies := make([]string, len(got))
	for i, r := range got {
		bodies[i] = r.body
	}
	if strings.Join(bodies, "\n") != strings.Join(want, "\n") {
		t.Fatalf("bodies\n%s\nwant\n%s", strings.Join(bodies, "\n"), strings.Join(want, "\n"))
	}
	if r := l.Result(); !r.Applied || r.FailClosed != "absent" || r.Want != "absent" {
		t.Errorf("result after the withdrawal %+v", r)
	}
}

// The advertiser reports what WithFailClosed says: in the status, with a
// warning when the runtime does not enforce required-plugins, and on the
// Node beside the label.
func TestAdvertiserFailClosed(t *testing.T) {
	for _, state := range status.FailClosedStates {
		t.Run(state, func(t *testing.T) {
			f := newFakeAPI(t)
			l, _, _ := newLabeler(t, f)
			src := newSource(t)
			fc := &status.FailClosed{State: state, Reason: "because"}
			a := New(src, nil, WithNodeLabel(l), WithFailClosed(func() *status.FailClosed { return fc }))
			a.Refresh()
			l.converge(context.Background())
			pub, err := status.ReadPublished(src.cfg.StatusFile)
			if err != nil {
				t.Fatal(err)
			}
			if pub.FailClosed == nil || *pub.FailClosed != *fc {
				t.Errorf("published failClosed %+v, want %+v", pub.FailClosed, fc)
			}
			warned := strings.Contains(strings.Join(pub.Warnings, "\n"), "fail-closed is "+state+": because")
			if warned != (state != status.FailClosedEnforced) {
				t.Errorf("warnings %q: want a fail-closed warning: %t", pub.Warnings, state != status.FailClosedEnforced)
			}
			if got := f.seen(); len(got) != 1 || !strings.Contains(got[0].body, `"cgdelegate.io/fail-closed":"`+state+`"`) {
				t.Errorf("patches %+v, want one with the annotation %s", got, state)
			}
		})
	}
}
