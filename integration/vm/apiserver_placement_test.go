//go:build integration_vm

package vm

// TestAPIServerPlacement runs the chart's placement policy
// (MutatingAdmissionPolicy cgdelegate-placement) in a real kube-apiserver
// 1.37 on loopback (newAPIOnlyHarness), and a real kube-scheduler beside it
// for where pods land: no kubelet runs, the nodes are Node objects made
// Ready by hand.

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

const (
	supportLabel    = "cgdelegate.io/supports-cgroup-options"
	placementPolicy = "cgdelegate-placement"
)

// supportReq is the requirement placement adds to every term.
var supportReq = corev1.NodeSelectorRequirement{Key: supportLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}

// placementPod is a pod in team-a with the given annotations and spec
// (YAML, indented by two under spec:, may be ""). No token is mounted:
// the volume's name would differ between two dry runs.
func placementPod(name string, annotations map[string]string, spec string) string {
	a, _ := json.Marshal(annotations)
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: team-a
  annotations: ` + string(a) + `
spec:
  automountServiceAccountToken: false
  containers: [{name: app, image: busybox}]
` + spec
}

// asking are the annotations of a pod that asks, as the writable-cgroups
// policy wants it asked.
var asking = map[string]string{"writable-cgroups.noderesource.dev": "true", "required-plugins.noderesource.dev": `["cgdelegate"]`}

// dryRun creates the pod with a server-side dry run (every admission
// plugin runs, nothing is stored) and returns the pod as admitted.
func (h *policyHarness) dryRun(pod string) (*corev1.Pod, string) {
	h.t.Helper()
	res := h.runWith(h.t.Context(), nil, pod, "kubectl", "create", "--dry-run=server", "-o", "json", "-f", "-")
	if res.ExitCode != 0 {
		h.t.Fatalf("kubectl create --dry-run=server: exit %d %s\n%s", res.ExitCode, res.Stderr, pod)
	}
	var p corev1.Pod
	if err := json.Unmarshal(res.Stdout, &p); err != nil {
		h.t.Fatalf("kubectl create --dry-run=server: %v: stdout %q stderr %q\n%s", err, res.Stdout, res.Stderr, pod)
	}
	return &p, string(res.Stdout)
}

// admittedShape is what placement may change, as JSON: the pod's
// annotations, labels and spec (not uid or creationTimestamp, which differ
// per request).
func admittedShape(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	b, err := json.Marshal(struct {
		Annotations, Labels map[string]string
		Spec                corev1.PodSpec
	}{p.Annotations, p.Labels, p.Spec})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitPlacement repeats a dry run of a pod that asks until its admitted
// affinity is placed (true) or not (false): a policy's change takes effect
// once the API server's informers have it.
func (h *policyHarness) waitPlacement(placed bool) {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p, _ := h.dryRun(placementPod("probe", asking, ""))
		if (p.Spec.Affinity != nil) == placed {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("a pod that asks still admitted with affinity %+v after a minute, want placed %v", p.Spec.Affinity, placed)
		}
		time.Sleep(time.Second)
	}
}

func requiredTerms(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

func exprs(rs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: rs}
}

func nsr(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

// startScheduler runs kube-scheduler (the cluster boot's flags, its
// identity's kubeconfig pointed at loopback) until the test ends.
func (c *apiOnlyCluster) startScheduler(t *testing.T) {
	t.Helper()
	ports, err := freeLoopbackPorts(1)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(c.a.PKI.Kubeconfig("scheduler"))
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(c.dir, "scheduler.kubeconfig")
	if err := os.WriteFile(kc, []byte(strings.Replace(string(raw), "server: https://"+clusterHostIP+":", "server: https://127.0.0.1:", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := controlPlane{PKI: c.a.PKI, DataDir: filepath.Join(c.dir, "data"), Sched: ports[0]}
	var args []string
	for _, a := range cfg.SchedulerArgs() {
		for _, f := range []string{"--kubeconfig=", "--authentication-kubeconfig=", "--authorization-kubeconfig="} {
			if strings.HasPrefix(a, f) {
				a = f + kc
			}
		}
		args = append(args, a)
	}
	p, err := startHostProc("kube-scheduler", filepath.Join(c.dir, "data", "kube-scheduler.log"), filepath.Join(c.a.Bin, "kube-scheduler"), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.stop(10 * time.Second) })
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := waitHealthy(p, insecure, loopbackURL("https", ports[0])+"/healthz", 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, fileTail(p.log, 30))
	}
}

// readyNode makes a Node object the scheduler takes as Ready, with room
// for pods, and the given labels.
func (h *policyHarness) readyNode(name string, labels map[string]string) {
	h.t.Helper()
	l, _ := json.Marshal(labels)
	h.apply(`apiVersion: v1
kind: Node
metadata: {name: ` + name + `, labels: ` + string(l) + `}
`)
	status := `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"test"}],` +
		`"capacity":{"cpu":"4","memory":"8Gi","pods":"110"},"allocatable":{"cpu":"4","memory":"8Gi","pods":"110"}}}`
	h.must("kubectl", "patch", "node", name, "--subresource=status", "--type=merge", "-p", status)
	// The TaintNodesByCondition admission plugin gave the new Node the
	// not-ready taint, which only the node lifecycle controller (not
	// running here) takes off once the node is Ready.
	h.must("kubectl", "patch", "node", name, "--type=merge", "-p", `{"spec":{"taints":null}}`)
}

// TestAPIServerPlacement: the chart installed on a 1.37 API server renders
// the placement policy (helm finds the API) and says so in NOTES; pods
// that ask get the label requirement ANDed into their own scheduling (no
// affinity, several terms, preferred only, a nodeSelector), once
// (idempotent: the admitted pod admitted again is unchanged); a scheduling
// gate does not let an update take it out; the scheduler puts a pod that
// asks on the labelled node of two, and leaves it Pending when no node has
// the label; and every pod that asks for nothing is admitted byte for
// byte as with placement off (helm upgrade placement.enabled=false), as
// are pods that ask with placement off (the policy is what placed them).
func TestAPIServerPlacement(t *testing.T) {
	start := time.Now()
	h, c := newAPIOnlyHarness(t)
	out := h.must("helm", "install", "cgdelegate", c.a.Chart, "--namespace", "kube-system")
	if !strings.Contains(out, "Placement: pods that ask for a writable cgroup get") || !strings.Contains(out, "MutatingAdmissionPolicy cgdelegate-placement") {
		t.Errorf("helm install's NOTES do not say placement is installed:\n%s", out)
	}
	if !h.exists("mutatingadmissionpolicy", placementPolicy) || !h.exists("mutatingadmissionpolicybinding", placementPolicy) {
		t.Fatalf("helm install on a 1.37 API server made no MutatingAdmissionPolicy %s and binding", placementPolicy)
	}
	h.apply(`apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {` + nsLabelKey + `: allowed}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: team-a}
