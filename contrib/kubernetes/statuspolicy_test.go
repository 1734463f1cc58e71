package kubernetes_test

import (
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const statusPolicyFile = "writable-cgroups-status-policy.yaml"

// statusPolicy loads the pods/status policy and checks its shape: failing
// closed, bound with Deny for everything, on UPDATE of pods/status only,
// with the same opt-in keys as the pod policy.
func statusPolicy(t *testing.T) policy {
	t.Helper()
	m := loadManifest(t, statusPolicyFile)
	if len(m.policies) != 1 || len(m.bindings) != 1 {
		t.Fatalf("%s: %d policies and %d bindings, want one each", statusPolicyFile, len(m.policies), len(m.bindings))
	}
	p, b := m.policies[0], m.bindings[0]
	s := p.Spec
	if s.FailurePolicy == nil || *s.FailurePolicy != admissionv1.Fail || s.ParamKind != nil {
		t.Errorf("policy %s: want failurePolicy Fail and no paramKind", p.Name)
	}
	rules := s.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].APIGroups, []string{""}) || !slices.Equal(rules[0].Resources, []string{"pods/status"}) ||
		!slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Update}) {
		t.Errorf("policy %s: want one rule, pods/status on UPDATE; got %+v", p.Name, rules)
	}
	if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		b.Spec.ParamRef != nil || b.Spec.MatchResources != nil {
		t.Errorf("binding %s %+v: want policy %s with validationActions [Deny] for everything", b.Name, b.Spec, p.Name)
	}
	pods := loadManifest(t, policyFile).policies[0]
	if optIn(t, p) != optIn(t, pods) {
		t.Errorf("policy %s: its optInKeys differ from %s's", p.Name, pods.Name)
	}
	return compilePolicy(t, p, true)
}

// optIn is the expression of a policy's variable optInKeys.
func optIn(t *testing.T, p admissionv1.ValidatingAdmissionPolicy) string {
	t.Helper()
	for _, v := range p.Spec.Variables {
		if v.Name == "optInKeys" {
			return v.Expression
		}
	}
	t.Fatalf("policy %s has no variable optInKeys", p.Name)
	return ""
}

// podWithStatus is pod with annotations ann in phase (and a Ready
// condition when ready), as a status update carries it.
func podWithStatus(t *testing.T, ann map[string]string, phase corev1.PodPhase, ready bool) map[string]any {
	t.Helper()
	p := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return asMap(t, p)
}

// An update of pods/status may not change a sandbox key of a pod that asks
// (as updated); the kubelet's status reports, which leave the annotations
// as they were, are not matched at all.
func TestStatusPolicy(t *testing.T) {
	p := statusPolicy(t)
	const (
		w        = "writable-cgroups.noderesource.dev"
		us       = `["cgdelegate"]`
		tolerate = "tolerate-missing-plugins.cgdelegate.io"
		through  = " was added, changed or removed through pods/status on a pod that asks for a writable cgroup"
	)
	asking := ann(w, "true", requiredPlugins, us)
	tests := []struct {
		name       string
		old, new   map[string]any
		want       []string
		notMatched bool
	}{
		{
			name: "opt-in added to a Pending pod", old: podWithStatus(t, nil, corev1.PodPending, false),
			new: podWithStatus(t, ann(w, "Writable"), corev1.PodPending, false), want: []string{"annotation " + w + through},
		},
		{
			name: "container opt-in added beside an unrelated one", old: podWithStatus(t, ann("x", "y", requiredPlugins, us), corev1.PodPending, false),
			new:  podWithStatus(t, ann("x", "z", w+"/container.app", "true", requiredPlugins, us), corev1.PodPending, false),
			want: []string{"annotation " + w + "/container.app" + through},
		},
		{
			name: "required-plugins removed from a pod that asks", old: podWithStatus(t, asking, corev1.PodRunning, true),
			new: podWithStatus(t, without(asking, requiredPlugins), corev1.PodRunning, true), want: []string{"annotation " + requiredPlugins + through},
		},
		{
			name: "toleration added to a pod that asks", old: podWithStatus(t, asking, corev1.PodRunning, true),
			new: podWithStatus(t, with(asking, tolerate+"/pod", "cgdelegate"), corev1.PodRunning, true), want: []string{"annotation " + tolerate + "/pod" + through},
		},
		{
			name: "opt-in removed: the pod no longer asks", old: podWithStatus(t, asking, corev1.PodPending, false),
			new: podWithStatus(t, ann(requiredPlugins, us), corev1.PodPending, false),
		},
		{
			name: "another annotation of a pod that asks", old: podWithStatus(t, asking, corev1.PodRunning, true),
			new: podWithStatus(t, with(asking, "example.com/x", "1"), corev1.PodRunning, true),
		},
		{
			name: "required-plugins of a pod that asks for nothing", old: podWithStatus(t, ann(requiredPlugins, `["other"]`), corev1.PodPending, false),
			new: podWithStatus(t, nil, corev1.PodPending, false),
		},
		{
			name: "the kubelet's report on a pod that asks", old: podWithStatus(t, asking, corev1.PodPending, false),
			new: podWithStatus(t, asking, corev1.PodRunning, true), notMatched: true,
		},
		{
			name: "the kubelet's report on a pod without annotations", old: podWithStatus(t, nil, corev1.PodPending, false),
			new: podWithStatus(t, nil, corev1.PodRunning, true), notMatched: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			act := map[string]any{
				"object": tc.new, "oldObject": tc.old, "params": nil,
				"request": map[string]any{"operation": "UPDATE", "subResource": "status"},
			}
			matched := true
			for _, m := range p.matches {
				out, _, err := m.Eval(act)
				if err != nil {
					t.Fatalf("matchCondition: %v", err)
				}
				matched = matched && out.Value() == true
			}
			if matched == tc.notMatched {
				t.Errorf("matched %v, want %v", matched, !tc.notMatched)
			}
			got, err := p.review(act, namespace(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			wantDenials(t, "", got, tc.want)
		})
	}
}

// classStatusPolicy is the pods/status policy rendered with the chart told
// of writable runtime classes (writableRuntimeClassesJSON): a pod naming
// one asks, as in the pod policies.
func classStatusPolicy(t *testing.T) policy {
	t.Helper()
	m := loadManifest(t, renderTemplate(t, statusPolicyFile, "--set-json", writableRuntimeClassesJSON))
	if len(m.policies) != 1 {
		t.Fatalf("%s rendered with %s: %d policies, want one", statusPolicyFile, writableRuntimeClassesJSON, len(m.policies))
	}
	return compilePolicy(t, m.policies[0], true)
}
