//go:build integration_vm

package vm

// TestAPIServerNodeLabel runs the plugin's own node-label client
// (advert.NodeLabeler) with a real token of the chart's account, bound to
// a Pending pod on node n1, against a real kube-apiserver on loopback
// (newAPIOnlyHarness) with the chart's policy cgdelegate-node-label: the
// label and its reason annotation set, changed and withdrawn in one patch
// each; the token's attacks on another annotation, another value and
// another node refused by the policy; and `cgdelegate nodes` (the binary,
// with the admin's kubeconfig) printing both nodes with their reasons.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

func TestAPIServerNodeLabel(t *testing.T) {
	start := time.Now()
	h, c := newAPIOnlyHarness(t)
	// The command under test, built while the chart installs.
	bin := filepath.Join(t.TempDir(), "cgdelegate")
	build := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-o", bin, "./cmd/cgdelegate")
	build.Dir, build.Env = repoRoot(t), append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	built := make(chan error, 1)
	go func() {
		if out, err := build.CombinedOutput(); err != nil {
			built <- fmt.Errorf("go build ./cmd/cgdelegate: %w: %s", err, out)
			return
		}
		built <- nil
	}()
	h.must("helm", "install", "cgdelegate", c.a.Chart, "--namespace", "kube-system")
	// Two nodes, and the plugin's pod on n1 (Pending: no kubelet), whose
	// token the API server binds to n1.
	h.apply(`apiVersion: v1
kind: Node
metadata: {name: n1}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
---
apiVersion: v1
kind: Pod
metadata:
  name: cgdelegate-n1
  namespace: kube-system
  labels: {app.kubernetes.io/name: cgdelegate}
spec:
  nodeName: n1
  serviceAccountName: cgdelegate
  containers: [{name: cgdelegate, image: "ghcr.io/cgdelegate/cgdelegate:v9.9.9"}]
`)
	tok := strings.TrimSpace(h.must("kubectl", "create", "token", "cgdelegate", "-n", "kube-system",
		"--bound-object-kind=Pod", "--bound-object-name=cgdelegate-n1", "--duration=10m"))
	plugin := apiAuth{token: tok}
	const byPolicy = "cgdelegate's service account may"
	// The policy in effect: a dry run of another annotation refused by it.
	evil := `{"metadata":{"annotations":{"example.com/evil":"1"}}}`
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := h.patch(plugin, "/api/v1/nodes/n1?dryRun=All", mergePatch, evil)
		if code != 200 && strings.Contains(body, byPolicy) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the token's dry run of another annotation: HTTP %d %s after a minute; want refused by the policy", code, body)
		}
		time.Sleep(time.Second)
	}

	// The plugin's client, as the DaemonSet's pod runs it: the token and
	// the CA in its service-account directory, the API's address and its
	// node in its environment.
	sa := t.TempDir()
	ca, err := os.ReadFile(c.a.PKI.Path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"token": []byte(tok), "ca.crt": ca} {
		if err := os.WriteFile(filepath.Join(sa, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port := c.server[strings.LastIndex(c.server, ":")+1:]
	env := map[string]string{advert.EnvServiceHost: "127.0.0.1", advert.EnvServicePort: port, advert.EnvNodeName: "n1"}
	cfg := config.Default()
	cfg.NodeLabel, cfg.ServiceAccountDir = config.NodeLabelOn, sa
	l, err := advert.NewNodeLabeler(cfg, func(k string) string { return env[k] }, c.log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- l.Run(ctx) }()
	node := func(n string) string {
		return h.jsonpath(`{.metadata.labels.cgdelegate\.io/supports-cgroup-options}|{.metadata.annotations.cgdelegate\.io/supports-cgroup-options-reason}|{.metadata.annotations.cgdelegate\.io/fail-closed}`, "node", n)
	}
	// converged waits until the last request was applied with want, and
	// checks the node.
	converged := func(step, wantLabel, wantReason, wantNode string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			r := l.Result()
			if r.Applied && r.Want == wantLabel && r.Reason == wantReason {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the plugin's request %+v after a minute; want %s with the reason %s applied", step, r, wantLabel, wantReason)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got := node("n1"); got != wantNode {
			t.Errorf("%s: node n1 has label|reason|fail-closed %q, want %q", step, got, wantNode)
		}
	}
	l.SetFailClosed(status.FailClosedEnforced)
	l.SetWithReason(false, status.ReasonNotConfigured)
	converged("before the runtime", "absent", string(status.ReasonNotConfigured), "|not_configured|enforced")
	l.SetWithReason(true, "")
	converged("supported", "true", "absent", "true||enforced")

	// The other node, as its plugin (without nsdelegate) left it.
	h.admitted("annotate", "node", "n2", advert.ReasonAnnotation+"="+string(status.ReasonNoNsdelegate), advert.FailClosedAnnotation+"=off")
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(c.dir, "admin.kubeconfig")
	nodes := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, append([]string{"nodes", "-kubeconfig", kubeconfig}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cgdelegate nodes %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		t.Logf("cgdelegate nodes %s:\n%s%s", strings.Join(args, " "), out, stderr.String())
		return string(out)
	}
	rows := func(table string) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(table), "\n") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
		return out
	}
	want := []string{"NODE SUPPORTS REASON FAIL-CLOSED VERSION", "n1 true - enforced v9.9.9", "n2 absent no_nsdelegate off -"}
	if got := rows(nodes()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("cgdelegate nodes:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if js := nodes("-o", "json"); !strings.Contains(js, `"reason": "no_nsdelegate"`) || !strings.Contains(js, `"version": "v9.9.9"`) {
		t.Errorf("cgdelegate nodes -o json: %s", js)
	}
	// The pure-kubectl command docs/troubleshooting.md gives says the same.
	const columns = `NODE:.metadata.name,SUPPORTS:.metadata.labels.cgdelegate\.io/supports-cgroup-options,` +
		`REASON:.metadata.annotations.cgdelegate\.io/supports-cgroup-options-reason,FAIL-CLOSED:.metadata.annotations.cgdelegate\.io/fail-closed`
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "kubectl get nodes -o custom-columns='"+columns+"'") {
		t.Errorf("docs/troubleshooting.md does not give the kubectl command with the columns %s", columns)
	}
	want = []string{"NODE SUPPORTS REASON FAIL-CLOSED", "n1 true <none> enforced", "n2 <none> no_nsdelegate off"}
	if got := rows(h.must("kubectl", "get", "nodes", "-o", "custom-columns="+columns)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kubectl get nodes -o custom-columns:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The token's attacks, each a merge patch as the plugin sends, each
	// refused by the policy and leaving the nodes as they were.
	for _, a := range []struct{ name, node, patch, want string }{
		{"another annotation on its node", "n1", evil, "may change only the annotations cgdelegate.io/fail-closed and " + advert.ReasonAnnotation + ", not example.com/evil"},
		{
			"the reason with the label, plus another annotation", "n1",
			`{"metadata":{"labels":{"` + advert.FeatureLabel + `":null},"annotations":{"` + advert.ReasonAnnotation + `":"no_nsdelegate","example.com/evil":"1"}}}`,
			"not example.com/evil",
		},
		{
			"a reason of its own words", "n1", `{"metadata":{"annotations":{"` + advert.ReasonAnnotation + `":"call 555-0100"}}}`,
			"may only set the annotation " + advert.ReasonAnnotation + " to one of",
		},
	} {
		code, body := h.patch(plugin, "/api/v1/nodes/"+a.node, mergePatch, a.patch)
		t.Logf("the token: %s: HTTP %d %s", a.name, code, body)
		if code == 200 || !strings.Contains(body, a.want) {
			t.Errorf("the token: %s: HTTP %d %s; want refused with %q", a.name, code, body, a.want)
		}
	}
	for _, p := range []string{
		`{"metadata":{"annotations":{"` + advert.ReasonAnnotation + `":"plugin_stopped"}}}`,
		`{"metadata":{"annotations":{"` + advert.ReasonAnnotation + `":null}}}`,
		`{"metadata":{"labels":{"` + advert.FeatureLabel + `":"true"},"annotations":{"` + advert.ReasonAnnotation + `":null}}}`,
	} {
		code, body := h.patch(plugin, "/api/v1/nodes/n2", mergePatch, p)
		t.Logf("the token on n2: %s: HTTP %d %s", p, code, body)
		if code == 200 || !strings.Contains(body, "may only label its own node: its token is for node 'n1', not n2") {
			t.Errorf("the token on n2: %s: HTTP %d %s; want refused as another node's", p, code, body)
		}
	}
	if got, want := node("n1")+" "+node("n2"), "true||enforced |no_nsdelegate|off"; got != want {
		t.Errorf("after the attacks the nodes have label|reason|fail-closed %q, want %q", got, want)
	}

	// The plugin's own changes, then its stop.
	l.SetWithReason(false, status.ReasonNoNsdelegate)
	converged("nsdelegate gone", "absent", string(status.ReasonNoNsdelegate), "|no_nsdelegate|enforced")
	stop()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Errorf("the plugin's Run = %v, want context.Canceled", err)
	}
	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := l.Withdraw(wctx); err != nil {
		t.Fatalf("the plugin's withdrawal: %v", err)
	}
	if r := l.Result(); !r.Applied || r.Reason != string(status.ReasonPluginStopped) || r.FailClosed != "absent" {
		t.Errorf("the withdrawal: %+v", r)
	}
	if got := node("n1"); got != "|plugin_stopped|" {
		t.Errorf("after the plugin stopped, n1 has label|reason|fail-closed %q, want |plugin_stopped|", got)
	}
	want = []string{"NODE SUPPORTS REASON FAIL-CLOSED VERSION", "n1 absent plugin_stopped - v9.9.9", "n2 absent no_nsdelegate off -"}
	if got := rows(nodes()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("cgdelegate nodes after the stop:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	t.Logf("took %s", time.Since(start).Round(time.Second))
}
