package advert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// cluster is a fake API server's nodes: the labelled ones are listed (in
// pages of the requested size), and PATCHes are answered from refuse (by
// node) or with 200.
type cluster struct {
	labelled []string
	// annotated carry only the fail-closed annotation, reasoned only the
	// reason annotation (a plugin that stopped), plain none; they are
	// listed after the labelled ones, in this order.
	annotated, reasoned, plain []string
	refuse                     map[string]answer
	// hang: every PATCH waits until the client gives up.
	hang bool

	mu   sync.Mutex
	seen []clusterRequest
}

type clusterRequest struct {
	method, path, query, contentType, accept, auth, body string
}

func (c *cluster) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.seen = append(c.seen, clusterRequest{
		method: r.Method, path: r.URL.EscapedPath(), query: r.URL.RawQuery,
		contentType: r.Header.Get("Content-Type"), accept: r.Header.Get("Accept"),
		auth: r.Header.Get("Authorization"), body: string(body),
	})
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
		q := r.URL.Query()
		limit, err := strconv.Atoi(q.Get("limit"))
		if err != nil || q.Has("labelSelector") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var all []string
		for _, n := range c.labelled {
			all = append(all, fmt.Sprintf(`{"metadata":{"name":%q,"labels":{%q:"true","zone":"z"}}}`, n, FeatureLabel))
		}
		for _, n := range c.annotated {
			all = append(all, fmt.Sprintf(`{"metadata":{"name":%q,"labels":{"zone":"z"},"annotations":{%q:"off"}}}`, n, FailClosedAnnotation))
		}
		for _, n := range c.reasoned {
			all = append(all, fmt.Sprintf(`{"metadata":{"name":%q,"labels":{"zone":"z"},"annotations":{%q:"plugin_stopped"}}}`, n, ReasonAnnotation))
		}
		for _, n := range c.plain {
			all = append(all, fmt.Sprintf(`{"metadata":{"name":%q,"labels":{"zone":"z"},"annotations":{"x":"y"}}}`, n))
		}
		start, _ := strconv.Atoi(q.Get("continue"))
		end := min(start+limit, len(all))
		items := all[start:end]
		cont := ""
		if end < len(all) {
			cont = strconv.Itoa(end)
		}
		fmt.Fprintf(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"continue":%q},"items":[%s]}`,
			cont, strings.Join(items, ","))
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, "/api/v1/nodes/"):
		if c.hang {
			// Never a success, should the client still read it.
			<-r.Context().Done()
			w.WriteHeader(http.StatusGatewayTimeout)
			return
		}
		if a, ok := c.refuse[strings.TrimPrefix(r.URL.Path, "/api/v1/nodes/")]; ok {
			w.WriteHeader(a.code)
			_, _ = io.WriteString(w, a.body)
			return
		}
		_, _ = io.WriteString(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (c *cluster) requests() []clusterRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// newWithdrawer serves c over TLS and returns a withdrawer with a token and
// the server's CA, as in a pod without $NODE_NAME (a Job's).
func newWithdrawer(t *testing.T, c *cluster) *ClusterWithdrawer {
	t.Helper()
	f := newFakeAPI(t)
	f.srv.Config.Handler = http.HandlerFunc(c.serve)
	dir, getenv := f.serviceAccount(t)
	w, err := NewClusterWithdrawer(dir, func(k string) string {
		if k == EnvNodeName {
			return ""
		}
		return getenv(k)
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// forbidden is the API's answer when an admission policy refuses.
func forbidden(node, msg string) answer {
	return answer{http.StatusForbidden, fmt.Sprintf(
		`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"nodes \"%s\" is forbidden: %s","reason":"Forbidden","code":403}`, node, msg)}
}

// Every node is listed, metadata only, page by page; each that carries the
// label or the fail-closed annotation gets one merge patch that removes
// both, and the others none.
func TestWithdrawAll(t *testing.T) {
	var nodes []string
	for i := range listPageSize + 3 {
		nodes = append(nodes, fmt.Sprintf("node-%03d", i))
	}
	c := &cluster{
		labelled: nodes[:listPageSize-1], annotated: nodes[listPageSize-1 : listPageSize+1], reasoned: nodes[listPageSize+1:],
		plain: []string{"plain-1", "plain-2"},
	}
	w := newWithdrawer(t, c)
	got, err := w.Withdraw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(nodes) {
		t.Fatalf("%d outcomes, want %d", len(got), len(nodes))
	}
	for i, r := range got {
		if r.Node != nodes[i] || r.Err != nil || r.Gone {
			t.Errorf("outcome %d: %+v, want %s removed", i, r, nodes[i])
		}
	}
	reqs := c.requests()
	var lists []clusterRequest
	patched := map[string]int{}
	for _, r := range reqs {
		if r.auth != "Bearer token-1" {
			t.Errorf("%s %s: Authorization %q", r.method, r.path, r.auth)
		}
		switch r.method {
		case http.MethodGet:
			lists = append(lists, r)
		case http.MethodPatch:
			if r.contentType != "application/merge-patch+json" || r.body != withdrawBody {
				t.Errorf("PATCH %s: %s %s, want the removal merge patch", r.path, r.contentType, r.body)
			}
			patched[strings.TrimPrefix(r.path, "/api/v1/nodes/")]++
		default:
			t.Errorf("unexpected %s %s", r.method, r.path)
		}
	}
	wantQueries := []string{
		"limit=100",
		"continue=100&limit=100",
	}
	if len(lists) != len(wantQueries) {
		t.Fatalf("%d list requests, want %d: %+v", len(lists), len(wantQueries), lists)
	}
	for i, l := range lists {
		if l.path != "/api/v1/nodes" || l.query != wantQueries[i] || l.body != "" || l.contentType != "" {
			t.Errorf("list %d: %+v, want GET /api/v1/nodes?%s", i, l, wantQueries[i])
		}
		if !strings.HasPrefix(l.accept, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1") {
			t.Errorf("list %d: Accept %q, want metadata only", i, l.accept)
		}
	}
	for _, n := range nodes {
		if patched[n] != 1 {
			t.Errorf("node %s patched %d times, want once", n, patched[n])
		}
	}
	if len(patched) != len(nodes) {
		t.Errorf("%d nodes patched, want %d (not the plain ones)", len(patched), len(nodes))
	}
}

// withdrawBody is the merge patch that removes the label and the
// annotations.
const withdrawBody = `{"metadata":{"annotations":{"cgdelegate.io/fail-closed":null,"cgdelegate.io/supports-cgroup-options-reason":null},` +
	`"labels":{"cgdelegate.io/supports-cgroup-options":null}}}`

// No node labelled: one list, no patch.
func TestWithdrawNothingLabelled(t *testing.T) {
	c := &cluster{}
	got, err := newWithdrawer(t, c).Withdraw(context.Background())
	if err != nil || len(got) != 0 {
		t.Fatalf("Withdraw = %+v, %v; want nothing", got, err)
	}
	if reqs := c.requests(); len(reqs) != 1 || reqs[0].method != http.MethodGet {
		t.Fatalf("requests %+v, want one list", reqs)
	}
}

// A refused or failed removal is that node's outcome, naming the node, the
// status and the API's message; the other nodes are still done, and a node
// deleted meanwhile (404) counts as done.
func TestWithdrawPartialFailure(t *testing.T) {
	const msg = "ValidatingAdmissionPolicy 'cgdelegate-node-label-uninstall' with binding 'cgdelegate-node-label-uninstall' denied request: no"
	c := &cluster{
		labelled: []string{"a", "b", "c", "d"},
		refuse: map[string]answer{
			"b": forbidden("b", msg),
			"c": {http.StatusNotFound, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"nodes \"c\" not found","reason":"NotFound","code":404}`},
			"d": {http.StatusInternalServerError, "etcd is down"},
		},
	}
	got, err := newWithdrawer(t, c).Withdraw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("outcomes %+v, want 4", got)
	}
	if got[0].Node != "a" || got[0].Err != nil || got[0].Gone {
		t.Errorf("a: %+v, want removed", got[0])
	}
	if got[2].Node != "c" || got[2].Err != nil || !got[2].Gone {
		t.Errorf("c: %+v, want gone", got[2])
	}
	var ae *APIError
	if got[1].Node != "b" || !errors.As(got[1].Err, &ae) || ae.Code != http.StatusForbidden || ae.Reason != "Forbidden" {
		t.Fatalf("b: %+v, want an APIError 403", got[1])
	}
	for _, want := range []string{`node "b"`, "HTTP 403", msg, "PATCH /api/v1/nodes/b", FeatureLabel} {
		if !strings.Contains(got[1].Err.Error(), want) {
			t.Errorf("b: error %q does not name %q", got[1].Err, want)
		}
	}
	for _, want := range []string{`node "d"`, "HTTP 500", "etcd is down"} {
		if got[3].Err == nil || !strings.Contains(got[3].Err.Error(), want) {
			t.Errorf("d: error %v does not name %q", got[3].Err, want)
		}
	}
}

