package advert

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fleetAPI is a fake API server over TLS with the nodes and plugin pods of
// a two-node cluster: node-a supported, node-b without nsdelegate (as the
// plugin left them), and the plugin's pods on both (two on node-a: a
// rollout, the newer one wins, listed first). It wants the bearer token "t0k3n".
type fleetAPI struct {
	srv *httptest.Server
	// podsForbidden answers the pods list with 403.
	podsForbidden bool

	mu    sync.Mutex
	paths []string
}

const fleetNodes = `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{},"items":[
 {"metadata":{"name":"node-a","labels":{"cgdelegate.io/supports-cgroup-options":"true","zone":"z"},"annotations":{"cgdelegate.io/fail-closed":"enforced"}}},
 {"metadata":{"name":"node-b","labels":{"zone":"z"},"annotations":{"cgdelegate.io/fail-closed":"enforced","cgdelegate.io/supports-cgroup-options-reason":"no_nsdelegate"}}}
]}`

const fleetPods = `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[
 {"metadata":{"name":"cgdelegate-new","creationTimestamp":"2026-11-02T10:00:00Z"},"spec":{"nodeName":"node-a","containers":[{"name":"sidecar","image":"busybox:1"},{"name":"cgdelegate","image":"registry:5000/cgdelegate/cgdelegate:v0.9.0"}]}},
 {"metadata":{"name":"cgdelegate-old","creationTimestamp":"2026-11-01T10:00:00Z"},"spec":{"nodeName":"node-a","containers":[{"name":"cgdelegate","image":"ghcr.io/cgdelegate/cgdelegate:v0.8.0"}]}},
 {"metadata":{"name":"cgdelegate-b","creationTimestamp":"2026-11-02T10:00:00Z"},"spec":{"nodeName":"node-b","containers":[{"name":"cgdelegate","image":"ghcr.io/cgdelegate/cgdelegate:v0.9.0"}]}}
]}`

