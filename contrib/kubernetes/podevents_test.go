package kubernetes_test

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgdelegate/cgdelegate/internal/advert"
)

const (
	podEventsPolicyFile = "pod-events-policy.yaml"
	podEventsRBACFile   = "pod-events-rbac.yaml"
)

// podEventsPolicy loads and compiles the pod-events policy and checks its
// shape: failing closed, bound with Deny for every object, matching CREATE
// of events.k8s.io/v1 events only, by the plugin's account.
func podEventsPolicy(t *testing.T) policy {
	t.Helper()
	m := loadManifest(t, podEventsPolicyFile)
	if len(m.policies) != 1 || len(m.bindings) != 1 {
		t.Fatalf("%s: %d policies and %d bindings, want one each", podEventsPolicyFile, len(m.policies), len(m.bindings))
	}
	p, b := m.policies[0], m.bindings[0]
	s := p.Spec
	if s.FailurePolicy == nil || *s.FailurePolicy != admissionv1.Fail || s.ParamKind != nil {
		t.Errorf("policy %s: want failurePolicy Fail and no paramKind", p.Name)
	}
	rules := s.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].APIGroups, []string{"events.k8s.io"}) || !slices.Equal(rules[0].APIVersions, []string{"v1"}) ||
		!slices.Equal(rules[0].Resources, []string{"events"}) || !slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create}) {
		t.Errorf("policy %s: want one rule, events.k8s.io/v1 events on CREATE; got %+v", p.Name, rules)
	}
	if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		b.Spec.ParamRef != nil || b.Spec.MatchResources != nil {
		t.Errorf("binding %s %+v: want policy %s with validationActions [Deny] for everything", b.Name, b.Spec, p.Name)
	}
	if len(s.MatchConditions) != 1 || !strings.Contains(s.MatchConditions[0].Expression, pluginUser) {
		t.Errorf("policy %s: matchConditions %+v, want one selecting %s", p.Name, s.MatchConditions, pluginUser)
	}
	// The policy lists the reasons the plugin posts, no more, no less.
	i := slices.IndexFunc(s.Variables, func(v admissionv1.Variable) bool { return v.Name == "reasons" })
	if i < 0 {
		t.Fatalf("policy %s: no variable reasons", p.Name)
	}
	want := "['" + strings.Join(advert.EventReasons, "', '") + "']"
	if s.Variables[i].Expression != want {
		t.Errorf("policy %s: reasons %s, want advert.EventReasons %s", p.Name, s.Variables[i].Expression, want)
	}
	j := slices.IndexFunc(s.Variables, func(v admissionv1.Variable) bool { return v.Name == "actions" })
	if want := "['" + strings.Join(advert.EventActions, "', '") + "']"; j < 0 || s.Variables[j].Expression != want {
		t.Errorf("policy %s: no variable actions %s (advert.EventActions)", p.Name, want)
	}
	return compilePolicy(t, p, false)
}

// pluginEvent is an Event as the plugin posts it (advert.EventPoster), on
// pod team-a/web-1 from node.
func pluginEvent(node string) eventsv1.Event {
	return eventsv1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: "events.k8s.io/v1", Kind: "Event"},
		ObjectMeta:          metav1.ObjectMeta{Name: "web-1.18a", Namespace: "team-a"},
		EventTime:           metav1.NowMicro(),
		ReportingController: advert.EventController,
		ReportingInstance:   node,
		Action:              "CheckHost",
		Reason:              advert.ReasonHostUnsafe,
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "team-a", Name: "web-1", UID: "u-1"},
		Note:                "container app: runs on a host no longer safe",
		Type:                corev1.EventTypeWarning,
	}
}

// eventCreate is the activation of a CREATE of ev by user, whose token
// carries extra (nil: no extra at all, as a legacy token).
func eventCreate(t *testing.T, user string, extra map[string][]string, ev eventsv1.Event) map[string]any {
	t.Helper()
	act := nodeUpdate(user, extra, nil, asMap(t, ev))
	act["request"].(map[string]any)["operation"] = "CREATE"
	return act
}