// A list the API refuses is an error with its status and message, and no
// node is patched.
func TestWithdrawListRefused(t *testing.T) {
	f := newFakeAPI(t, forbidden("", `User "system:serviceaccount:kube-system:cgdelegate-uninstall" cannot list resource "nodes"`))
	dir, getenv := f.serviceAccount(t)
	w, err := NewClusterWithdrawer(dir, getenv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.Withdraw(context.Background())
	if len(got) != 0 || err == nil {
		t.Fatalf("Withdraw = %+v, %v; want a list error", got, err)
	}
	for _, want := range []string{"list the nodes labelled " + FeatureLabel, "GET /api/v1/nodes?", "HTTP 403", "cannot list resource"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if reqs := f.seen(); len(reqs) != 1 {
		t.Errorf("requests %+v, want the list only", reqs)
	}
}

// A list answer that is not a list, or an item without a name, is an error.
func TestWithdrawBadList(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`<html>`, "the answer is not a list"},
		{`{"items":[{"metadata":{}}]}`, "item 0 has no metadata.name"},
	} {
		f := newFakeAPI(t, answer{http.StatusOK, tc.body})
		dir, getenv := f.serviceAccount(t)
		w, err := NewClusterWithdrawer(dir, getenv)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Withdraw(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Withdraw = %v, want %q", tc.body, err, tc.want)
		}
	}
}