`)
	h.waitPlacement(true)

	byName := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}
	preferred := []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: exprs(nsr("zone", corev1.NodeSelectorOpIn, "a"))}}
	placed := requiredTerms(exprs(supportReq))
	asks := []struct {
		name string
		spec string
		want *corev1.Affinity // nil: as without placement
		// placedAlready: the pod's own affinity is want.
		placedAlready bool
	}{
		{"no affinity", "", placed, false},
		{"nodeSelector", "  nodeSelector: {disk: ssd}\n", placed, false},
		{"preferred only", `  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 10
          preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}
`, &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution:  placed.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
			PreferredDuringSchedulingIgnoredDuringExecution: preferred,
		}}, false},
		{"several terms", `  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: zone, operator: In, values: [a]}]
          - matchExpressions: [{key: gpu, operator: Exists}, {key: zone, operator: NotIn, values: [c]}]
          - matchFields: [{key: metadata.name, operator: In, values: [n1]}]
`, requiredTerms(
			exprs(nsr("zone", corev1.NodeSelectorOpIn, "a"), supportReq),
			exprs(nsr("gpu", corev1.NodeSelectorOpExists), nsr("zone", corev1.NodeSelectorOpNotIn, "c"), supportReq),
			corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{byName}, MatchExpressions: []corev1.NodeSelectorRequirement{supportReq}},
		), false},
		{"requirement in one term of two", `  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: ` + supportLabel + `, operator: In, values: ["true"]}]
          - matchExpressions: [{key: zone, operator: In, values: [b]}]