// TestPodEventsPolicy plays the Events a token stolen from node-a could
// create with the account's right to create Events: only the plugin's own
// Events of node-a are admitted.
func TestPodEventsPolicy(t *testing.T) {
	p := podEventsPolicy(t)
	onA := map[string][]string{nodeNameExtra: {"node-a"}}
	tests := []struct {
		name  string
		user  string
		extra map[string][]string
		edit  func(*eventsv1.Event)
		// denied: a part of the message of the refusal; "" admits.
		denied string
	}{
		{name: "the plugin's Event", extra: onA},
		{name: "each reason", extra: onA, edit: func(e *eventsv1.Event) { e.Reason = advert.ReasonDelegationMissed; e.Action = "Audit" }},
		{name: "pinning given up", extra: onA, edit: func(e *eventsv1.Event) { e.Reason = advert.ReasonPinningUpdateFailed; e.Action = "UpdateContainer" }},
		{name: "another user is not matched", user: "system:serviceaccount:kube-system:other", extra: onA, edit: func(e *eventsv1.Event) { e.Reason = "Killing" }},
		{name: "as another node", extra: onA, edit: func(e *eventsv1.Event) { e.ReportingInstance = "node-b" }, denied: "only post Events as its own node: its token is for node 'node-a', not 'node-b'"},
		{name: "a token without a node", extra: map[string][]string{}, denied: "as its own node"},
		{name: "a legacy token", extra: nil, denied: "as its own node"},
		{name: "as the kubelet", extra: onA, edit: func(e *eventsv1.Event) { e.ReportingController = "kubelet" }, denied: "reported by cgdelegate.io/plugin"},
		{name: "regarding a Node", extra: onA, edit: func(e *eventsv1.Event) {
			e.Regarding = corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "node-b"}
		}, denied: "regarding a Pod"},
		{name: "regarding a Deployment", extra: onA, edit: func(e *eventsv1.Event) {
			e.Regarding = corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: "web"}
		}, denied: "regarding a Pod"},
		{name: "regarding a Pod of another namespace", extra: onA, edit: func(e *eventsv1.Event) { e.Regarding.Namespace = "kube-system" }, denied: "regarding a Pod"},
		{name: "another reason", extra: onA, edit: func(e *eventsv1.Event) { e.Reason = "OOMKilling" }, denied: "not 'OOMKilling'"},
		{name: "another action", extra: onA, edit: func(e *eventsv1.Event) { e.Action = "Evict" }, denied: "actions"},
		{name: "type Normal", extra: onA, edit: func(e *eventsv1.Event) { e.Type = corev1.EventTypeNormal }, denied: "type Warning"},
		{name: "a related object", extra: onA, edit: func(e *eventsv1.Event) {
			e.Related = &corev1.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: "kube-system", Name: "x"}
		}, denied: "related object"},
		{name: "a series", extra: onA, edit: func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 1000, LastObservedTime: metav1.NowMicro()}
		}, denied: "series"},
		{name: "the kubelet as deprecated source", extra: onA, edit: func(e *eventsv1.Event) {
			e.DeprecatedSource = corev1.EventSource{Component: "kubelet", Host: "node-b"}
		}, denied: "deprecated"},
		{name: "a label", extra: onA, edit: func(e *eventsv1.Event) { e.Labels = map[string]string{"a": "b"} }, denied: "labels"},
		{name: "an owner", extra: onA, edit: func(e *eventsv1.Event) {
			e.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web-1", UID: "u-1"}}
		}, denied: "owner references"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := pluginEvent("node-a")
			if tc.edit != nil {
				tc.edit(&ev)
			}
			user := tc.user
			if user == "" {
				user = pluginUser
			}
			denied, err := p.review(eventCreate(t, user, tc.extra, ev), nil)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.denied == "" && len(denied) > 0:
				t.Fatalf("refused: %q", denied)
			case tc.denied != "" && !slices.ContainsFunc(denied, func(m string) bool { return strings.Contains(m, tc.denied) }):
				t.Fatalf("refusals %q, want one saying %q", denied, tc.denied)
			}
		})
	}
}

// TestPodEventsRBAC: the account may create events.k8s.io Events and do
// nothing else with them, through one ClusterRole bound to it alone.
func TestPodEventsRBAC(t *testing.T) {
	var (
		role    *rbacv1.ClusterRole
		binding *rbacv1.ClusterRoleBinding
	)
	for _, obj := range decodeFile(t, podEventsRBACFile) {
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			role = o
		case *rbacv1.ClusterRoleBinding:
			binding = o
		default:
			t.Fatalf("%s: unexpected %T", podEventsRBACFile, obj)
		}
	}
	if role == nil || binding == nil {
		t.Fatalf("%s: want a ClusterRole and a ClusterRoleBinding", podEventsRBACFile)
	}
	r := role.Rules
	if len(r) != 1 || !slices.Equal(r[0].APIGroups, []string{"events.k8s.io"}) || !slices.Equal(r[0].Resources, []string{"events"}) ||
		!slices.Equal(r[0].Verbs, []string{"create"}) || len(r[0].ResourceNames) != 0 || len(r[0].NonResourceURLs) != 0 || role.AggregationRule != nil {
		t.Errorf("ClusterRole %s rules %+v, want only create on events.k8s.io events", role.Name, r)
	}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}) {
		t.Errorf("ClusterRoleBinding %s roleRef %+v, want ClusterRole %s", binding.Name, binding.RoleRef, role.Name)
	}
	want := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "cgdelegate", Namespace: "kube-system"}
	if len(binding.Subjects) != 1 || binding.Subjects[0] != want {
		t.Errorf("ClusterRoleBinding %s subjects %+v, want only %+v", binding.Name, binding.Subjects, want)
	}
}
