package kubernetes_test

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

const (
	nodeLabelPolicyFile = "node-label-policy.yaml"

	supportsLabel = "cgdelegate.io/supports-cgroup-options"
	// failClosedNote is the annotation beside the label.
	failClosedNote = "cgdelegate.io/fail-closed"
	// reasonNote is the annotation that says why the label is absent.
	reasonNote    = "cgdelegate.io/supports-cgroup-options-reason"
	nodeNameExtra = "authentication.kubernetes.io/node-name"
	pluginUser    = "system:serviceaccount:kube-system:cgdelegate"
)

// nodeLabelPolicy loads and compiles the node-label policy, and checks the
// shape it relies on (nodePolicy).
func nodeLabelPolicy(t *testing.T) policy {
	t.Helper()
	return nodePolicy(t, nodeLabelPolicyFile)
}

// nodePolicy loads and compiles the one policy of file, and checks the
// shape both node policies rely on: failing closed, bound with Deny for
// every object, matching UPDATE of core nodes only, by one user.
func nodePolicy(t *testing.T, file string) policy {
	t.Helper()
	m := loadManifest(t, file)
	if len(m.policies) != 1 || len(m.bindings) != 1 {
		t.Fatalf("%s: %d policies and %d bindings, want one each", file, len(m.policies), len(m.bindings))
	}
	p, b := m.policies[0], m.bindings[0]
	s := p.Spec
	if s.FailurePolicy == nil || *s.FailurePolicy != admissionv1.Fail || s.ParamKind != nil {
		t.Errorf("policy %s: want failurePolicy Fail and no paramKind", p.Name)
	}
	rules := s.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].APIGroups, []string{""}) || !slices.Equal(rules[0].Resources, []string{"nodes"}) ||
		!slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Update}) {
		t.Errorf("policy %s: want one rule, core nodes on UPDATE; got %+v", p.Name, rules)
	}
	if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		b.Spec.ParamRef != nil || b.Spec.MatchResources != nil {
		t.Errorf("binding %s %+v: want policy %s with validationActions [Deny] for everything", b.Name, b.Spec, p.Name)
	}
	if len(s.MatchConditions) != 1 {
		t.Errorf("policy %s: %d matchConditions, want one selecting the plugin's service account", p.Name, len(s.MatchConditions))
	}
	return compilePolicy(t, p, false)
}

// node is a Node as the API server hands it to CEL.
func node(t *testing.T, name string, labels, annotations map[string]string, taints ...corev1.Taint) map[string]any {
	t.Helper()
	return asMap(t, corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{PodCIDR: "10.0.0.0/24", Taints: taints},
	})
}

// nodeEdited is node with edit applied to the typed Node first: an owner
// reference, a finalizer, a status.
func nodeEdited(t *testing.T, name string, labels map[string]string, edit func(*corev1.Node)) map[string]any {
	t.Helper()
	n := corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{PodCIDR: "10.0.0.0/24"},
	}
	edit(&n)
	return asMap(t, n)
}

// The attacks on a node's metadata and status besides its labels: each
// edits a Node as a PATCH by a stolen token would.
var (
	// ownedByNothing gives the node an owner that does not exist: the
	// garbage collector deletes the Node object.
	ownedByNothing = func(n *corev1.Node) {
		n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: "00000000-0000-0000-0000-000000000001"}}
	}
	// finalized blocks the Node's deletion.
	finalized      = func(n *corev1.Node) { n.Finalizers = []string{"example.com/block"} }
	generateNamed  = func(n *corev1.Node) { n.GenerateName = "x-" }
	gracePeriod    = func(n *corev1.Node) { n.DeletionGracePeriodSeconds = ptrTo(int64(0)) }
	statusReported = func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	}
)

func ptrTo[T any](v T) *T { return &v }

