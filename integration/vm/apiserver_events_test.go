//go:build integration_vm

package vm

// TestAPIServerPodEvents runs the plugin's pod Events against a real
// kube-apiserver without a VM (newAPIOnlyHarness): the chart installed with
// helm, a token of the plugin's account bound to a pod on node n1 (so the
// API server puts n1 in its user info, as for the DaemonSet's pod), the
// plugin's own poster (advert.EventPoster) posting with it, and the attacks
// a stolen token could make with the account's right to create Events.

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
)

const podEventsPolicy = "cgdelegate-pod-events"

// post sends POST path with body to the API server as a, and returns the
// HTTP status and body.
func (h *policyHarness) post(a apiAuth, path, body string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), http.MethodPost, h.server+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := h.tokenClient.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// eventJSON is an events.k8s.io/v1 Event on pod team-a/web-1 as the plugin
// posts it, from node, with edit applied to its map.
func eventJSON(t *testing.T, name, node string, edit func(map[string]any)) string {
	t.Helper()
	ev := map[string]any{
		"apiVersion": "events.k8s.io/v1", "kind": "Event",
		"metadata":            map[string]any{"name": name, "namespace": "team-a"},
		"eventTime":           time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
		"reportingController": advert.EventController, "reportingInstance": node,
		"action": "CheckHost", "reason": advert.ReasonHostUnsafe, "type": "Warning",
		"note":      "container app: runs on a host no longer safe",
		"regarding": map[string]any{"apiVersion": "v1", "kind": "Pod", "namespace": "team-a", "name": "web-1", "uid": "u-1"},
	}
	if edit != nil {
		edit(ev)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAPIServerPodEvents: the plugin's Event, posted by the plugin's
// poster with a token of its account bound to a pod on n1, is admitted and
// shows on the pod; the Events a stolen token would forge (as another
// node, about a Deployment, with another reason, as the kubelet, in
// core/v1) are
// refused by the policy (core/v1 by RBAC), and the same forgeries are
// admitted once the policy's binding is gone: the policy is the defence.
func TestAPIServerPodEvents(t *testing.T) {
	start := time.Now()
	h, c := newAPIOnlyHarness(t)
	h.must("helm", "install", "cgdelegate", c.a.Chart, "--namespace", "kube-system")
	if !h.exists("validatingadmissionpolicy", podEventsPolicy) || !h.exists("clusterrole", podEventsPolicy) {
		t.Fatalf("helm install made no policy or ClusterRole %s", podEventsPolicy)
	}
	// The plugin's pod on n1 (no kubelet runs it), and the tenant's pod the
	// Events are about.
	h.apply(`apiVersion: v1
kind: Node
metadata: {name: n1}
---
apiVersion: v1
kind: Pod
metadata: {name: cgdelegate-n1, namespace: kube-system}
spec:
  nodeName: n1
  serviceAccountName: cgdelegate
  automountServiceAccountToken: false
  containers: [{name: cgdelegate, image: registry.invalid/cgdelegate:test}]
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: team-a}
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: team-a}
spec:
  nodeName: n1
  automountServiceAccountToken: false
  containers: [{name: app, image: registry.invalid/app:test}]
`)
	tok := strings.TrimSpace(h.must("kubectl", "create", "token", "cgdelegate", "-n", "kube-system", "--duration=10m",
		"--bound-object-kind", "Pod", "--bound-object-name", "cgdelegate-n1"))
	account := apiAuth{token: tok}
	eventsPath := "/apis/events.k8s.io/v1/namespaces/team-a/events"

	// The policy in effect: a forged Event's dry run refused by it.
	const byPolicy = "cgdelegate's service account may only post Events as its own node"
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := h.post(account, eventsPath+"?dryRun=All", eventJSON(t, "probe", "n2", nil))
		if code == http.StatusForbidden && strings.Contains(body, byPolicy) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a forged Event's dry run: HTTP %d %s after a minute; want refused by the policy", code, body)
		}
		time.Sleep(time.Second)
	}

	t.Run("PluginPosts", func(t *testing.T) {
		h.t = t
		uid := strings.TrimSpace(h.jsonpath("{.metadata.uid}", "pod", "web-1", "-n", "team-a"))
		saDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(saDir, "token"), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ca, err := os.ReadFile(c.a.PKI.Path("ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), ca, 0o600); err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(h.server)
		if err != nil {
			t.Fatal(err)
		}
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{advert.EnvServiceHost: host, advert.EnvServicePort: port, advert.EnvNodeName: "n1"}
		cfg := config.Default()
		cfg.PodEvents, cfg.ServiceAccountDir = config.NodeLabelOn, saDir
		var mu sync.Mutex
		results := map[string]int{}
		p, err := advert.NewEventPoster(cfg, func(k string) string { return env[k] }, slog.New(slog.NewTextHandler(os.Stderr, nil)),
			func(_, result string) {
				mu.Lock()
				defer mu.Unlock()
				results[result]++
			})
		if err != nil || p == nil {
			t.Fatalf("NewEventPoster: %v, %v", p, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { p.Run(ctx); close(done) }()
		for i, reason := range advert.EventReasons {
			p.Post(advert.PodEvent{
				Namespace: "team-a", Name: "web-1", UID: uid, Container: "app",
				Reason: reason, Action: advert.EventActions[i], Message: "test of " + reason,
			})
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			n := results[advert.EventPosted] + results[advert.EventFailed]
			mu.Unlock()
			if n == len(advert.EventReasons) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		<-done
		if results[advert.EventPosted] != len(advert.EventReasons) {
			t.Fatalf("results %v, want %d posted (the log above has the API's errors)", results, len(advert.EventReasons))
		}
		// kubectl describe pod finds them by the pod's uid.
		got := h.must("kubectl", "get", "events", "-n", "team-a",
			"--field-selector", "involvedObject.kind=Pod,involvedObject.name=web-1,involvedObject.uid="+uid,
			"-o", "jsonpath={range .items[*]}{.type} {.reason} {.reportingComponent} {.reportingInstance}: {.message}{\"\\n\"}{end}")
		t.Logf("the pod's Events:\n%s", got)
		for _, reason := range advert.EventReasons {
			if want := "Warning " + reason + " " + advert.EventController + " n1: container app: test of " + reason; !strings.Contains(got, want) {
				t.Errorf("the pod's Events do not say %q", want)
			}
		}
		describe := h.must("kubectl", "describe", "pod", "web-1", "-n", "team-a")
		if !strings.Contains(describe, advert.ReasonHostUnsafe) || !strings.Contains(describe, "container app: test of") {
			t.Errorf("kubectl describe pod shows no cgdelegate Event:\n%s", describe)
		}
	})

	forgeries := []struct {
		name string
		node string
		edit func(map[string]any)
		want string
	}{
		{"as another node", "n2", nil, byPolicy},
		// (A Node is cluster-scoped: the API server itself refuses an
		// Event on it in a namespace.)
		{"regarding a Deployment", "n1", func(e map[string]any) {
			e["regarding"] = map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team-a", "name": "web"}
		}, "regarding a Pod"},
		{"another reason", "n1", func(e map[string]any) { e["reason"] = "Evicted" }, "not 'Evicted'"},
		{"as the kubelet", "n1", func(e map[string]any) { e["reportingController"] = "kubelet" }, "reported by cgdelegate.io/plugin"},
	}
	t.Run("Forged", func(t *testing.T) {
		h.t = t
		for _, f := range forgeries {
			code, body := h.post(account, eventsPath, eventJSON(t, "forged", f.node, f.edit))
			t.Logf("%s: HTTP %d %s", f.name, code, body)
			if code != http.StatusForbidden || !strings.Contains(body, f.want) {
				t.Errorf("%s: HTTP %d %s; want refused by the policy (%q)", f.name, code, body, f.want)
			}
		}
		// core/v1 Events: RBAC grants none.
		core := `{"apiVersion":"v1","kind":"Event","metadata":{"name":"forged-core","namespace":"team-a"},
"involvedObject":{"kind":"Pod","namespace":"team-a","name":"web-1"},"reason":"Killing","message":"x","type":"Normal",
"source":{"component":"kubelet","host":"n2"}}`
		code, body := h.post(account, "/api/v1/namespaces/team-a/events", core)
		if code != http.StatusForbidden || !strings.Contains(body, "cannot create resource") || !strings.Contains(body, `in API group \"\"`) {
			t.Errorf("a core/v1 Event: HTTP %d %s; want refused by RBAC", code, body)
		}
	})

	// Without the policy's binding the same forgeries are admitted (RBAC
	// grants create): the policy is what refuses them.
	t.Run("WithoutThePolicy", func(t *testing.T) {
		h.t = t
		h.must("kubectl", "delete", "validatingadmissionpolicybinding", podEventsPolicy)
		deadline := time.Now().Add(time.Minute)
		for {
			code, body := h.post(account, eventsPath+"?dryRun=All", eventJSON(t, "probe", "n2", nil))
			if code == http.StatusCreated {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a forged Event's dry run without the policy: HTTP %d %s after a minute", code, body)
			}
			time.Sleep(time.Second)
		}
		for _, f := range forgeries {
			if code, body := h.post(account, eventsPath+"?dryRun=All", eventJSON(t, "forged", f.node, f.edit)); code != http.StatusCreated {
				t.Errorf("%s without the policy: HTTP %d %s; want admitted (only the policy refuses it)", f.name, code, body)
			}
		}
	})
	t.Logf("TestAPIServerPodEvents took %s", time.Since(start).Round(time.Second))
}
