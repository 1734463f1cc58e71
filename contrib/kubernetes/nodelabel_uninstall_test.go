package kubernetes_test

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	uninstallPolicyFile = "node-label-uninstall-policy.yaml"
	uninstallUser       = "system:serviceaccount:kube-system:cgdelegate-uninstall"
)

// The uninstall account may only remove the label and the fail-closed
// annotation, from any node: the new labels and annotations are the old
// ones without them, and nothing else changes. No other
// user is matched.
func TestNodeLabelUninstallPolicy(t *testing.T) {
	p := nodePolicy(t, uninstallPolicyFile)
	const (
		notSet   = "may only remove the label " + supportsLabel + ": the updated node still has it"
		others   = "may change only the label " + supportsLabel
		meta     = "may change only the label " + supportsLabel + " of a node, not "
		annot    = "may change only the annotations " + failClosedNote + " and " + reasonNote + ", not "
		noteIn   = "may only remove the annotation " + failClosedNote + ": the updated node still has it"
		reasonIn = "may only remove the annotation " + reasonNote + ": the updated node still has it"
		taints   = "may not change a node's taints"
		spec     = "may not change a node's spec"
		status   = "may not change a node's status"
	)
	base := map[string]string{"kubernetes.io/hostname": "a", "zone": "z1"}
	labelled := with(base, supportsLabel, "true")
	taint := corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}
	// A Job's token names the node the Job's pod runs on, not the one it
	// changes: the policy does not look at it.
	jobToken := map[string][]string{nodeNameExtra: {"c"}}
	tests := []struct {
		name     string
		user     string
		extra    map[string][]string
		old, new map[string]any
		// want holds one substring per denial, in order; none: admitted.
		want []string
	}{
		{
			name: "removed from a node", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: node(t, "a", base, nil),
		},
		{
			name: "removed from another node", user: uninstallUser, extra: jobToken,
			old: node(t, "b", labelled, map[string]string{"x": "y"}, taint), new: node(t, "b", base, map[string]string{"x": "y"}, taint),
		},
		{
			name: "removed, value false (NFD's)", user: uninstallUser,
			old: node(t, "a", with(base, supportsLabel, "false"), nil), new: node(t, "a", base, nil),
		},
		{
			name: "removed, the only label", user: uninstallUser, extra: jobToken,
			old: node(t, "a", map[string]string{supportsLabel: "true"}, nil), new: node(t, "a", nil, nil),
		},
		{
			name: "already gone: the patch changes nothing", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, nil), new: node(t, "a", base, nil),
		},
		{
			name: "removed, an owner reference to nothing", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: nodeEdited(t, "a", base, ownedByNothing),
			want: []string{meta + "metadata.ownerReferences"},
		},
		{
			name: "an owner reference on any node", user: uninstallUser, extra: jobToken,
			old: node(t, "b", base, nil), new: nodeEdited(t, "b", base, ownedByNothing),
			want: []string{meta + "metadata.ownerReferences"},
		},
		{
			name: "a finalizer", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, nil), new: nodeEdited(t, "a", base, finalized),
			want: []string{meta + "metadata.finalizers"},
		},
		{
			name: "removed, generateName and grace period", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: nodeEdited(t, "a", base, func(n *corev1.Node) { generateNamed(n); gracePeriod(n) }),
			want: []string{meta + "metadata.generateName, metadata.deletionGracePeriodSeconds"},
		},
		{
			name: "status", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: nodeEdited(t, "a", base, statusReported),
			want: []string{status},
		},
		{
			name: "label set to pwned", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: node(t, "a", with(base, supportsLabel, "pwned"), nil),
			want: []string{notSet},
		},
		{
			name: "label added", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, nil), new: node(t, "a", labelled, nil),
			want: []string{notSet},
		},
		{
			name: "label added to a node without labels", user: uninstallUser, extra: jobToken,
			old: node(t, "a", nil, nil), new: node(t, "a", map[string]string{supportsLabel: "true"}, nil),
			want: []string{notSet},
		},
		{
			name: "label changed", user: uninstallUser, extra: jobToken,
			old: node(t, "a", with(base, supportsLabel, "false"), nil), new: node(t, "a", labelled, nil),
			want: []string{notSet},
		},
		{
			name: "label kept, other label changed", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: node(t, "a", with(labelled, "zone", "z2"), nil),
			want: []string{notSet, others + ", not zone"},
		},
		{
			name: "removed with another label", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: node(t, "a", map[string]string{"kubernetes.io/hostname": "a"}, nil),
			want: []string{others + ", not zone"},
		},
		{
			name: "removed, other label added", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: node(t, "a", with(base, "node-role.kubernetes.io/control-plane", ""), nil),
			want: []string{others + ", not node-role.kubernetes.io/control-plane"},
		},
		{
			name: "every label removed", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: node(t, "a", nil, nil),
			want: []string{others},
		},
		{
			name: "removed, annotation added", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil), new: node(t, "a", base, map[string]string{"x": "y"}),
			want: []string{annot + "x"},
		},
		{
			name: "annotation changed", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, map[string]string{"x": "y"}), new: node(t, "a", base, map[string]string{"x": "z"}),
			want: []string{annot + "x"},
		},
		{
			name: "label and fail-closed annotation removed", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, map[string]string{"x": "y", failClosedNote: "enforced"}), new: node(t, "a", base, map[string]string{"x": "y"}),
		},
		{
			name: "fail-closed annotation removed, no label", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, map[string]string{failClosedNote: "off"}), new: node(t, "a", base, nil),
		},
		{
			name: "label removed, fail-closed annotation left", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, map[string]string{failClosedNote: "off"}), new: node(t, "a", base, map[string]string{failClosedNote: "off"}),
			want: []string{noteIn},
		},
		{
			name: "fail-closed annotation set", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{failClosedNote: "enforced"}),
			want: []string{noteIn},
		},
		{
			name: "label and both annotations removed", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, map[string]string{"x": "y", failClosedNote: "enforced", reasonNote: "no_nsdelegate"}),
			new: node(t, "a", base, map[string]string{"x": "y"}),
		},
		{
			name: "reason annotation removed, no label", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, map[string]string{reasonNote: "plugin_stopped"}), new: node(t, "a", base, nil),
		},
		{
			name: "label removed, reason annotation left", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, map[string]string{reasonNote: "plugin_stopped"}), new: node(t, "a", base, map[string]string{reasonNote: "plugin_stopped"}),
			want: []string{reasonIn},
		},
		{
			name: "reason annotation set", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, nil), new: node(t, "a", base, map[string]string{reasonNote: "plugin_stopped"}),
			want: []string{reasonIn},
		},
		{
			name: "reason annotation changed", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, map[string]string{reasonNote: "no_nsdelegate"}), new: node(t, "a", base, map[string]string{reasonNote: "plugin_stopped"}),
			want: []string{reasonIn},
		},
		{
			name: "reason annotation removed with another", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, map[string]string{reasonNote: "plugin_stopped", "x": "y"}), new: node(t, "a", base, nil),
			want: []string{annot + "x"},
		},
		{
			name: "fail-closed annotation removed with another", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, map[string]string{failClosedNote: "off", "x": "y"}), new: node(t, "a", base, nil),
			want: []string{annot + "x"},
		},
		{
			name: "removed, taint removed", user: uninstallUser, extra: jobToken,
			old: node(t, "a", labelled, nil, taint), new: node(t, "a", base, nil),
			want: []string{taints, spec},
		},
		{
			name: "taint added", user: uninstallUser, extra: jobToken,
			old: node(t, "a", base, nil), new: node(t, "a", base, nil, taint),
			want: []string{taints, spec},
		},
		{
			name: "everything", user: uninstallUser,
			old: node(t, "b", base, nil), new: node(t, "b", with(base, "zone", "z9", supportsLabel, "true"), map[string]string{"x": "y"}, taint),
			want: []string{notSet, others, annot + "x", taints, spec},
		},
		{
			name: "the plugin's account is not matched", user: pluginUser, extra: map[string][]string{nodeNameExtra: {"a"}},
			old: node(t, "a", base, nil), new: node(t, "a", labelled, nil),
		},
		{
			name: "the same name in another namespace is not matched", user: "system:serviceaccount:other:cgdelegate-uninstall",
			old: node(t, "a", base, nil), new: node(t, "a", with(base, "zone", "z2"), nil),
		},
		{
			name: "an admin is not matched", user: "kubernetes-admin",
			old: node(t, "a", base, nil), new: node(t, "a", labelled, map[string]string{"x": "y"}, taint),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.review(nodeUpdate(tc.user, tc.extra, tc.old, tc.new), nil)
			if err != nil {
				t.Fatal(err)
			}
			wantDenials(t, "", got, tc.want)
		})
	}
}

