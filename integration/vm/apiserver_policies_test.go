//go:build integration_vm

package vm

// TestAPIServerTenantPolicies plays tenants' attacks on the chart's
// admission policies against a real kube-apiserver without a VM: etcd and
// kube-apiserver of the cluster boot (startControlPlaneOf, APIOnly) on
// 127.0.0.1, the chart installed with helm, kubectl as each actor (the
// admin's client certificate impersonating the tenant, a platform team,
// a node; a real token of the uninstall account). No kubelet, controller
// or scheduler runs: a pod stays Pending where it was put, and the
// uninstall Job never runs, as when it can not be scheduled.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/workstation"
)

// policyHarness runs kubectl and helm against the host-only API server.
type policyHarness struct {
	t      *testing.T
	ws     *workstation.Client
	server string // https://127.0.0.1:<port>
	// adminClient has the admin's client certificate; tokenClient none.
	adminClient, tokenClient *http.Client
}

// runWith runs tool with args and stdin and returns how it ended;
// kubeconfig, when set, replaces the admin's. A ctx that ends kills the
// command (its process group).
func (h *policyHarness) runWith(ctx context.Context, kubeconfig []byte, stdin string, tool string, args ...string) workstation.Result {
	h.t.Helper()
	res, err := h.ws.Run(ctx, workstation.Request{Tool: tool, Args: args, Stdin: []byte(stdin), Kubeconfig: kubeconfig})
	if err != nil && ctx.Err() == nil {
		h.t.Fatalf("%s %s: %v", tool, strings.Join(args, " "), err)
	}
	return res
}

// run runs tool with args as the admin.
func (h *policyHarness) run(tool string, args ...string) workstation.Result {
	h.t.Helper()
	return h.runWith(h.t.Context(), nil, "", tool, args...)
}

// must runs tool and fails the test unless it exits 0; it returns stdout.
func (h *policyHarness) must(tool string, args ...string) string {
	h.t.Helper()
	res := h.run(tool, args...)
	if res.ExitCode != 0 {
		h.t.Fatalf("%s %s: exit %d %s\n%s", tool, strings.Join(args, " "), res.ExitCode, res.Error, res.Stderr)
	}
	return string(res.Stdout)
}

// apply applies YAML as the admin.
func (h *policyHarness) apply(yaml string) {
	h.t.Helper()
	res := h.runWith(h.t.Context(), nil, yaml, "kubectl", "apply", "-f", "-")
	if res.ExitCode != 0 {
		h.t.Fatalf("kubectl apply: exit %d\n%s\n%s", res.ExitCode, res.Stderr, yaml)
	}
}

// as is kubectl's impersonation of user (with system:authenticated,
// which the API server adds to a real login).
func as(user string) []string {
	return []string{"--as=" + user, "--as-group=system:authenticated"}
}

// refused runs kubectl args and fails the test unless the API server
// refused it with a message containing want.
func (h *policyHarness) refused(want string, args ...string) {
	h.t.Helper()
	res := h.run("kubectl", args...)
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), want) {
		h.t.Errorf("kubectl %s: exit %d, stderr %q; want refused with %q", strings.Join(args, " "), res.ExitCode, res.Stderr, want)
	}
}

// admitted runs kubectl args and fails the test unless it exited 0.
func (h *policyHarness) admitted(args ...string) {
	h.t.Helper()
	if res := h.run("kubectl", args...); res.ExitCode != 0 {
		h.t.Errorf("kubectl %s: exit %d %s; want admitted", strings.Join(args, " "), res.ExitCode, res.Stderr)
	}
}

// waitRefused repeats a server-side dry run of kubectl args (admission
// runs, nothing is stored) until the API server refuses it with want: a
// new policy takes effect once the API server's informers have it.
func (h *policyHarness) waitRefused(want string, args ...string) {
	h.t.Helper()
	h.waitRefusedWith(nil, want, args...)
}

