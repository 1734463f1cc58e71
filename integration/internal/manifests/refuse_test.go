package manifests_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

// fakeAPI is the part of an API server helm's lookup of DaemonSets reads:
// version, discovery of apps/v1, and the list of every DaemonSet.
type fakeAPI struct {
	daemonSets []map[string]any
	mu         sync.Mutex
	paths      []string
}

// apiKinds are the kinds the chart renders, by group version, for the
// fake API's discovery.
var apiKinds = map[string][]struct {
	kind       string
	namespaced bool
}{
	"v1":                              {{"ConfigMap", true}, {"ServiceAccount", true}, {"Service", true}},
	"apps/v1":                         {{"DaemonSet", true}},
	"batch/v1":                        {{"Job", true}},
	"rbac.authorization.k8s.io/v1":    {{"ClusterRole", false}, {"ClusterRoleBinding", false}},
	"admissionregistration.k8s.io/v1": {{"ValidatingAdmissionPolicy", false}, {"ValidatingAdmissionPolicyBinding", false}},
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.Path)
	f.mu.Unlock()
	var body any
	switch p := r.URL.Path; p {
	case "/version":
		body = map[string]any{"major": "1", "minor": "33", "gitVersion": "v1.33.0"}
	case "/api":
		body = map[string]any{"kind": "APIVersions", "versions": []string{"v1"}}
	case "/apis":
		var groups []any
		for gv := range apiKinds {
			if g, v, ok := strings.Cut(gv, "/"); ok {
				ver := map[string]any{"groupVersion": gv, "version": v}
				groups = append(groups, map[string]any{"name": g, "versions": []any{ver}, "preferredVersion": ver})
			}
		}
		body = map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
	case "/apis/apps/v1/daemonsets":
		items := make([]any, len(f.daemonSets))
		for i, d := range f.daemonSets {
			items[i] = d
		}
		body = map[string]any{"kind": "DaemonSetList", "apiVersion": "apps/v1", "metadata": map[string]any{}, "items": items}
	default:
		gv := strings.TrimPrefix(strings.TrimPrefix(p, "/apis/"), "/api/")
		kinds, ok := apiKinds[gv]
		if !ok {
			http.NotFound(w, r)
			return
		}
		var resources []any
		for _, k := range kinds {
			resources = append(resources, map[string]any{
				"name": strings.ToLower(k.kind) + "s", "singularName": strings.ToLower(k.kind), "namespaced": k.namespaced,
				"kind": k.kind, "verbs": []string{"get", "list"},
			})
		}
		body = map[string]any{"kind": "APIResourceList", "groupVersion": gv, "resources": resources}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// ds is a DaemonSet as the API lists it: namespace/name, its
// app.kubernetes.io/name label (none when ""), and the release that made it
// (none when "").
func ds(namespace, name, app, release string) map[string]any {
	meta := map[string]any{"namespace": namespace, "name": name}
	if app != "" {
		meta["labels"] = map[string]any{"app.kubernetes.io/name": app}
	}
	if release != "" {
		meta["annotations"] = map[string]any{"meta.helm.sh/release-name": release}
	}
	return map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta}
}

// One cgdelegate per cluster: with a cluster to look in (helm's lookup,
// here a fake API server), the chart refuses to install beside a
// cgdelegate DaemonSet of another release or of the plain manifests,
// naming it; it renders beside none, beside unrelated DaemonSets, and over
// its own (an upgrade).
func TestChartRefusesSecondRelease(t *testing.T) {
	needGo(t)
	tests := []struct {
		name    string
		release string
		present []map[string]any
		want    string // "" renders
	}{
		{"empty cluster", "cgdelegate", nil, ""},
		{"unrelated DaemonSets", "cgdelegate", []map[string]any{ds("kube-system", "kube-proxy", "", ""), ds("kube-system", "nfd", "node-feature-discovery", "nfd")}, ""},
		{"upgrade of the same release", "cgdelegate", []map[string]any{ds("kube-system", "cgdelegate", "cgdelegate", "cgdelegate")}, ""},
		{
			"another release, another namespace", "cgdelegate",
			[]map[string]any{ds("ops", "team-a-cgdelegate", "cgdelegate", "team-a")},
			"DaemonSet ops/team-a-cgdelegate (release team-a) already runs cgdelegate in this cluster",
		},
		{
			"another release, same namespace", "team-b",
			[]map[string]any{ds("kube-system", "cgdelegate", "cgdelegate", "cgdelegate")},
			"DaemonSet kube-system/cgdelegate (release cgdelegate) already runs cgdelegate",
		},
		{
			"the plain manifests", "cgdelegate",
			[]map[string]any{ds("default", "cgdelegate", "cgdelegate", "")},
			"DaemonSet default/cgdelegate (release none: applied without helm)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := &fakeAPI{daemonSets: tc.present}
			srv := httptest.NewServer(api)
			defer srv.Close()
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: x}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, srv.URL)), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := manifests.Helm(t.Context(), root, "template", tc.release, manifests.ChartDir, "--namespace", "kube-system",
				"--dry-run=server", "--disable-openapi-validation", "--kubeconfig", kubeconfig, "--show-only", "templates/daemonset.yaml")
			api.mu.Lock()
			looked := slices.Contains(api.paths, "/apis/apps/v1/daemonsets")
			api.mu.Unlock()
			if !looked {
				t.Errorf("the chart did not list the cluster's DaemonSets (requests %v)", api.paths)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}