// nodeUpdate is the activation of an UPDATE of node old to new by user,
// whose token carries extra (nil: no extra at all, as a legacy token).
func nodeUpdate(user string, extra map[string][]string, old, new map[string]any) map[string]any {
	userInfo := map[string]any{"username": user}
	if extra != nil {
		ex := map[string]any{}
		for k, v := range extra {
			ex[k] = slices.Clone(v)
		}
		userInfo["extra"] = ex
	}
	return map[string]any{
		"object": new, "oldObject": old, "params": nil,
		"request": map[string]any{"operation": "UPDATE", "userInfo": userInfo},
	}
}

func TestNodeLabelPolicy(t *testing.T) {
	p := nodeLabelPolicy(t)
	const (
		own    = "may only label its own node"
		value  = "may only set the label " + supportsLabel + ` to "true" or remove it, not set it to `
		others = "may change only the label " + supportsLabel
		meta   = "may change only the label " + supportsLabel + " of a node, not "
		annot  = "may change only the annotations " + failClosedNote + " and " + reasonNote + ", not "
		reason = "may only set the annotation " + reasonNote + " to one of cgroup_v1, no_nsdelegate, host_unreadable, " +
			"unsafe_containers, not_configured, plugin_stopped, or remove it, not set it to "
		note   = "may only set the annotation " + failClosedNote + " to enforced, off or unknown, or remove it, not set it to "
		taints = "may not change a node's taints"
		spec   = "may not change a node's spec"
		status = "may not change a node's status"
	)
	base := map[string]string{"kubernetes.io/hostname": "a", "zone": "z1"}
	tokenA := map[string][]string{nodeNameExtra: {"a"}, "authentication.kubernetes.io/pod-name": {"cgdelegate-x"}}
	taint := corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name     string
		user     string
		extra    map[string][]string
		old, new map[string]any
		// want holds one substring per denial, in order; none: admitted.
		want []string
		// err: evaluating fails, which the API server, failing closed
		// (failurePolicy Fail), turns into a denial.
		err bool
	}{
		{
			name: "own node, label added", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", with(base, supportsLabel, "true"), nil),
		},
		{
			name: "own node, label changed to false", user: pluginUser, extra: tokenA,
			old: node(t, "a", with(base, supportsLabel, "true"), nil), new: node(t, "a", with(base, supportsLabel, "false"), nil),
			want: []string{value + `"false"`},
		},
		{
			name: "own node, label set to pwned", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", with(base, supportsLabel, "pwned"), nil),
			want: []string{value + `"pwned"`},
		},
		{
			name: "own node, label set to empty", user: pluginUser, extra: tokenA,
			old: node(t, "a", with(base, supportsLabel, "true"), nil), new: node(t, "a", with(base, supportsLabel, ""), nil),
			want: []string{value + `""`},
		},
		{
			name: "own node, another value left as it was", user: pluginUser, extra: tokenA,
			old: node(t, "a", with(base, supportsLabel, "false"), nil), new: node(t, "a", with(base, supportsLabel, "false"), nil),
		},
		{
			name: "own node, another value removed", user: pluginUser, extra: tokenA,
			old: node(t, "a", with(base, supportsLabel, "pwned"), nil), new: node(t, "a", base, nil),
		},
		{
			name: "own node, another value set to true", user: pluginUser, extra: tokenA,
			old: node(t, "a", with(base, supportsLabel, "pwned"), nil), new: node(t, "a", with(base, supportsLabel, "true"), nil),
		},
		{
			name: "own node, an owner reference to nothing", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: nodeEdited(t, "a", base, ownedByNothing),
			want: []string{meta + "metadata.ownerReferences"},
		},
		{
			name: "own node, label set with an owner reference", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: nodeEdited(t, "a", with(base, supportsLabel, "true"), ownedByNothing),
			want: []string{meta + "metadata.ownerReferences"},
		},
		{
			name: "own node, owner reference removed", user: pluginUser, extra: tokenA,
			old: nodeEdited(t, "a", base, ownedByNothing), new: node(t, "a", base, nil),
			want: []string{meta + "metadata.ownerReferences"},
		},
		{
			name: "own node, a finalizer", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: nodeEdited(t, "a", base, finalized),
			want: []string{meta + "metadata.finalizers"},
		},
		{
			name: "own node, generateName", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: nodeEdited(t, "a", base, generateNamed),
			want: []string{meta + "metadata.generateName"},
		},
		{
			name: "own node, deletionGracePeriodSeconds", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: nodeEdited(t, "a", base, gracePeriod),
			want: []string{meta + "metadata.deletionGracePeriodSeconds"},
		},
		{
			name: "own node, status", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: nodeEdited(t, "a", base, statusReported),
			want: []string{status},
		},
		{
			name: "own node, label set, owner, finalizer and annotation", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil),
			new: nodeEdited(t, "a", with(base, supportsLabel, "true"), func(n *corev1.Node) {
				ownedByNothing(n)
				finalized(n)
				n.Annotations = map[string]string{"x": "y"}
			}),
			want: []string{annot + "x", meta + "metadata.ownerReferences, metadata.finalizers"},
		},
		{
			name: "own node, label removed", user: pluginUser, extra: tokenA,
			old: node(t, "a", with(base, supportsLabel, "true"), nil), new: node(t, "a", base, nil),
		},
		{
			name: "own node, first label", user: pluginUser, extra: tokenA,
			old: node(t, "a", nil, nil), new: node(t, "a", map[string]string{supportsLabel: "true"}, nil),
		},
		{
			name: "own node, nothing changed", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{"x": "y"}, taint), new: node(t, "a", base, map[string]string{"x": "y"}, taint),
		},
		{
			name: "stolen token: node a's token labels node b", user: pluginUser, extra: tokenA,
			old: node(t, "b", base, nil), new: node(t, "b", with(base, supportsLabel, "true"), nil),
			want: []string{own + ": its token is for node 'a', not b"},
		},
		{
			name: "token without a node", user: pluginUser, extra: map[string][]string{},
			old: node(t, "a", base, nil), new: node(t, "a", with(base, supportsLabel, "true"), nil),
			want: []string{own + ": its token is for node '', not a"},
		},
		{
			name: "legacy token, no extra", user: pluginUser,
			old: node(t, "a", base, nil), new: node(t, "a", with(base, supportsLabel, "true"), nil),
			want: []string{own + ": its token is for node '', not a"},
		},
		{
			name: "token with an empty node list", user: pluginUser, extra: map[string][]string{nodeNameExtra: {}},
			old: node(t, "a", base, nil), new: node(t, "a", with(base, supportsLabel, "true"), nil),
			err: true,
		},
		{
			name: "own node, other label added", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", with(base, supportsLabel, "true", "node-role.kubernetes.io/control-plane", ""), nil),
			want: []string{others + ", not node-role.kubernetes.io/control-plane"},
		},
		{
			name: "own node, other label changed", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", with(base, "zone", "z2"), nil),
			want: []string{others + ", not zone"},
		},
		{
			name: "own node, other label removed", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", without(base, "zone"), nil),
			want: []string{others + ", not zone"},
		},
		{
			name: "own node, all labels removed", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", nil, nil),
			want: []string{others},
		},
		{
			name: "own node, annotation added", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{"x": "y"}),
			want: []string{annot + "x"},
		},
		{
			name: "own node, annotation changed", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{"x": "y"}), new: node(t, "a", base, map[string]string{"x": "z"}),
			want: []string{annot + "x"},
		},
		{
			name: "own node, label and fail-closed annotation set", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{"x": "y"}),
			new: node(t, "a", with(base, supportsLabel, "true"), map[string]string{"x": "y", failClosedNote: "off"}),
		},
		{
			name: "own node, fail-closed annotation alone, first annotation", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{failClosedNote: "unknown"}),
		},
		{
			name: "own node, fail-closed annotation changed", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{failClosedNote: "off"}), new: node(t, "a", base, map[string]string{failClosedNote: "enforced"}),
		},
		{
			name: "own node, label and fail-closed annotation removed", user: pluginUser, extra: tokenA,
			old: node(t, "a", with(base, supportsLabel, "true"), map[string]string{"x": "y", failClosedNote: "enforced"}),
			new: node(t, "a", base, map[string]string{"x": "y"}),
		},
		{
			name: "own node, fail-closed annotation set to pwned", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{failClosedNote: "pwned"}),
			want: []string{note + `"pwned"`},
		},
		{
			name: "own node, fail-closed annotation set to a value of the label", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{failClosedNote: "off"}), new: node(t, "a", base, map[string]string{failClosedNote: "true"}),
			want: []string{note + `"true"`},
		},
		{
			name: "own node, another fail-closed value left as it was", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{failClosedNote: "pwned"}), new: node(t, "a", with(base, supportsLabel, "true"), map[string]string{failClosedNote: "pwned"}),
		},
		{
			name: "own node, fail-closed annotation set with another annotation", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{failClosedNote: "off", "x": "y"}),
			want: []string{annot + "x"},
		},
		{
			name: "own node, another annotation removed with the fail-closed one", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{failClosedNote: "off", "x": "y"}), new: node(t, "a", base, nil),
			want: []string{annot + "x"},
		},
		{
			name: "own node, label removed with its reason, fail-closed kept", user: pluginUser, extra: tokenA,
			old: node(t, "a", with(base, supportsLabel, "true"), map[string]string{"x": "y", failClosedNote: "enforced"}),
			new: node(t, "a", base, map[string]string{"x": "y", failClosedNote: "enforced", reasonNote: "no_nsdelegate"}),
		},
		{
			name: "own node, reason changed", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{reasonNote: "not_configured"}), new: node(t, "a", base, map[string]string{reasonNote: "cgroup_v1"}),
		},
		{
			name: "own node, label set and reason removed", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{reasonNote: "no_nsdelegate"}), new: node(t, "a", with(base, supportsLabel, "true"), nil),
		},
		{
			name: "own node, plugin stopped: label and fail-closed removed, reason set", user: pluginUser, extra: tokenA,
			old: node(t, "a", with(base, supportsLabel, "true"), map[string]string{failClosedNote: "off"}),
			new: node(t, "a", base, map[string]string{reasonNote: "plugin_stopped"}),
		},
		{
			name: "own node, reason set to free text", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{reasonNote: "call +1-555-0100 for support"}),
			want: []string{reason + `"call +1-555-0100 for support"`},
		},
		{
			name: "own node, reason set to a fail-closed value", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{reasonNote: "no_nsdelegate"}), new: node(t, "a", base, map[string]string{reasonNote: "enforced"}),
			want: []string{reason + `"enforced"`},
		},
		{
			name: "own node, reason set to empty", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{reasonNote: ""}),
			want: []string{reason + `""`},
		},
		{
			name: "own node, another reason value left as it was", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{reasonNote: "pwned"}), new: node(t, "a", with(base, supportsLabel, "true"), map[string]string{reasonNote: "pwned"}),
		},
		{
			name: "own node, reason set with another annotation", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{reasonNote: "no_nsdelegate", "x": "y"}),
			want: []string{annot + "x"},
		},
		{
			name: "own node, another annotation removed with the reason", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, map[string]string{reasonNote: "no_nsdelegate", "x": "y"}), new: node(t, "a", base, nil),
			want: []string{annot + "x"},
		},
		{
			name: "own node, an annotation named like the reason", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{reasonNote + "s": "no_nsdelegate"}),
			want: []string{annot + reasonNote + "s"},
		},
		{
			name: "stolen token: node a's token sets node b's reason", user: pluginUser, extra: tokenA,
			old: node(t, "b", with(base, supportsLabel, "true"), nil), new: node(t, "b", base, map[string]string{reasonNote: "no_nsdelegate"}),
			want: []string{own + ": its token is for node 'a', not b"},
		},
		{
			name: "stolen token: node a's token removes node b's reason", user: pluginUser, extra: tokenA,
			old: node(t, "b", base, map[string]string{reasonNote: "no_nsdelegate"}), new: node(t, "b", base, nil),
			want: []string{own + ": its token is for node 'a', not b"},
		},
		{
			name: "stolen token: node a's token annotates node b", user: pluginUser, extra: tokenA,
			old: node(t, "b", base, nil), new: node(t, "b", base, map[string]string{failClosedNote: "enforced"}),
			want: []string{own + ": its token is for node 'a', not b"},
		},
		{
			name: "own node, taint added", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil), new: node(t, "a", base, nil, taint),
			want: []string{taints, spec},
		},
		{
			name: "own node, taint removed with the label", user: pluginUser, extra: tokenA,
			old: node(t, "a", base, nil, taint), new: node(t, "a", with(base, supportsLabel, "true"), nil),
			want: []string{taints, spec},
		},
		{
			name: "stolen token changing everything", user: pluginUser, extra: tokenA,
			old: node(t, "b", base, nil), new: node(t, "b", with(base, "zone", "z9"), map[string]string{"x": "y"}, taint),
			want: []string{own, others, annot, taints, spec},
		},
		{
			name: "stolen token labelling another node pwned with a finalizer", user: pluginUser, extra: tokenA,
			old: node(t, "b", base, nil), new: nodeEdited(t, "b", with(base, supportsLabel, "pwned"), finalized),
			want: []string{own, value, meta + "metadata.finalizers"},
		},
		{
			name: "another user is not matched", user: "system:node:a", extra: tokenA,
			old: node(t, "b", base, nil), new: node(t, "b", with(base, "zone", "z2"), map[string]string{"x": "y"}, taint),
		},
		{
			name: "another service account is not matched", user: "system:serviceaccount:other:cgdelegate", extra: nil,
			old: node(t, "b", base, nil), new: node(t, "b", with(base, "zone", "z2"), nil),
		},
		{
			name: "an admin is not matched", user: "kubernetes-admin", extra: nil,
			old: node(t, "a", base, nil), new: node(t, "a", nil, nil, taint),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.review(nodeUpdate(tc.user, tc.extra, tc.old, tc.new), nil)
			if tc.err {
				if err == nil {
					t.Fatalf("denials %q, want an evaluation error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantDenials(t, "", got, tc.want)
		})
	}
}