// Each account is matched by its own policy only: the plugin's policy lets
// the uninstall account through (its RBAC and policy are its own), and
// the uninstall policy names that account.
func TestNodeLabelPoliciesAccounts(t *testing.T) {
	m := loadManifest(t, uninstallPolicyFile)
	if len(m.policies) != 1 || len(m.policies[0].Spec.MatchConditions) != 1 ||
		!strings.Contains(m.policies[0].Spec.MatchConditions[0].Expression, "'"+uninstallUser+"'") {
		t.Errorf("%s: the matchCondition does not name %s", uninstallPolicyFile, uninstallUser)
	}
	plugin := nodeLabelPolicy(t)
	got, err := plugin.review(nodeUpdate(uninstallUser, nil,
		node(t, "a", map[string]string{supportsLabel: "true"}, nil), node(t, "a", nil, nil)), nil)
	if err != nil || len(got) != 0 {
		t.Errorf("the plugin's policy on the uninstall account: %q, %v; want not matched", got, err)
	}
}

// uninstallHookPolicyFile is the hook copy of the uninstall policy; hooks
// are not in the plain manifests, so the test renders it.
const uninstallHookPolicyFile = "node-label-uninstall-hook-policy.yaml"

// The hook copy of the uninstall policy is the same policy, under its own
// name, created before the account (a lower weight) and deleted with it
// (the same delete policy), so that no path leaves the account without a
// policy: TestNodeLabelUninstallPolicy's table holds for it too.
func TestNodeLabelUninstallHookPolicy(t *testing.T) {
	plain, hook := loadManifest(t, uninstallPolicyFile), loadManifest(t, renderTemplate(t, uninstallHookPolicyFile))
	if len(hook.policies) != 1 || len(hook.bindings) != 1 {
		t.Fatalf("%s: %d policies and %d bindings, want one each", uninstallHookPolicyFile, len(hook.policies), len(hook.bindings))
	}
	p, b := hook.policies[0], hook.bindings[0]
	want := plain.policies[0].Name + "-hook"
	if p.Name != want || b.Name != want || b.Spec.PolicyName != want {
		t.Errorf("names %s, %s (policy %s), want %s", p.Name, b.Name, b.Spec.PolicyName, want)
	}
	if !reflect.DeepEqual(p.Spec, plain.policies[0].Spec) {
		t.Errorf("the hook policy's spec differs from %s's", uninstallPolicyFile)
	}
	wantBinding := plain.bindings[0].Spec
	wantBinding.PolicyName = want
	if !reflect.DeepEqual(b.Spec, wantBinding) {
		t.Errorf("the hook binding %+v, want %+v", b.Spec, wantBinding)
	}
	// The account's hooks: weight -10, the same delete policy.
	for _, m := range []metav1.ObjectMeta{p.ObjectMeta, b.ObjectMeta} {
		a := m.Annotations
		if a["helm.sh/hook"] != "pre-delete" || a["helm.sh/hook-weight"] != "-20" ||
			a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s: annotations %v, want a pre-delete hook of weight -20 (before the account's -10) deleted as the account is", m.Name, a)
		}
	}
}
