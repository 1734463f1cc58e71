package kubernetes_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/library"
)

const (
	namespaceLabelFile = "namespace-label-policy.yaml"
	// The permission the policy asks the authorizer for.
	labelGroup, labelResource, labelVerb = "cgdelegate.io", "namespaces", "allow-writable-cgroups"
)

// grants is a fake authorizer: it allows a user the verb on the resources
// listed for it, and records every question.
type grants struct {
	allowed map[string][]string // user -> "group/resource/name/verb"
	asked   []authorizer.Attributes
}

func (g *grants) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	g.asked = append(g.asked, a)
	key := a.GetAPIGroup() + "/" + a.GetResource() + "/" + a.GetName() + "/" + a.GetVerb()
	if a.IsResourceRequest() && a.GetNamespace() == "" && a.GetSubresource() == "" &&
		slices.Contains(g.allowed[a.GetUser().GetName()], key) {
		return authorizer.DecisionAllow, "granted", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// namespaceLabelPolicy loads the policy of namespace-label-policy.yaml and
// checks its shape: failing closed, bound with Deny for everything, on
// CREATE and UPDATE of namespaces and the two subresources that can change
// their metadata, beside a ClusterRole granting the verb the policy asks
// for and nothing else.
func namespaceLabelPolicy(t *testing.T, file string) (policy, []rbacv1.ClusterRoleBinding) {
	t.Helper()
	var (
		policies []admissionv1.ValidatingAdmissionPolicy
		bindings []admissionv1.ValidatingAdmissionPolicyBinding
		roles    []rbacv1.ClusterRole
		rbs      []rbacv1.ClusterRoleBinding
	)
	for _, obj := range decodeFile(t, file) {
		switch o := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			policies = append(policies, *o)
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			bindings = append(bindings, *o)
		case *rbacv1.ClusterRole:
			roles = append(roles, *o)
		case *rbacv1.ClusterRoleBinding:
			rbs = append(rbs, *o)
		default:
			t.Fatalf("%s: unexpected %T", file, obj)
		}
	}
	if len(policies) != 1 || len(bindings) != 1 || len(roles) != 1 {
		t.Fatalf("%s: %d policies, %d bindings, %d ClusterRoles; want one each", file, len(policies), len(bindings), len(roles))
	}
	p, b, r := policies[0], bindings[0], roles[0]
	s := p.Spec
	if s.FailurePolicy == nil || *s.FailurePolicy != admissionv1.Fail || s.ParamKind != nil {
		t.Errorf("policy %s: want failurePolicy Fail and no paramKind", p.Name)
	}
	rules := s.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].APIGroups, []string{""}) ||
		!slices.Equal(rules[0].Resources, []string{"namespaces", "namespaces/status", "namespaces/finalize"}) ||
		!slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("policy %s: want one rule, namespaces and their status and finalize on CREATE and UPDATE; got %+v", p.Name, rules)
	}
	if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		b.Spec.ParamRef != nil || b.Spec.MatchResources != nil {
		t.Errorf("binding %s %+v: want policy %s with validationActions [Deny] for everything", b.Name, b.Spec, p.Name)
	}
	if len(r.Rules) != 1 || !slices.Equal(r.Rules[0].APIGroups, []string{labelGroup}) || !slices.Equal(r.Rules[0].Resources, []string{labelResource}) ||
		!slices.Equal(r.Rules[0].Verbs, []string{labelVerb}) || len(r.Rules[0].ResourceNames) != 0 {
		t.Errorf("ClusterRole %s rules %+v: want verb %s on %s.%s only", r.Name, r.Rules, labelVerb, labelResource, labelGroup)
	}
	for _, rb := range rbs {
		if rb.RoleRef.Name != r.Name || rb.RoleRef.Kind != "ClusterRole" {
			t.Errorf("ClusterRoleBinding %s binds %+v, want ClusterRole %s", rb.Name, rb.RoleRef, r.Name)
		}
	}
	return compilePolicy(t, p, true), rbs
}

// nsReview is the activation of a CREATE (old nil) or UPDATE of a
// namespace by user, whose rights are g's.
func nsReview(user string, g *grants, old, new map[string]any) map[string]any {
	op := "UPDATE"
	if old == nil {
		op = "CREATE"
	}
	return map[string]any{
		"object": new, "oldObject": old, "params": nil,
		"request":    map[string]any{"operation": op, "userInfo": map[string]any{"username": user}},
		"authorizer": authorizerOf(user, g),
	}
}

func authorizerOf(name string, g *grants) any {
	return library.NewAuthorizerVal(&user.DefaultInfo{Name: name}, g)
}