// The policy's matchCondition names the account the DaemonSet runs as, in
// the DaemonSet's namespace.
func TestNodeLabelPolicyNamesTheDaemonSetsAccount(t *testing.T) {
	m := loadManifest(t, nodeLabelPolicyFile)
	ds := decodeDaemonSet(t)
	want := "system:serviceaccount:" + ds.Namespace + ":" + ds.Spec.Template.Spec.ServiceAccountName
	if want != pluginUser {
		t.Fatalf("the DaemonSet runs as %s, the test expects %s", want, pluginUser)
	}
	if len(m.policies) != 1 || len(m.policies[0].Spec.MatchConditions) != 1 ||
		!strings.Contains(m.policies[0].Spec.MatchConditions[0].Expression, "'"+want+"'") {
		t.Errorf("%s: the matchCondition does not name %s", nodeLabelPolicyFile, want)
	}
}

func decodeDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	return only[appsv1.DaemonSet](t, daemonSetFile)
}

// Every reason the plugin writes is one the policy lets it set, and
// remove: the policy's list is status.Reasons.
func TestNodeLabelPolicyAllowsEveryReason(t *testing.T) {
	p := nodeLabelPolicy(t)
	base := map[string]string{"kubernetes.io/hostname": "a"}
	tokenA := map[string][]string{nodeNameExtra: {"a"}}
	for _, r := range status.Reasons {
		t.Run(string(r), func(t *testing.T) {
			set := node(t, "a", base, map[string]string{advert.ReasonAnnotation: string(r)})
			for _, step := range []struct{ old, new map[string]any }{
				{node(t, "a", with(base, advert.FeatureLabel, "true"), nil), set},
				{set, node(t, "a", with(base, advert.FeatureLabel, "true"), nil)},
			} {
				got, err := p.review(nodeUpdate(pluginUser, tokenA, step.old, step.new), nil)
				if err != nil {
					t.Fatal(err)
				}
				wantDenials(t, "", got, nil)
			}
		})
	}
}