// The deadline passing: a list that cannot go out is the error; nodes
// listed before the deadline are each reported, by name, as not done.
func TestWithdrawDeadline(t *testing.T) {
	c := &cluster{labelled: []string{"a"}}
	w := newWithdrawer(t, c)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	got, err := w.Withdraw(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || len(got) != 0 {
		t.Fatalf("Withdraw = %+v, %v; want the list to fail with the deadline", got, err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c.hang = true
	c.labelled = []string{"a", "b"}
	got, err = w.Withdraw(ctx)
	if err != nil {
		t.Fatalf("the list was answered: %v", err)
	}
	for i, n := range []string{"a", "b"} {
		if got[i].Node != n || !errors.Is(got[i].Err, context.DeadlineExceeded) || !strings.Contains(got[i].Err.Error(), fmt.Sprintf("node %q", n)) {
			t.Errorf("outcome %d: %+v, want %s not done, named", i, got[i], n)
		}
	}
}

// Outside a pod: every missing piece is named; $NODE_NAME is not needed.
func TestNewClusterWithdrawerOutsideAPod(t *testing.T) {
	dir := t.TempDir()
	_, err := NewClusterWithdrawer(dir, func(string) string { return "" })
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"$KUBERNETES_SERVICE_HOST is not set", "$KUBERNETES_SERVICE_PORT is not set", dir + "/token", dir + "/ca.crt"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), EnvNodeName) {
		t.Errorf("error %q asks for $%s", err, EnvNodeName)
	}
	_, err = NewClusterWithdrawer(dir, func(k string) string {
		return map[string]string{EnvServiceHost: "10.0.0.1", EnvServicePort: "https"}[k]
	})
	if err == nil || !strings.Contains(err.Error(), `$KUBERNETES_SERVICE_PORT: "https" is not a port number`) {
		t.Errorf("bad port: %v", err)
	}
}