`, requiredTerms(exprs(supportReq), exprs(nsr("zone", corev1.NodeSelectorOpIn, "b"), supportReq)), false},
		{"requirement in every term", `  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: zone, operator: In, values: [a]}, {key: ` + supportLabel + `, operator: In, values: ["true"]}]
`, requiredTerms(exprs(nsr("zone", corev1.NodeSelectorOpIn, "a"), supportReq)), true},
		{"label in the nodeSelector", "  nodeSelector: {" + supportLabel + `: "true"}` + "\n", nil, true},
	}
	// The pods that ask for nothing: no opt-in, other annotations, the
	// opt-in keys with the values that ask for less, with and without
	// scheduling of their own.
	nothing := []struct {
		name        string
		annotations map[string]string
		spec        string
	}{
		{"bare", nil, ""},
		{"other annotations", map[string]string{"example.com/x": "true", "required-plugins.noderesource.dev": `["cgdelegate"]`}, ""},
		{"ReadOnly", map[string]string{"writable-cgroups.noderesource.dev": "ReadOnly"}, ""},
		{"false, padded", map[string]string{"writable-cgroups.noderesource.dev/pod": " false "}, ""},
		{"every opt-in key asking for less", map[string]string{
			"writable-cgroups.noderesource.dev": "false", "writable-cgroups.noderesource.dev/container.app": "ReadOnly",
			"cgroup2-mount-hierarchy-rw.crio.io": "false", "io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw": "false",
			"writable-cgroups.nri.io/enable": "false",
		}, ""},
		{"nodeSelector", map[string]string{"writable-cgroups.noderesource.dev": "false"}, "  nodeSelector: {disk: ssd}\n"},
		{"required affinity", map[string]string{"writable-cgroups.noderesource.dev": "ReadOnly"}, asks[3].spec},
		{"preferred affinity", nil, asks[2].spec},
	}

	t.Run("Mutation", func(t *testing.T) {
		h.t = t
		for _, tc := range asks {
			got, raw := h.dryRun(placementPod("asks", asking, tc.spec))
			if tc.want != nil && !reflect.DeepEqual(got.Spec.Affinity, tc.want) {
				t.Errorf("%s: admitted affinity\n%+v\nwant\n%+v", tc.name, got.Spec.Affinity, tc.want)
			}
			if tc.name == "label in the nodeSelector" && got.Spec.Affinity != nil {
				t.Errorf("%s: admitted affinity %+v, want none", tc.name, got.Spec.Affinity)
			}
			// The admitted pod, created again: unchanged.
			var again corev1.Pod
			if err := json.Unmarshal([]byte(raw), &again); err != nil {
				t.Fatal(err)
			}
			again.ObjectMeta = metadataOnly(again.ObjectMeta)
			y, err := sigsyaml.Marshal(again)
			if err != nil {
				t.Fatal(err)
			}
			if twice, _ := h.dryRun(string(y)); !reflect.DeepEqual(twice.Spec.Affinity, got.Spec.Affinity) {
				t.Errorf("%s: placement applied to its own output changed it:\n%+v\nto\n%+v", tc.name, got.Spec.Affinity, twice.Spec.Affinity)
			}
		}
	})

	t.Run("Reinvocation", func(t *testing.T) {
		h.t = t
		// Another mutation that replaces the pod's node affinity (as a
		// webhook or policy of the cluster's might), for pods annotated
		// so. Whichever order the API server runs the two in, the pod
		// must end with the requirement: placement runs after it, or is
		// reinvoked (IfNeeded) because it changed the pod.
		const zoneOnly = `Object.spec.affinity{nodeAffinity: Object.spec.affinity.nodeAffinity{` +
			`requiredDuringSchedulingIgnoredDuringExecution: Object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution{` +
			`nodeSelectorTerms: [Object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms{` +
			`matchExpressions: [Object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.matchExpressions{key: 'zone', operator: 'In', values: ['a']}]}]}}}`
		h.apply(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: zz-replace-affinity}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  matchConditions:
    - name: annotated
      expression: "has(object.metadata.annotations) && 'example.com/replace-affinity' in object.metadata.annotations"
  mutations:
    - patchType: JSONPatch
      jsonPatch:
        expression: "[JSONPatch{op: 'add', path: '/spec/affinity', value: ` + zoneOnly + `}]"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: zz-replace-affinity}
spec: {policyName: zz-replace-affinity}
`)
		annotated := map[string]string{"example.com/replace-affinity": "yes"}
		for k, v := range asking {
			annotated[k] = v
		}
		want := requiredTerms(exprs(nsr("zone", corev1.NodeSelectorOpIn, "a"), supportReq))
		// The other policy takes effect once the informers have it.
		deadline := time.Now().Add(time.Minute)
		var got *corev1.Pod
		for {
			got, _ = h.dryRun(placementPod("replaced", annotated, ""))
			if reflect.DeepEqual(got.Spec.Affinity, want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		if !reflect.DeepEqual(got.Spec.Affinity, want) {
			t.Errorf("a pod that asks, whose affinity another mutation replaces: admitted with\n%+v\nwant\n%+v", got.Spec.Affinity, want)
		}
		// Without reinvocation: tells whether the order exercised it.
		h.must("kubectl", "patch", "mutatingadmissionpolicy", placementPolicy, "--type=merge", "-p", `{"spec":{"reinvocationPolicy":"Never"}}`)
		time.Sleep(5 * time.Second)
		never, _ := h.dryRun(placementPod("replaced", annotated, ""))
		t.Logf("with reinvocationPolicy Never the pod is admitted with %+v (requirement kept: %v; false means reinvocation is what kept it)",
			never.Spec.Affinity, reflect.DeepEqual(never.Spec.Affinity, want))
		h.must("kubectl", "patch", "mutatingadmissionpolicy", placementPolicy, "--type=merge", "-p", `{"spec":{"reinvocationPolicy":"IfNeeded"}}`)
		h.must("kubectl", "delete", "mutatingadmissionpolicybinding,mutatingadmissionpolicy", "zz-replace-affinity")
		time.Sleep(5 * time.Second)
	})

	t.Run("GatedPodKeepsIt", func(t *testing.T) {
		h.t = t
		h.apply(placementPod("gated", asking, "  schedulingGates: [{name: example.com/hold}]\n"))
		if got := h.jsonpath("{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key}", "pod", "gated", "-n", "team-a"); got != supportLabel {
			t.Fatalf("the gated pod was admitted without the requirement: %q", got)
		}
		// A gated pod's node affinity may only be narrowed: taking the
		// requirement out is refused by the API server itself.
		res := h.run("kubectl", "patch", "pod", "gated", "-n", "team-a", "--type=json", "-p",
			`[{"op":"replace","path":"/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions","value":[{"key":"zone","operator":"In","values":["a"]}]}]`)
		if res.ExitCode == 0 {
			t.Errorf("an update took the requirement out of a gated pod: %s", res.Stdout)
		} else {
			t.Logf("taking the requirement out of a gated pod: %s", strings.TrimSpace(string(res.Stderr)))
		}
		h.must("kubectl", "delete", "pod", "gated", "-n", "team-a", "--wait=false")
	})

	// What the pods that ask for nothing are admitted as with placement on.
	h.t = t
	withPlacement := map[string]string{}
	for _, tc := range nothing {
		p, _ := h.dryRun(placementPod("nothing", tc.annotations, tc.spec))
		withPlacement[tc.name] = admittedShape(t, p)
	}

	t.Run("Scheduler", func(t *testing.T) {
		h.t = t
		c.startScheduler(t)
		h.readyNode("n-nsdelegate", map[string]string{supportLabel: "true", "kubernetes.io/hostname": "n-nsdelegate"})
		h.readyNode("n-plain", map[string]string{"kubernetes.io/hostname": "n-plain"})
		scheduledOn := func(pod string) string {
			deadline := time.Now().Add(time.Minute)
			for {
				if n := h.jsonpath("{.spec.nodeName}", "pod", pod, "-n", "team-a"); n != "" || time.Now().After(deadline) {
					return n
				}
				time.Sleep(time.Second)
			}
		}
		// Several pods each, so that a pod that asks landing on the
		// labelled node by chance would show.
		for i := range 4 {
			name := fmt.Sprintf("asks-%d", i)
			h.apply(placementPod(name, asking, ""))
			if n := scheduledOn(name); n != "n-nsdelegate" {
				t.Errorf("pod %s, which asks, was scheduled on %q, want n-nsdelegate", name, n)
			}
		}
		// No node has the label: Pending, with the scheduler's reason.
		h.must("kubectl", "label", "node", "n-nsdelegate", supportLabel+"-")
		h.apply(placementPod("asks-stranded", asking, ""))
		deadline := time.Now().Add(time.Minute)
		var msg string
		for time.Now().Before(deadline) {
			msg = h.jsonpath(`{.status.conditions[?(@.type=="PodScheduled")].message}`, "pod", "asks-stranded", "-n", "team-a")
			if msg != "" {
				break
			}
			time.Sleep(time.Second)
		}
		const want = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector"
		if !strings.Contains(msg, want) {
			t.Errorf("the stranded pod's PodScheduled message %q, want %q", msg, want)
		}
		if n := h.jsonpath("{.spec.nodeName}", "pod", "asks-stranded", "-n", "team-a"); n != "" {
			t.Errorf("the stranded pod was scheduled on %s", n)
		}
		events := h.must("kubectl", "get", "events", "-n", "team-a", "--field-selector", "involvedObject.name=asks-stranded,reason=FailedScheduling", "-o", "jsonpath={.items[*].message}")
		t.Logf("stranded pod: PodScheduled %q; FailedScheduling events %q; its affinity %s", msg, events,
			h.jsonpath("{.spec.affinity.nodeAffinity}", "pod", "asks-stranded", "-n", "team-a"))
		// The label back: the scheduler places it.
		h.must("kubectl", "label", "node", "n-nsdelegate", supportLabel+"=true")
		if n := scheduledOn("asks-stranded"); n != "n-nsdelegate" {
			t.Errorf("once n-nsdelegate is labelled again the stranded pod is on %q, want n-nsdelegate", n)
		}
	})

	t.Run("Off", func(t *testing.T) {
		h.t = t
		out := h.must("helm", "upgrade", "cgdelegate", c.a.Chart, "--namespace", "kube-system", "--reuse-values", "--set", "placement.enabled=false")
		if !strings.Contains(out, "Placement is off (placement.enabled false)") {
			t.Errorf("helm upgrade's NOTES do not say placement is off:\n%s", out)
		}
		if h.exists("mutatingadmissionpolicy", placementPolicy) {
			t.Errorf("placement.enabled=false left the policy %s", placementPolicy)
		}
		h.waitPlacement(false)
		for _, tc := range nothing {
			p, _ := h.dryRun(placementPod("nothing", tc.annotations, tc.spec))
			if got := admittedShape(t, p); got != withPlacement[tc.name] {
				t.Errorf("%s: a pod that asks for nothing was admitted as\n%s\nwith placement, and as\n%s\nwithout", tc.name, withPlacement[tc.name], got)
			}
		}
		// The premise: without the policy, a pod that asks keeps its own
		// scheduling.
		for _, tc := range asks {
			if tc.placedAlready {
				continue
			}
			if got, _ := h.dryRun(placementPod("asks", asking, tc.spec)); reflect.DeepEqual(got.Spec.Affinity, tc.want) {
				t.Errorf("%s: without the policy the pod is admitted placed as well", tc.name)
			}
		}
	})
	t.Logf("took %s", time.Since(start).Round(time.Second))
}

// metadataOnly keeps what a client sets of a pod's metadata.
func metadataOnly(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations}
}