func newFleetAPI(t *testing.T) *fleetAPI {
	f := &fleetAPI{}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fleetAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths = append(f.paths, r.Method+" "+r.URL.RequestURI())
	forbidden := f.podsForbidden
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Header.Get("Authorization") != "Bearer t0k3n":
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
		_, _ = io.WriteString(w, fleetNodes)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods" && forbidden:
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","message":"pods is forbidden: User \"viewer\" cannot list resource \"pods\"","reason":"Forbidden","code":403}`)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods" && r.URL.Query().Get("labelSelector") == PluginPodSelector:
		_, _ = io.WriteString(w, fleetPods)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *fleetAPI) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...)
}

// caPEM is the fake server's certificate, PEM.
func (f *fleetAPI) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
}

// writeKubeconfig writes a kubeconfig with one context "fake" (current
// unless current is set otherwise) and returns its path. user is the
// user's YAML body; cluster's "" is the server with its CA inline.
func writeKubeconfig(t *testing.T, dir, cluster, user, current string) string {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: %s
clusters:
- name: c
  cluster:
%s
contexts:
- name: fake
  context: {cluster: c, user: u}
users:
- name: u
  user:
%s
`, current, indent(cluster), indent(user))
	p := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func indent(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

func (f *fleetAPI) cluster() string {
	return "server: " + f.srv.URL + "\ncertificate-authority-data: " + base64.StdEncoding.EncodeToString(f.caPEM())
}

func noEnv(string) string { return "" }

// The table and the JSON of a two-node fleet: node-a supported, node-b
// without nsdelegate, as the plugin labelled them; the version is the
// newest plugin pod's on each node.
func TestFleetRead(t *testing.T) {
	f := newFleetAPI(t)
	dir := t.TempDir()
	kc := writeKubeconfig(t, dir, f.cluster(), "token: t0k3n", "fake")
	r, err := NewFleetReader(ClientSource{Kubeconfig: kc, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if r.API() != f.srv.URL || r.From() != kc {
		t.Errorf("API %s from %s, want %s from %s", r.API(), r.From(), f.srv.URL, kc)
	}
	fleet, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := WriteFleet(&table, fleet, FleetTable); err != nil {
		t.Fatal(err)
	}
	wantTable := `NODE    SUPPORTS  REASON         FAIL-CLOSED  VERSION
node-a  true      -              enforced     v0.9.0
node-b  absent    no_nsdelegate  enforced     v0.9.0
`
	if table.String() != wantTable {
		t.Errorf("table\n%s\nwant\n%s", table.String(), wantTable)
	}
	var js bytes.Buffer
	if err := WriteFleet(&js, fleet, FleetJSON); err != nil {
		t.Fatal(err)
	}
	var back Fleet
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	want := []FleetNode{
		{Name: "node-a", Supports: "true", FailClosed: "enforced", Version: "v0.9.0"},
		{Name: "node-b", Supports: Absent, Reason: "no_nsdelegate", FailClosed: "enforced", Version: "v0.9.0"},
	}
	if fmt.Sprint(back.Nodes) != fmt.Sprint(want) || len(back.Warnings) != 0 {
		t.Errorf("JSON %s\nwant nodes %+v", js.String(), want)
	}
	paths := f.seen()
	if len(paths) != 2 || !strings.HasPrefix(paths[0], "GET /api/v1/nodes?limit=100") ||
		paths[1] != "GET /api/v1/pods?labelSelector=app.kubernetes.io%2Fname%3Dcgdelegate&limit=100" {
		t.Errorf("requests %q, want the nodes' list then the plugin pods'", paths)
	}
}

// A user who may not list pods gets the nodes without versions, and a
// warning that says why.
func TestFleetReadWithoutPods(t *testing.T) {
	f := newFleetAPI(t)
	f.podsForbidden = true
	kc := writeKubeconfig(t, t.TempDir(), f.cluster(), "token: t0k3n", "fake")
	r, err := NewFleetReader(ClientSource{Kubeconfig: kc, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(fleet.Nodes) != 2 || fleet.Nodes[0].Version != "" || fleet.Nodes[1].Reason != "no_nsdelegate" {
		t.Errorf("nodes %+v", fleet.Nodes)
	}
	if len(fleet.Warnings) != 1 || !strings.Contains(fleet.Warnings[0], "HTTP 403") || !strings.Contains(fleet.Warnings[0], "cannot list resource") {
		t.Errorf("warnings %q, want one naming the refusal", fleet.Warnings)
	}
}

// A wrong token: the nodes' list fails with the API's answer.
func TestFleetReadUnauthorized(t *testing.T) {
	f := newFleetAPI(t)
	kc := writeKubeconfig(t, t.TempDir(), f.cluster(), "token: wrong", "fake")
	r, err := NewFleetReader(ClientSource{Kubeconfig: kc, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Read(context.Background())
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != http.StatusUnauthorized || !strings.Contains(err.Error(), "list the nodes") {
		t.Fatalf("Read = %v, want a 401 listing the nodes", err)
	}
}

// Where the API is found, as kubectl finds it: -kubeconfig, $KUBECONFIG
// (merged, missing files skipped), ~/.kube/config, the pod's service
// account; a client certificate and a token file work as a token does.
func TestFleetClientSources(t *testing.T) {
	f := newFleetAPI(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tok")
	if err := os.WriteFile(tokenFile, []byte("t0k3n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	caFileName := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFileName, f.caPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	// Relative paths are the kubeconfig's directory's.
	relative := writeKubeconfig(t, dir, "server: "+f.srv.URL+"\ncertificate-authority: ca.pem", "tokenFile: tok", "fake")
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeKubeconfig(t, filepath.Join(home, ".kube"), f.cluster(), "token: t0k3n", "fake")
	if err := os.Rename(filepath.Join(home, ".kube", "kubeconfig"), filepath.Join(home, ".kube", "config")); err != nil {
		t.Fatal(err)
	}
	// A first file with only the current-context, a second with the rest.
	split := t.TempDir()
	first := filepath.Join(split, "first")
	if err := os.WriteFile(first, []byte("current-context: fake\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	second := writeKubeconfig(t, split, f.cluster(), "token: t0k3n", "")
	saDir, inPod := newFakeAPI(t).serviceAccount(t) // another server: its token is refused here
	for _, tc := range []struct {
		name string
		src  ClientSource
		from string
	}{
		{"-kubeconfig, relative CA and token file", ClientSource{Kubeconfig: relative, Getenv: noEnv}, relative},
		{"$KUBECONFIG merged, a missing file skipped", ClientSource{Getenv: env(EnvKubeconfig, filepath.Join(split, "missing")+":"+first+":"+second)}, first + ":" + second},
		{"~/.kube/config", ClientSource{Getenv: env("HOME", home)}, filepath.Join(home, ".kube", "config")},
		{"-kubeconfig over $KUBECONFIG", ClientSource{Kubeconfig: relative, Getenv: env(EnvKubeconfig, "/nonexistent")}, relative},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewFleetReader(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if r.From() != tc.from {
				t.Errorf("from %q, want %q", r.From(), tc.from)
			}
			fleet, err := r.Read(context.Background())
			if err != nil || len(fleet.Nodes) != 2 {
				t.Fatalf("Read = %+v, %v", fleet, err)
			}
		})
	}
	t.Run("in a pod", func(t *testing.T) {
		r, err := NewFleetReader(ClientSource{SADir: saDir, Getenv: inPod})
		if err != nil {
			t.Fatal(err)
		}
		if r.From() != "service account "+saDir {
			t.Errorf("from %q", r.From())
		}
	})
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// A kubeconfig that can not be used: the error names the file and the
// field (and the value), and wraps ErrKubeconfig; no kubeconfig outside a
// pod names every place looked at.
func TestFleetKubeconfigErrors(t *testing.T) {
	f := newFleetAPI(t)
	dir := t.TempDir()
	ca := "certificate-authority-data: " + base64.StdEncoding.EncodeToString(f.caPEM())
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cluster, user, current, context string
		want                                  []string
	}{
		{"no current-context", f.cluster(), "token: x", `""`, "", []string{"current-context is not set"}},
		{"current-context unknown", f.cluster(), "token: x", "gone", "", []string{`current-context "gone": no such context`}},
		{"-context unknown", f.cluster(), "token: x", "fake", "other", []string{`-context "other": no such context`}},
		{"plain http", "server: http://127.0.0.1:8080", "token: x", "fake", "", []string{`clusters["c"].cluster.server "http://127.0.0.1:8080": want https://host[:port]`}},
		{"no server", ca, "token: x", "fake", "", []string{`clusters["c"].cluster.server is empty`}},
		{"exec plugin", f.cluster(), "exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}", "fake", "", []string{`users["u"].user.exec: credential plugins are not supported`}},
		{"auth provider", f.cluster(), "auth-provider: {name: gcp}", "fake", "", []string{`users["u"].user.auth-provider`}},
		{"basic auth", f.cluster(), "username: admin\npassword: secret", "fake", "", []string{`users["u"].user.username`}},
		{"missing CA file", "server: " + f.srv.URL + "\ncertificate-authority: gone.pem", "token: x", "fake", "", []string{`clusters["c"].cluster.certificate-authority`, "gone.pem"}},
		{"CA not PEM", "server: " + f.srv.URL + "\ncertificate-authority: " + notPEM, "token: x", "fake", "", []string{`clusters["c"].cluster.certificate-authority(-data): no PEM certificate`}},
		{"client key missing", f.cluster(), "client-certificate: " + notPEM, "fake", "", []string{`users["u"].user.client-certificate(-data), users["u"].user.client-key(-data)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := writeKubeconfig(t, t.TempDir(), tc.cluster, tc.user, tc.current)
			_, err := NewFleetReader(ClientSource{Kubeconfig: kc, Context: tc.context, Getenv: noEnv})
			if !errors.Is(err, ErrKubeconfig) {
				t.Fatalf("err = %v, want ErrKubeconfig", err)
			}
			for _, w := range append(tc.want, kc) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	t.Run("not YAML", func(t *testing.T) {
		p := filepath.Join(dir, "garbage")
		if err := os.WriteFile(p, []byte("clusters: {{{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := NewFleetReader(ClientSource{Kubeconfig: p, Getenv: noEnv}); !errors.Is(err, ErrKubeconfig) || !strings.Contains(err.Error(), p) {
			t.Errorf("err = %v, want ErrKubeconfig naming %s", err, p)
		}
	})
	t.Run("-kubeconfig missing", func(t *testing.T) {
		p := filepath.Join(dir, "nope")
		if _, err := NewFleetReader(ClientSource{Kubeconfig: p, Getenv: noEnv}); !errors.Is(err, ErrKubeconfig) || !strings.Contains(err.Error(), p) {
			t.Errorf("err = %v, want ErrKubeconfig naming %s", err, p)
		}
	})
	t.Run("$KUBECONFIG of missing files", func(t *testing.T) {
		_, err := NewFleetReader(ClientSource{Getenv: env(EnvKubeconfig, "/nope/a:/nope/b")})
		if !errors.Is(err, ErrKubeconfig) || !strings.Contains(err.Error(), `$KUBECONFIG="/nope/a:/nope/b"`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("nothing at all", func(t *testing.T) {
		_, err := NewFleetReader(ClientSource{SADir: filepath.Join(dir, "sa"), Getenv: env("HOME", dir)})
		if !errors.Is(err, ErrNoAPI) {
			t.Fatalf("err = %v, want ErrNoAPI", err)
		}
		for _, w := range []string{"no -kubeconfig", "$KUBERNETES_SERVICE_HOST is not set", filepath.Join(dir, "sa", "token")} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
	})
	t.Run("-context without a kubeconfig", func(t *testing.T) {
		_, err := NewFleetReader(ClientSource{Context: "prod", Getenv: noEnv})
		if !errors.Is(err, ErrKubeconfig) || !strings.Contains(err.Error(), `-context "prod"`) {
			t.Errorf("err = %v", err)
		}
	})
}

// A cell someone else wrote with a space or a control character is quoted:
// the columns hold.
func TestWriteFleetQuotes(t *testing.T) {
	var b bytes.Buffer
	f := Fleet{Nodes: []FleetNode{{Name: "n", Supports: Absent, Reason: "see\tmy notes"}}}
	if err := WriteFleet(&b, f, FleetTable); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"see\tmy notes"`) {
		t.Errorf("table %q", b.String())
	}
	if err := WriteFleet(&b, f, "yaml"); err == nil || !strings.Contains(err.Error(), `"yaml"`) {
		t.Errorf("format yaml: %v", err)
	}
	b.Reset()
	if err := WriteFleet(&b, Fleet{}, FleetJSON); err != nil || !strings.Contains(b.String(), `"nodes": []`) {
		t.Errorf("empty fleet JSON %q, %v", b.String(), err)
	}
}

func TestImageTag(t *testing.T) {
	for ref, want := range map[string]string{
		"ghcr.io/cgdelegate/cgdelegate:v0.9.0":         "v0.9.0",
		"registry:5000/cgdelegate/cgdelegate:dev":      "dev",
		"registry:5000/cgdelegate/cgdelegate":          "latest",
		"cgdelegate@sha256:0123456789abcdef0123456789": "sha256:0123456789ab",
		"cgdelegate:v1@sha256:0123456789abcdef":        "sha256:0123456789ab",
	} {
		if got := imageTag(ref); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", ref, got, want)
		}
	}
}