// Only a user the authorizer allows may add, change or remove the label:
// a tenant with patch on its own namespace is refused, a platform team
// bound to the ClusterRole is not, and nothing else about a namespace is
// judged.
func TestNamespaceLabelPolicy(t *testing.T) {
	p, rbs := namespaceLabelPolicy(t, namespaceLabelFile)
	if len(rbs) != 0 {
		t.Errorf("the defaults bind the ClusterRole to %+v, want nobody", rbs)
	}
	const (
		tenant   = "alice"
		platform = "platform-bot"
		refused  = "user alice may not add, change or remove the label " + nsLabel + " of namespace team"
	)
	allowed := map[string]string{nsLabel: "allowed"}
	other := map[string]string{"team": "a"}
	tests := []struct {
		name     string
		user     string
		old, new map[string]string
		create   bool
		// want holds one substring per denial; none: admitted. asked:
		// the policy consulted the authorizer (the request touched the
		// label).
		want  []string
		asked bool
	}{
		{name: "tenant adds the label", user: tenant, old: other, new: with(other, nsLabel, "allowed"), want: []string{refused}, asked: true},
		{name: "tenant adds the label to a bare namespace", user: tenant, new: allowed, want: []string{refused}, asked: true},
		{name: "tenant changes its value", user: tenant, old: allowed, new: map[string]string{nsLabel: "no"}, want: []string{refused}, asked: true},
		{name: "tenant turns another value into allowed", user: tenant, old: map[string]string{nsLabel: "no"}, new: allowed, want: []string{refused}, asked: true},
		{name: "tenant removes it (revocation is an admin's)", user: tenant, old: with(other, nsLabel, "allowed"), new: other, want: []string{refused}, asked: true},
		{name: "tenant creates a namespace with it", user: tenant, create: true, new: allowed, want: []string{refused}, asked: true},
		{name: "tenant creates a namespace with another value", user: tenant, create: true, new: map[string]string{nsLabel: ""}, want: []string{refused}, asked: true},
		{name: "platform team adds it", user: platform, old: other, new: with(other, nsLabel, "allowed"), asked: true},
		{name: "platform team removes it", user: platform, old: allowed, new: nil, asked: true},
		{name: "platform team creates a namespace with it", user: platform, create: true, new: allowed, asked: true},
		{name: "tenant changes other labels, the label kept", user: tenant, old: with(other, nsLabel, "allowed"), new: map[string]string{nsLabel: "allowed", "x": "y"}},
		{name: "tenant changes other labels, no label", user: tenant, old: other, new: map[string]string{"x": "y"}},
		{name: "tenant creates a namespace without it", user: tenant, create: true, new: other},
		{name: "tenant creates a bare namespace", user: tenant, create: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &grants{allowed: map[string][]string{platform: {labelGroup + "/" + labelResource + "/team/" + labelVerb}}}
			var old map[string]any
			if !tc.create {
				old = namespace(t, tc.old)
			}
			got, err := p.review(nsReview(tc.user, g, old, namespace(t, tc.new)), nil)
			if err != nil {
				t.Fatal(err)
			}
			wantDenials(t, "", got, tc.want)
			if asked := len(g.asked) > 0; asked != tc.asked {
				t.Errorf("the authorizer was asked %d times, want asked=%v: a request that does not touch the label must not be judged", len(g.asked), tc.asked)
			}
			for _, a := range g.asked {
				if a.GetAPIGroup() != labelGroup || a.GetResource() != labelResource || a.GetVerb() != labelVerb ||
					a.GetName() != "team" || a.GetNamespace() != "" || a.GetSubresource() != "" {
					t.Errorf("asked the authorizer for %+v, want verb %s on %s.%s named team, cluster-scoped", a, labelVerb, labelResource, labelGroup)
				}
			}
		})
	}
}

// The chart value admissionPolicy.namespaceLabel binds the ClusterRole to
// its users and groups.
func TestNamespaceLabelSubjects(t *testing.T) {
	_, rbs := namespaceLabelPolicy(t, renderTemplate(t, namespaceLabelFile,
		"--set-json", `admissionPolicy.namespaceLabel={"users":["platform-bot"],"groups":["platform"]}`))
	if len(rbs) != 1 {
		t.Fatalf("%d ClusterRoleBindings, want one", len(rbs))
	}
	want := []rbacv1.Subject{
		{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "platform-bot"},
		{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "platform"},
	}
	if !slices.Equal(rbs[0].Subjects, want) {
		t.Errorf("subjects %+v, want %+v", rbs[0].Subjects, want)
	}
}

// A namespace CREATE or UPDATE that leaves the label as it was (absent, or
// the same value) is never refused, by any user: random label sets with
// and without the label, its values among them.
func TestNamespaceLabelNeverRefusesWhatDoesNotTouchIt(t *testing.T) {
	p, _ := namespaceLabelPolicy(t, namespaceLabelFile)
	keys := []string{nsLabel, "team", "kubernetes.io/metadata.name", "pod-security.kubernetes.io/enforce", nsLabel + "-x", "x/" + nsLabel}
	values := []string{"allowed", "", "no", "Allowed", "team"}
	rng := rand.New(rand.NewPCG(3, 4))
	draw := func() map[string]string {
		l := map[string]string{}
		for range rng.IntN(4) {
			l[keys[rng.IntN(len(keys))]] = values[rng.IntN(len(values))]
		}
		return l
	}
	kept := 0
	for range 2000 {
		old, updated := draw(), draw()
		// The label as it was: copied over, or absent from both.
		if v, ok := old[nsLabel]; ok && rng.IntN(2) == 0 {
			updated[nsLabel] = v
			kept++
		} else {
			delete(old, nsLabel)
			delete(updated, nsLabel)
		}
		g := &grants{}
		got, err := p.review(nsReview("alice", g, namespace(t, old), namespace(t, updated)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 || len(g.asked) != 0 {
			t.Fatalf("UPDATE %v to %v, label untouched: refused %q, authorizer asked %d times", old, updated, got, len(g.asked))
		}
		if _, ok := updated[nsLabel]; !ok {
			got, err := p.review(nsReview("alice", g, nil, namespace(t, updated)), nil)
			if err != nil || len(got) != 0 {
				t.Fatalf("CREATE %v without the label: refused %q, %v", updated, got, err)
			}
		}
	}
	if kept < 200 {
		t.Fatalf("only %d draws kept the label; the generator is off", kept)
	}
}