// waitRefusedWith is waitRefused with kubeconfig (nil: the admin's).
func (h *policyHarness) waitRefusedWith(kubeconfig []byte, want string, args ...string) {
	h.t.Helper()
	args = append(args, "--dry-run=server")
	deadline := time.Now().Add(time.Minute)
	for {
		res := h.runWith(h.t.Context(), kubeconfig, "", "kubectl", args...)
		if res.ExitCode != 0 && strings.Contains(string(res.Stderr), want) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("kubectl %s: still not refused with %q after a minute: exit %d, %s%s", strings.Join(args, " "), want, res.ExitCode, res.Stdout, res.Stderr)
		}
		time.Sleep(time.Second)
	}
}

// jsonpath is kubectl get's jsonpath output of an object, as the admin;
// "" for an object that does not exist.
func (h *policyHarness) jsonpath(path string, args ...string) string {
	h.t.Helper()
	res := h.run("kubectl", append(append([]string{"get"}, args...), "--ignore-not-found", "-o", "jsonpath="+path)...)
	if res.ExitCode != 0 {
		h.t.Fatalf("kubectl get %s: %s", strings.Join(args, " "), res.Stderr)
	}
	return string(res.Stdout)
}

// exists says whether the admin can get the object.
func (h *policyHarness) exists(args ...string) bool {
	h.t.Helper()
	return h.jsonpath("{.metadata.name}", args...) != ""
}

// apiAuth is who sends a request: the admin impersonating user in
// groups, or a bearer token.
type apiAuth struct {
	user   string
	groups []string
	token  string
}

const (
	mergePatch          = "application/merge-patch+json"
	strategicMergePatch = "application/strategic-merge-patch+json"
)

