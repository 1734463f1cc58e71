package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fleetKubeconfig serves a two-node cluster (node-a supported, node-b
// without nsdelegate, as the plugin labelled them; no plugin pods) and
// returns a kubeconfig for it, with the token user, at dir.
func fleetKubeconfig(t *testing.T, dir, user string) string {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Header.Get("Authorization") != "Bearer sekret":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
		case r.URL.Path == "/api/v1/nodes":
			_, _ = io.WriteString(w, `{"kind":"PartialObjectMetadataList","metadata":{},"items":[
 {"metadata":{"name":"node-a","labels":{"cgdelegate.io/supports-cgroup-options":"true"},"annotations":{"cgdelegate.io/fail-closed":"enforced"}}},
 {"metadata":{"name":"node-b","annotations":{"cgdelegate.io/fail-closed":"off","cgdelegate.io/supports-cgroup-options-reason":"no_nsdelegate"}}}]}`)
		case r.URL.Path == "/api/v1/pods":
			_, _ = io.WriteString(w, `{"kind":"PodList","metadata":{},"items":[]}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: fake
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]
contexts: [{name: fake, context: {cluster: c, user: u}}]
users: [{name: u, user: %s}]
`, srv.URL, ca, user)
	p := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNodes(t *testing.T) {
	dir := t.TempDir()
	kc := fleetKubeconfig(t, dir, "{token: sekret}")
	wrongToken := fleetKubeconfig(t, t.TempDir(), "{token: wrong}")
	execUser := fleetKubeconfig(t, t.TempDir(), "{exec: {command: gke-gcloud-auth-plugin}}")
	noEnv := func(string) string { return "" }
	for _, tc := range []struct {
		name   string
		args   []string
		getenv func(string) string
		code   int
		stdout string
		stderr []string
	}{
		{
			name: "table", args: []string{"-kubeconfig", kc}, code: 0,
			stdout: "NODE    SUPPORTS  REASON         FAIL-CLOSED  VERSION\n" +
				"node-a  true      -              enforced     -\n" +
				"node-b  absent    no_nsdelegate  off          -\n",
		},
		{
			name: "table from $KUBECONFIG", getenv: func(k string) string { return map[string]string{"KUBECONFIG": kc}[k] }, code: 0,
			stdout: "NODE    SUPPORTS  REASON         FAIL-CLOSED  VERSION\n" +
				"node-a  true      -              enforced     -\n" +
				"node-b  absent    no_nsdelegate  off          -\n",
		},
		{name: "-h", args: []string{"-h"}, code: 0, stderr: []string{"usage: cgdelegate nodes", "REASON", "cgdelegate.io/supports-cgroup-options-reason"}},
		{name: "bad -o", args: []string{"-kubeconfig", kc, "-o", "yaml"}, code: 2, stderr: []string{`-o "yaml": want one of table, json`}},
		{name: "bad -timeout", args: []string{"-timeout", "0s"}, code: 2, stderr: []string{`-timeout "0s": must be more than 0`}},
		{name: "bad -timeout and -o together", args: []string{"-timeout", "-1s", "-o", "wide"}, code: 2, stderr: []string{`-timeout "-1s"`, `-o "wide"`}},
		{name: "an argument", args: []string{"node-a"}, code: 2, stderr: []string{`unexpected argument "node-a": nodes takes only flags`}},
		{name: "unknown flag", args: []string{"-wide"}, code: 2, stderr: []string{"-wide"}},
		{name: "empty -service-account-dir", args: []string{"-service-account-dir", ""}, code: 2, stderr: []string{`-service-account-dir ""`}},
		{name: "missing kubeconfig", args: []string{"-kubeconfig", filepath.Join(dir, "nope")}, code: 1, stderr: []string{"unusable kubeconfig", filepath.Join(dir, "nope")}},
		{name: "unknown context", args: []string{"-kubeconfig", kc, "-context", "prod"}, code: 1, stderr: []string{`-context "prod": no such context`}},
		{name: "credential plugin", args: []string{"-kubeconfig", execUser}, code: 1, stderr: []string{`users["u"].user.exec: credential plugins are not supported`}},
		{name: "refused by the API", args: []string{"-kubeconfig", wrongToken}, code: 1, stderr: []string{"list the nodes", "HTTP 401", wrongToken}},
		{name: "nothing to talk to", args: []string{"-service-account-dir", filepath.Join(dir, "sa")}, code: 1, stderr: []string{"no Kubernetes API to talk to", "$KUBERNETES_SERVICE_HOST is not set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := tc.getenv
			if getenv == nil {
				getenv = noEnv
			}
			var stdout, stderr bytes.Buffer
			code := runNodes(tc.args, &stdout, &stderr, getenv)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %s", code, tc.code, stderr.String())
			}
			if tc.stdout != "" && stdout.String() != tc.stdout {
				t.Errorf("stdout\n%s\nwant\n%s", stdout.String(), tc.stdout)
			}
			if tc.code != 0 && stdout.Len() > 0 {
				t.Errorf("stdout %q on a failure", stdout.String())
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not mention %q", stderr.String(), w)
				}
			}
		})
	}
}

// -o json is Fleet: nodes with their fields, empty ones left out.
func TestNodesJSON(t *testing.T) {
	kc := fleetKubeconfig(t, t.TempDir(), "{token: sekret}")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"nodes", "-kubeconfig", kc, "-o", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var got struct {
		Nodes []map[string]string `json:"nodes"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	want := []map[string]string{
		{"name": "node-a", "supports": "true", "failClosed": "enforced"},
		{"name": "node-b", "supports": "absent", "reason": "no_nsdelegate", "failClosed": "off"},
	}
	if fmt.Sprint(got.Nodes) != fmt.Sprint(want) {
		t.Errorf("nodes %v, want %v", got.Nodes, want)
	}
}