// patch sends PATCH path with body to the API server as a, the way a
// kubelet or the uninstall Job does (kubectl patch would get the object
// first, which neither may do), and returns the HTTP status and body.
func (h *policyHarness) patch(a apiAuth, path, contentType, body string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), http.MethodPatch, h.server+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	c := h.tokenClient
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	} else {
		c = h.adminClient
		req.Header.Set("Impersonate-User", a.user)
		for _, g := range a.groups {
			req.Header.Add("Impersonate-Group", g)
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("PATCH %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// mayAllowWritableCgroups is the API server's answer ("true" or "false")
// to a SubjectAccessReview of user for the verb allow-writable-cgroups on
// namespaces.cgdelegate.io named ns, the command docs/deploying.md gives.
func (h *policyHarness) mayAllowWritableCgroups(user, ns string) string {
	h.t.Helper()
	sar := `{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": "` + user + `",
  "resourceAttributes": {"group": "cgdelegate.io", "resource": "namespaces", "verb": "allow-writable-cgroups", "name": "` + ns + `"}}}`
	res := h.runWith(h.t.Context(), nil, sar, "kubectl", "create", "-f", "-", "-o", "jsonpath={.status.allowed}")
	if res.ExitCode != 0 {
		h.t.Fatalf("SubjectAccessReview: %s", res.Stderr)
	}
	if out := string(res.Stdout); out != "" {
		return out
	}
	return "false"
}

// matchExclusions is the API server's count of the updates the match
// condition of the policy statusPolicyName kept off it: for a
// ValidatingAdmissionPolicy,
// apiserver_admission_match_condition_evaluation_seconds is observed only
// when a condition is false (or fails), never when every condition holds
// (k8s.io/apiserver's matchconditions.matcher).
func (h *policyHarness) matchExclusions() int {
	h.t.Helper()
	out := h.must("kubectl", "get", "--raw", "/metrics")
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_admission_match_condition_evaluation_seconds_count{") ||
			!strings.Contains(l, `name="`+statusPolicyName+`"`) || !strings.Contains(l, `operation="UPDATE"`) {
			continue
		}
		n, err := strconv.ParseFloat(l[strings.LastIndex(l, " ")+1:], 64)
		if err != nil {
			h.t.Fatalf("metrics: %q: %v", l, err)
		}
		return int(n)
	}
	return 0
}

// needCachedIngredients skips the test when an ingredient it needs is not
// in the cache (make ingredients builds them), unless CI=true, where it
// is built.
func needCachedIngredients(t *testing.T, cacheDir string, keys ...string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		return
	}
	for _, k := range keys {
		if _, err := os.Stat(filepath.Join(cacheDir, k, ".complete")); err != nil {
			t.Skipf("%s is not built in %s (make ingredients builds it; under CI=true the test builds it)", k, cacheDir)
		}
	}
}

// Names the chart gives with the release cgdelegate in kube-system.
const (
	nsLabelKey       = "cgdelegate.io/writable-cgroups"
	uninstallSA      = "cgdelegate-uninstall"
	uninstallRBAC    = "cgdelegate-node-label-uninstall"
	statusPolicyName = "cgdelegate-writable-cgroups-status"
)

// TestAPIServerTenantPolicies plays, against a real kube-apiserver, a
// tenant who may patch its own namespace labelling it for writable
// cgroups (and removing an admin's label), a user with pods/status adding
// the opt-in to a Pending pod, the kubelet's own status reports (admitted,
// and kept off the policy by its match condition: measured), and a token
// of the uninstall account after an uninstall that failed and one that
// was killed, each followed by `helm uninstall --no-hooks`.
func TestAPIServerTenantPolicies(t *testing.T) {
	start := time.Now()
	h, c := newAPIOnlyHarness(t)
	a := c.a

	// The chart, with a platform team allowed to set the namespace label.
	h.must("helm", "install", "cgdelegate", a.Chart, "--namespace", "kube-system",
		"--set-json", `admissionPolicy.namespaceLabel={"users":["platform-bot"]}`)
	// The tenant alice owns team-a and team-b the self-service way: a
	// RoleBinding in each that lets her patch the namespace itself (the
	// API server authorizes a request on namespace N in namespace N) and
	// its status, and create pods and update their status.
	tenancy := `apiVersion: v1
kind: Node
metadata: {name: n1}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ops-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: ops-admin}]
---
# A platform team's rights on namespaces (platform-bot also has the
# chart's permission, editor-bot has not).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: namespace-editor}
rules: [{apiGroups: [""], resources: [namespaces], verbs: [get, patch, update]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: namespace-editors}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: namespace-editor}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: platform-bot}
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: editor-bot}
`
	for _, ns := range []string{"team-a", "team-b"} {
		// No controller makes the default ServiceAccount a pod runs as.
		tenancy += `---
apiVersion: v1
kind: Namespace
metadata: {name: ` + ns + `}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: ` + ns + `}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: owner, namespace: ` + ns + `}
rules:
  - {apiGroups: [""], resources: [namespaces, namespaces/status], verbs: [get, patch, update]}
  - {apiGroups: [""], resources: [pods, pods/status], verbs: [get, list, create, patch, update, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: owner, namespace: ` + ns + `}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: owner}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
`
	}
	h.apply(tenancy)
	alice := as("alice")
	const notLabelled = "is not labelled cgdelegate.io/writable-cgroups=allowed"

	t.Run("NamespaceLabel", func(t *testing.T) {
		h.t = t
		const refused = "may not add, change or remove the label " + nsLabelKey
		labelAllowed := append([]string{"label", "namespace", "team-a", nsLabelKey + "=allowed"}, alice...)
		h.waitRefused(refused, labelAllowed...)
		h.refused(refused, labelAllowed...)
		// The status subresource can change a namespace's metadata too.
		h.refused(refused, append([]string{
			"patch", "namespace", "team-a", "--subresource=status", "--type=merge",
			"-p", `{"metadata":{"labels":{"` + nsLabelKey + `":"allowed"}}}`,
		}, alice...)...)
		if got := h.jsonpath(`{.metadata.labels.cgdelegate\.io/writable-cgroups}`, "namespace", "team-a"); got != "" {
			t.Errorf("after alice's attempts team-a is labelled %q", got)
		}
		// Her pods that ask are refused, as before.
		h.refusedPod(notLabelled, "team-a", "asks", alice)
		// What does not touch the label is admitted.
		h.admitted(append([]string{"label", "namespace", "team-a", "owner=alice"}, alice...)...)
		// A cluster admin (system:masters) labels it; alice may not take
		// the label off, nor change it.
		h.admitted("label", "namespace", "team-a", nsLabelKey+"=allowed")
		h.refused(refused, append([]string{"label", "namespace", "team-a", nsLabelKey + "-"}, alice...)...)
		h.refused(refused, append([]string{"label", "namespace", "team-a", "--overwrite", nsLabelKey + "=no"}, alice...)...)
		h.admitted(append([]string{"label", "namespace", "team-a", "owner=alice-2", "--overwrite"}, alice...)...)
		// A user bound to cluster-admin, and the platform team the chart
		// names, may.
		h.admitted(append([]string{"label", "namespace", "team-a", nsLabelKey + "-"}, as("ops-admin")...)...)
		h.refused(refused, append([]string{"label", "namespace", "team-a", nsLabelKey + "=allowed"}, as("editor-bot")...)...)
		h.admitted(append([]string{"label", "namespace", "team-a", nsLabelKey + "=allowed"}, as("platform-bot")...)...)
		h.admittedPod("team-a", "asks", alice)
		// The permission, as docs/deploying.md has an admin check it.
		for user, want := range map[string]string{"platform-bot": "true", "editor-bot": "false", "alice": "false"} {
			if got := h.mayAllowWritableCgroups(user, "team-a"); got != want {
				t.Errorf("SubjectAccessReview of %s: allowed %q, want %s", user, got, want)
			}
		}
	})

	t.Run("PodStatus", func(t *testing.T) {
		h.t = t
		const refused = "was added, changed or removed through pods/status on a pod that asks for a writable cgroup"
		// A pod that asked for nothing, Pending (bound to n1, which no
		// kubelet runs), in a namespace not allowed.
		h.apply(`apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: team-b}
spec:
  nodeName: n1
  containers: [{name: app, image: busybox}]
`)
		optIn := `{"metadata":{"annotations":{"writable-cgroups.noderesource.dev":"true","required-plugins.noderesource.dev":"[\"cgdelegate\"]"}}}`
		patch := append([]string{"patch", "pod", "plain", "-n", "team-b", "--subresource=status", "--type=merge", "-p", optIn}, alice...)
		h.waitRefused(refused, patch...)
		before := h.matchExclusions()
		h.refused(refused, patch...)
		if got := h.jsonpath(`{.metadata.annotations}`, "pod", "plain", "-n", "team-b"); strings.Contains(got, "writable-cgroups") {
			t.Errorf("after alice's pods/status patch the pod's annotations are %s", got)
		}
		if n := h.matchExclusions(); n != before {
			t.Errorf("alice's patch, which changes annotations, was kept off the policy by its match condition (%d to %d)", before, n)
		}
		// The API server does let pods/status change annotations: an
		// unrelated one lands.
		h.admitted(append([]string{
			"patch", "pod", "plain", "-n", "team-b", "--subresource=status", "--type=merge",
			"-p", `{"metadata":{"annotations":{"example.com/seen":"yes"}}}`,
		}, alice...)...)
		if got := h.jsonpath(`{.metadata.annotations.example\.com/seen}`, "pod", "plain", "-n", "team-b"); got != "yes" {
			t.Errorf("an unrelated annotation through pods/status: %q, want yes (the premise of the policy)", got)
		}
		// The kubelet of n1 reports status, on the plain pod and on a
		// pod that asks (team-a is allowed by now): admitted, and each
		// report kept off the policy by its match condition.
		kubelet := apiAuth{user: "system:node:n1", groups: []string{"system:nodes", "system:authenticated"}}
		start := h.matchExclusions()
		reports := 0
		for _, p := range []struct{ ns, name string }{{"team-b", "plain"}, {"team-a", "asks"}} {
			for i, cond := range []string{"PodScheduled", "PodReadyToStartContainers"} {
				before := h.matchExclusions()
				code, body := h.patch(kubelet, "/api/v1/namespaces/"+p.ns+"/pods/"+p.name+"/status", strategicMergePatch,
					fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True"}],"message":"report %d"}}`, cond, i))
				if code != 200 {
					t.Errorf("the kubelet's status report on %s/%s: HTTP %d %s; want admitted", p.ns, p.name, code, body)
				}
				if h.matchExclusions() == before {
					t.Errorf("the kubelet's status report %d on %s/%s was not kept off the policy by its match condition", i, p.ns, p.name)
				}
				reports++
			}
		}
		t.Logf("match condition exclusions of %s: %d reports of the kubelet, %d exclusions counted meanwhile", statusPolicyName, reports, h.matchExclusions()-start)
	})

	t.Run("UninstallAccount", func(t *testing.T) {
		h.t = t
		h.admitted("label", "node", "n1", "cgdelegate.io/supports-cgroup-options=true")
		// 1. The pre-delete Job fails (here: it never runs, so helm's
		// hook timeout ends it), then the documented way out.
		res := h.run("helm", "uninstall", "cgdelegate", "--namespace", "kube-system", "--timeout", "20s")
		if res.ExitCode == 0 {
			t.Fatalf("helm uninstall succeeded with a pre-delete Job that can not run:\n%s", res.Stdout)
		}
		t.Logf("failed uninstall left: account %v, binding %v", h.exists("sa", uninstallSA, "-n", "kube-system"), h.exists("clusterrolebinding", uninstallRBAC))
		h.must("helm", "uninstall", "cgdelegate", "--namespace", "kube-system", "--no-hooks")
		h.accountNarrowed("after a failed uninstall and --no-hooks")
		h.cleanUninstallLeftovers()

		// 2. The uninstall is killed while the Job runs (Ctrl-C, a CI
		// job's timeout): the hooks stay; then the documented way out.
		h.must("helm", "install", "cgdelegate", a.Chart, "--namespace", "kube-system")
		killed, kill := context.WithCancel(t.Context())
		done := make(chan workstation.Result, 1)
		go func() {
			done <- h.runWith(killed, nil, "", "helm", "uninstall", "cgdelegate", "--namespace", "kube-system", "--timeout", "5m")
		}()
		deadline := time.Now().Add(time.Minute)
		for !h.exists("job", uninstallRBAC, "-n", "kube-system") {
			if time.Now().After(deadline) {
				kill()
				t.Fatalf("helm uninstall created no Job %s within a minute: %+v", uninstallRBAC, <-done)
			}
			time.Sleep(500 * time.Millisecond)
		}
		kill() // the workstation kills helm's process group (SIGKILL)
		<-done
		t.Logf("killed uninstall left: account %v, binding %v", h.exists("sa", uninstallSA, "-n", "kube-system"), h.exists("clusterrolebinding", uninstallRBAC))
		h.must("helm", "uninstall", "cgdelegate", "--namespace", "kube-system", "--no-hooks")
		h.accountNarrowed("after a killed uninstall and --no-hooks")
		h.cleanUninstallLeftovers()
	})
	t.Logf("took %s", time.Since(start).Round(time.Second))
}

// apiOnlyCluster is the host-only control plane newAPIOnlyHarness
// started: etcd and kube-apiserver on 127.0.0.1.
type apiOnlyCluster struct {
	a      *clusterArtifacts
	log    *slog.Logger
	dir    string // the test's directory: pki, data, home
	server string // https://127.0.0.1:<port>
}

// newAPIOnlyHarness starts etcd and kube-apiserver of the cluster boot
// (startControlPlaneOf, APIOnly) on 127.0.0.1, and a workstation that runs
// kubectl and helm as the admin; it skips the test when the ingredients
// are not built.
func newAPIOnlyHarness(t *testing.T) (*policyHarness, *apiOnlyCluster) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b := &builder{log: log, repo: repoRoot(t), cacheDir: defaultCacheDir(), workDir: t.TempDir()}
	needCachedIngredients(t, b.cacheDir, kubernetesKey, etcdKey())
	ctx := t.Context()
	bin, err := b.kubernetes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := b.etcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	helm, err := b.helm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port, err := apiServerPort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{"pki", "data", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	pki, err := newClusterPKI(filepath.Join(dir, "pki"), port, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := &clusterArtifacts{Bin: bin, Etcd: etcd, Helm: helm, Chart: filepath.Join(b.repo, chartDir), PKI: pki}
	if _, err := startControlPlaneOf(t, log, a, controlPlane{DataDir: filepath.Join(dir, "data"), Host: "127.0.0.1", APIOnly: true}); err != nil {
		t.Fatal(err)
	}
	// The PKI's kubeconfigs name the cluster boot's bridge; this API
	// server is on loopback, which its serving certificate names too.
	server := "https://127.0.0.1:" + strconv.Itoa(port)
	adminKC, err := os.ReadFile(pki.Kubeconfig("admin"))
	if err != nil {
		t.Fatal(err)
	}
	loopbackKC := filepath.Join(dir, "admin.kubeconfig")
	kc := strings.Replace(string(adminKC), "server: https://"+clusterHostIP+":", "server: https://127.0.0.1:", 1)
	if err := os.WriteFile(loopbackKC, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.Path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := newWorkstationToken()
	if err != nil {
		t.Fatal(err)
	}
	ws := &workstation.Server{
		Tools:      map[string]string{"kubectl": filepath.Join(bin, "kubectl"), "helm": helm},
		Kubeconfig: loopbackKC, Home: filepath.Join(dir, "home"), Token: token,
	}
	if err := ws.Validate(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ws)
	t.Cleanup(srv.Close)
	h := &policyHarness{t: t, ws: &workstation.Client{Endpoint: workstation.Endpoint{URL: srv.URL, Token: token}}, server: server}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := adminKeyPair(loopbackKC)
	if err != nil {
		t.Fatal(err)
	}
	h.adminClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}
	h.tokenClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	return h, &apiOnlyCluster{a: a, log: log, dir: dir, server: server}
}

// podAsking is a pod that asks for a writable cgroup as the policy wants
// it asked, Pending on n1.
func podAsking(ns, name string) string {
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: ` + ns + `
  annotations:
    writable-cgroups.noderesource.dev: "true"
    required-plugins.noderesource.dev: '["cgdelegate"]'
spec:
  nodeName: n1
  containers: [{name: app, image: busybox}]
`
}

func (h *policyHarness) refusedPod(want, ns, name string, who []string) {
	h.t.Helper()
	res := h.runWith(h.t.Context(), nil, podAsking(ns, name), "kubectl", append([]string{"create", "-f", "-"}, who...)...)
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), want) {
		h.t.Errorf("pod %s/%s that asks: exit %d, %s; want refused with %q", ns, name, res.ExitCode, res.Stderr, want)
	}
}

func (h *policyHarness) admittedPod(ns, name string, who []string) {
	h.t.Helper()
	res := h.runWith(h.t.Context(), nil, podAsking(ns, name), "kubectl", append([]string{"create", "-f", "-"}, who...)...)
	if res.ExitCode != 0 {
		h.t.Errorf("pod %s/%s that asks: exit %d, %s; want admitted", ns, name, res.ExitCode, res.Stderr)
	}
}

// accountNarrowed fails the test if the uninstall account can do more
// than remove the node label and its annotations: while it exists, a
// token of it may not taint n1, add another label or set the reason
// annotation, and may remove the label and the reason (its one right). Each is a merge patch, as the Job sends: the account may list
// and patch nodes, not get them, so kubectl taint or label, which get the
// node first, would be refused by RBAC whatever the policy; the refusals
// must be the policy's.
func (h *policyHarness) accountNarrowed(when string) {
	h.t.Helper()
	// The API server's admission refreshes its policies every second or
	// so: a policy deleted a moment ago may still refuse. Wait until the
	// pod policy, which --no-hooks deleted in the same pass, no longer
	// does (a dry run of a pod that asks, in a namespace not allowed).
	deadline := time.Now().Add(time.Minute)
	for {
		res := h.runWith(h.t.Context(), nil, podAsking("team-b", "probe"), "kubectl", "create", "--dry-run=server", "-f", "-")
		if res.ExitCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: the deleted pod policy still refuses after a minute: %s", when, res.Stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
	sa, binding := h.exists("sa", uninstallSA, "-n", "kube-system"), h.exists("clusterrolebinding", uninstallRBAC)
	h.t.Logf("%s: account %v, binding %v, policies %s", when, sa, binding,
		h.jsonpath("{.items[*].metadata.name}", "validatingadmissionpolicies"))
	if !sa {
		if binding {
			h.t.Logf("%s: the binding names a deleted account: a token of it is invalid", when)
		}
		return
	}
	tok := strings.TrimSpace(h.must("kubectl", "create", "token", uninstallSA, "-n", "kube-system", "--duration=10m"))
	account := apiAuth{token: tok}
	const byPolicy = "cgdelegate's uninstall account may"
	taint := `{"spec":{"taints":[{"key":"evil","value":"1","effect":"NoSchedule"}]}}`
	// Its policy in effect: a dry run refused by it.
	deadline = time.Now().Add(time.Minute)
	for {
		code, body := h.patch(account, "/api/v1/nodes/n1?dryRun=All", mergePatch, taint)
		if code != 200 && strings.Contains(body, byPolicy) {
			break
		}
		if time.Now().After(deadline) {
			h.t.Errorf("%s: a token of %s: the taint's dry run: HTTP %d %s after a minute; want refused by the policy (%q)", when, uninstallSA, code, body, byPolicy)
			break
		}
		time.Sleep(time.Second)
	}
	for _, p := range []string{
		taint, `{"metadata":{"labels":{"evil":"1"}}}`,
		// The label removed, as the Job does, so that the refusal is the
		// reason's own.
		`{"metadata":{"labels":{"cgdelegate.io/supports-cgroup-options":null},"annotations":{"cgdelegate.io/supports-cgroup-options-reason":"plugin_stopped"}}}`,
	} {
		code, body := h.patch(account, "/api/v1/nodes/n1", mergePatch, p)
		h.t.Logf("%s: a token of %s: PATCH node n1 %s: HTTP %d %s", when, uninstallSA, p, code, body)
		if code == 200 || !strings.Contains(body, byPolicy) {
			h.t.Errorf("%s: a token of %s: PATCH node n1 %s: HTTP %d %s; want refused by the policy (%q)", when, uninstallSA, p, code, body, byPolicy)
		}
	}
	if node := h.jsonpath("{.spec.taints}{.metadata.labels}{.metadata.annotations}", "node", "n1"); strings.Contains(node, "evil") ||
		strings.Contains(node, "supports-cgroup-options-reason") {
		h.t.Errorf("%s: node n1 is now %s", when, node)
	}
	if binding {
		h.admitted("label", "node", "n1", "cgdelegate.io/supports-cgroup-options=true", "--overwrite")
		h.admitted("annotate", "node", "n1", "cgdelegate.io/supports-cgroup-options-reason=plugin_stopped", "--overwrite")
		remove := `{"metadata":{"labels":{"cgdelegate.io/supports-cgroup-options":null},"annotations":{"cgdelegate.io/supports-cgroup-options-reason":null}}}`
		if code, body := h.patch(account, "/api/v1/nodes/n1", mergePatch, remove); code != 200 {
			h.t.Errorf("%s: the account may no longer remove the label and the reason: HTTP %d %s", when, code, body)
		}
		if got := h.jsonpath(`{.metadata.labels.cgdelegate\.io/supports-cgroup-options}{.metadata.annotations.cgdelegate\.io/supports-cgroup-options-reason}`, "node", "n1"); got != "" {
			h.t.Errorf("%s: after the account's removal n1 still has %q", when, got)
		}
	}
}

// cleanUninstallLeftovers removes what an uninstall's hooks left, as
// docs/deploying.md ("Uninstall") says: the binding first, the hook copy
// of the policy last, and checks that nothing of the account remains.
func (h *policyHarness) cleanUninstallLeftovers() {
	h.t.Helper()
	for _, args := range [][]string{
		{"clusterrolebinding", uninstallRBAC},
		{"clusterrole", uninstallRBAC},
		{"serviceaccount", uninstallSA, "-n", "kube-system"},
		{"job", uninstallRBAC, "-n", "kube-system"},
		{"validatingadmissionpolicybinding,validatingadmissionpolicy", uninstallRBAC + "-hook"},
	} {
		h.must("kubectl", append([]string{"delete", "--ignore-not-found", "--wait=false"}, args...)...)
	}
	for _, args := range [][]string{{"sa", uninstallSA, "-n", "kube-system"}, {"clusterrolebinding", uninstallRBAC}} {
		if h.exists(args...) {
			h.t.Errorf("after the cleanup %v remains", args)
		}
	}
}
