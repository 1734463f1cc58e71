package kubernetes_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
)

const (
	policyFile = "writable-cgroups-policy.yaml"
	usernsFile = "writable-cgroups-userns-policy.yaml"

	nsLabel         = "cgdelegate.io/writable-cgroups"
	requiredPlugins = "required-plugins.noderesource.dev"
)

// manifest is one file's admission objects.
type manifest struct {
	policies []admissionv1.ValidatingAdmissionPolicy
	bindings []admissionv1.ValidatingAdmissionPolicyBinding
}

// loadManifest decodes every document of path strictly: a misspelt field
// fails the test instead of being dropped.
func loadManifest(t *testing.T, path string) manifest {
	t.Helper()
	var m manifest
	for _, obj := range decodeFile(t, path) {
		switch o := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			m.policies = append(m.policies, *o)
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			m.bindings = append(m.bindings, *o)
		default:
			t.Fatalf("%s: unexpected %T", path, obj)
		}
	}
	return m
}

// celEnv declares what the API server gives validation and message
// expressions, plus the cel-go strings extension Kubernetes enables (join)
// and its authorizer library (the authorizer variable: a test that uses it
// puts authorizerOf's value in the activation). Match conditions get
// neither namespaceObject nor variables.
func celEnv(t *testing.T, matchCondition bool) *cel.Env {
	t.Helper()
	opts := []cel.EnvOption{
		cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType),
		cel.Variable("params", cel.DynType),
		cel.Variable("authorizer", library.AuthorizerType),
		ext.Strings(),
		library.Authz(),
	}
	if !matchCondition {
		opts = append(opts,
			cel.Variable("namespaceObject", cel.DynType),
			cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
		)
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func compile(t *testing.T, env *cel.Env, what, expr string) cel.Program {
	t.Helper()
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("%s: %v", what, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return prg
}

type variable struct {
	name string
	prg  cel.Program
}

type validation struct {
	expr, message cel.Program
	// staticMessage is the message, for a validation without
	// messageExpression.
	staticMessage string
}

// policy is a ValidatingAdmissionPolicy with every expression compiled.
// Every validation has a message; the writable-cgroups policies also a
// messageExpression (compilePolicy with wantMessageExpressions).
type policy struct {
	name string
	// operations are those the policy's resource rules match; a request
	// of another operation is not matched.
	operations  []string
	matches     []cel.Program
	variables   []variable
	validations []validation
}

func compilePolicy(t *testing.T, p admissionv1.ValidatingAdmissionPolicy, wantMessageExpressions bool) policy {
	t.Helper()
	env, matchEnv := celEnv(t, false), celEnv(t, true)
	c := policy{name: p.Name}
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		for _, op := range r.Operations {
			c.operations = append(c.operations, string(op))
		}
	}
	for _, m := range p.Spec.MatchConditions {
		c.matches = append(c.matches, compile(t, matchEnv, p.Name+" matchCondition "+m.Name, m.Expression))
	}
	for _, v := range p.Spec.Variables {
		c.variables = append(c.variables, variable{v.Name, compile(t, env, p.Name+" variable "+v.Name, v.Expression)})
	}
	for i, v := range p.Spec.Validations {
		what := fmt.Sprintf("%s validation %d", p.Name, i)
		if v.Message == "" || (wantMessageExpressions && v.MessageExpression == "") {
			t.Fatalf("%s: wants a message and a messageExpression", what)
		}
		c.validations = append(c.validations, validation{expr: compile(t, env, what, v.Expression), staticMessage: v.Message})
		if v.MessageExpression != "" {
			c.validations[i].message = compile(t, env, what+" messageExpression", v.MessageExpression)
		}
	}
	return c
}

// admit evaluates the policy the way the API server does for a pod CREATE
// in namespace ns and returns the messages of the failed validations (none:
// admitted).
func (p policy) admit(pod, ns map[string]any) ([]string, error) {
	return p.review(map[string]any{
		"object": pod, "oldObject": nil, "params": nil,
		"request": map[string]any{"operation": "CREATE"},
	}, ns)
}

// review evaluates the policy on the activation act (object, oldObject,
// request, params) and returns the messages of the failed validations;
// none: admitted, or not matched (by the rules' operations or the match
// conditions). Variables are evaluated eagerly, so one that fails on some
// request fails the test even where the API server would not have needed
// it.
func (p policy) review(act map[string]any, ns map[string]any) ([]string, error) {
	req, _ := act["request"].(map[string]any)
	if op, _ := req["operation"].(string); !slices.Contains(p.operations, op) && !slices.Contains(p.operations, "*") {
		return nil, nil
	}
	for _, m := range p.matches {
		out, _, err := m.Eval(act)
		if err != nil {
			return nil, fmt.Errorf("matchCondition: %w", err)
		}
		if out.Value() != true {
			return nil, nil
		}
	}
	vars := map[string]any{}
	act["namespaceObject"], act["variables"] = ns, vars
	for _, v := range p.variables {
		out, _, err := v.prg.Eval(act)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.name, err)
		}
		vars[v.name] = out
	}
	var denied []string
	for i, v := range p.validations {
		out, _, err := v.expr.Eval(act)
		if err != nil {
			return nil, fmt.Errorf("validation %d: %w", i, err)
		}
		if out.Value() == true {
			continue
		}
		if v.message == nil {
			denied = append(denied, v.staticMessage)
			continue
		}
		msg, _, err := v.message.Eval(act)
		if err != nil {
			return nil, fmt.Errorf("validation %d messageExpression: %w", i, err)
		}
		s, ok := msg.Value().(string)
		if !ok {
			return nil, fmt.Errorf("validation %d messageExpression: %T, want string", i, msg.Value())
		}
		denied = append(denied, s)
	}
	return denied, nil
}

// update evaluates the policy the way the API server does for an UPDATE
// of pod old to new in namespace ns.
func (p policy) update(old, new, ns map[string]any) ([]string, error) {
	return p.review(map[string]any{
		"object": new, "oldObject": old, "params": nil,
		"request": map[string]any{"operation": "UPDATE"},
	}, ns)
}

// asMap turns a typed object into what the API server hands CEL: its JSON.
func asMap(t *testing.T, obj any) map[string]any {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func pod(t *testing.T, ann map[string]string, hostUsers *bool) map[string]any {
	t.Helper()
	return asMap(t, corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", Annotations: ann},
		Spec: corev1.PodSpec{
			HostUsers:  hostUsers,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
		},
	})
}

func namespace(t *testing.T, labels map[string]string) map[string]any {
	t.Helper()
	return namespaceNamed(t, "team", labels)
}

func namespaceNamed(t *testing.T, name string, labels map[string]string) map[string]any {
	t.Helper()
	return asMap(t, corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	})
}

// policies loads and compiles the base policy and the user-namespace one.
func policies(t *testing.T) (base, userns policy) {
	t.Helper()
	b, u := loadManifest(t, policyFile), loadManifest(t, usernsFile)
	if len(b.policies) != 1 || len(u.policies) != 1 {
		t.Fatalf("want one policy per file, got %d and %d", len(b.policies), len(u.policies))
	}
	return compilePolicy(t, b.policies[0], true), compilePolicy(t, u.policies[0], true)
}

// writableClass is the RuntimeClass the chart is told makes containers
// writable (admissionPolicy.writableRuntimeClasses) in the runtime-class
// tests, beside a second one.
const writableClass = "runc-writable"

var (
	classPoliciesOnce          sync.Once
	classBase, classUserns     policy
	classPoliciesErr           string
	writableRuntimeClassesJSON = `admissionPolicy.writableRuntimeClasses=["` + writableClass + `","kata.rw"]`
)

// classPolicies are the base policy and the user-namespace one rendered
// from the chart with writableClass and kata.rw in
// admissionPolicy.writableRuntimeClasses (go tool helm, once per run).
func classPolicies(t *testing.T) (base, userns policy) {
	t.Helper()
	classPoliciesOnce.Do(func() {
		var ps []policy
		var asking [][]admissionv1.Variable
		for _, f := range []struct {
			file string
			args []string
		}{
			{policyFile, []string{"--set-json", writableRuntimeClassesJSON}},
			{usernsFile, []string{"--set-json", writableRuntimeClassesJSON, "--set", "admissionPolicy.requireUserNamespace=true"}},
		} {
			m := loadManifest(t, renderTemplate(t, f.file, f.args...))
			if len(m.policies) != 1 {
				classPoliciesErr = fmt.Sprintf("%s: %d policies, want one", f.file, len(m.policies))
				return
			}
			if v := m.policies[0].Spec.Variables; len(v) >= len(askVariables) {
				asking = append(asking, v[:len(askVariables)])
			}
			ps = append(ps, compilePolicy(t, m.policies[0], true))
		}
		if len(asking) != 2 || !slices.Equal(asking[0], asking[1]) {
			classPoliciesErr = fmt.Sprintf("rendered with %s, the variables %v of %s and %s differ", writableRuntimeClassesJSON, askVariables, policyFile, usernsFile)
			return
		}
		classBase, classUserns = ps[0], ps[1]
	})
	if classPoliciesErr != "" {
		t.Fatal(classPoliciesErr)
	}
	if classBase.name == "" {
		t.Fatal("the chart with admissionPolicy.writableRuntimeClasses did not render (see the first test that tried)")
	}
	return classBase, classUserns
}

// withRuntimeClass returns pod p with spec.runtimeClassName set to class
// ("": left unset).
func withRuntimeClass(p map[string]any, class string) map[string]any {
	if class != "" {
		p["spec"].(map[string]any)["runtimeClassName"] = class
	}
	return p
}

func ann(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// with returns a copy of m with the key-value pairs kv set.
func with(m map[string]string, kv ...string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// without returns a copy of m without key k.
func without(m map[string]string, k string) map[string]string {
	out := maps.Clone(m)
	delete(out, k)
	return out
}

// wantDenials fails unless got has one denial for each of want, in order,
// each containing its text; who names the policy in the messages ("" for
// none).
func wantDenials(t *testing.T, who string, got, want []string) {
	t.Helper()
	if who != "" {
		who += ": "
	}
	if len(got) != len(want) {
		t.Fatalf("%sdenials %q, want %d matching %q", who, got, len(want), want)
	}
	for i := range got {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("%sdenial %q does not name %q", who, got[i], want[i])
		}
	}
}

func TestPolicyAdmission(t *testing.T) {
	base, userns := policies(t)
	const (
		w      = "writable-cgroups.noderesource.dev"
		us     = `["cgdelegate"]`
		nsNot  = "is not labelled cgdelegate.io/writable-cgroups=allowed"
		noReq  = `must also carry the annotation required-plugins.noderesource.dev: ["cgdelegate"]`
		badReq = "does not list cgdelegate"
		noNS   = "allows only in a user namespace: set spec.hostUsers: false"

		tolerate = "tolerate-missing-plugins.cgdelegate.io"
	)
	allowed := map[string]string{nsLabel: "allowed"}
	tr, fa := true, false
	tests := []struct {
		name      string
		labels    map[string]string
		ann       map[string]string
		hostUsers *bool
		// wantBase and wantUserns hold one substring per denial, in
		// order; none means admitted.
		wantBase, wantUserns []string
	}{
		// Pods that do not ask are always admitted.
		{name: "no annotations"},
		{name: "unrelated annotations", ann: ann("example.com/x", "true", requiredPlugins, `["other"]`)},
		{name: "ReadOnly", ann: ann(w, "ReadOnly")},
		{name: "false, pod scope", ann: ann(w+"/pod", "false")},
		{name: "false, container scope, spaces", ann: ann(w+"/container.app", " false ")},
		{name: "CRI-O false", ann: ann(annotations.CRIOWritable.Name, "false")},
		{name: "nri.io false", ann: ann("writable-cgroups.nri.io/enable", "false")},
		{name: "lookalike key", ann: ann(w+"x", "true", w+"/podx", "true", "x."+w, "true")},

		// Pods that ask, where everything is in place.
		{name: "allowed", labels: allowed, ann: ann(w, "true", requiredPlugins, us), hostUsers: &fa},
		{name: "allowed, Writable, pod-scoped required-plugins", labels: allowed, ann: ann(w+"/pod", "Writable", requiredPlugins+"/pod", us), hostUsers: &fa},
		{name: "allowed, other plugins too", labels: allowed, ann: ann(w, "true", requiredPlugins, `[other, "cgdelegate", b.c-d_e]`), hostUsers: &fa},
		{name: "allowed, unquoted, spaces", labels: allowed, ann: ann(w, "true", requiredPlugins, ` [ cgdelegate ] `), hostUsers: &fa},
		{
			name: "allowed, container-scoped required-plugins listing us", labels: allowed,
			ann: ann(w, "true", requiredPlugins, us, requiredPlugins+"/container.app", `["x", "cgdelegate"]`), hostUsers: &fa,
		},
		{name: "host users: only the user-namespace policy denies", labels: allowed, ann: ann(w, "true", requiredPlugins, us), wantUserns: []string{noNS}},
		{name: "hostUsers true", labels: allowed, ann: ann(w, "true", requiredPlugins, us), hostUsers: &tr, wantUserns: []string{noNS}},

		// Pods that ask, denied.
		{name: "namespace not labelled", ann: ann(w, "true", requiredPlugins, us), hostUsers: &fa, wantBase: []string{"annotation " + w + " asks for a writable cgroup, but namespace team " + nsNot}},
		{name: "namespace label other value", labels: map[string]string{nsLabel: "yes"}, ann: ann(w, "true", requiredPlugins, us), hostUsers: &fa, wantBase: []string{nsNot}},
		{name: "namespace other labels", labels: map[string]string{"team": "a"}, ann: ann(w, "true", requiredPlugins, us), hostUsers: &fa, wantBase: []string{nsNot}},
		{
			name: "container-scoped opt-in", ann: ann(w, "false", w+"/container.app", "true", requiredPlugins, us), hostUsers: &fa,
			wantBase: []string{"annotation " + w + "/container.app asks for a writable cgroup, but namespace team " + nsNot},
		},
		{name: "nri.io opt-in", ann: ann("writable-cgroups.nri.io/enable", "true", requiredPlugins, us), hostUsers: &fa, wantBase: []string{"annotation writable-cgroups.nri.io/enable asks for a writable cgroup, but namespace team " + nsNot}},
		{name: "a bad value counts as asking", ann: ann(w, "yes", requiredPlugins, us), hostUsers: &fa, wantBase: []string{nsNot}},
		{name: "required-plugins missing", labels: allowed, ann: ann(w, "true"), hostUsers: &fa, wantBase: []string{noReq}},
		{
			name: "only container-scoped required-plugins", labels: allowed, ann: ann(w, "true", requiredPlugins+"/container.app", us), hostUsers: &fa,
			wantBase: []string{noReq},
		},
		{
			name: "required-plugins without us", labels: allowed, ann: ann(w, "true", requiredPlugins, `["other"]`), hostUsers: &fa,
			wantBase: []string{"annotation " + requiredPlugins + " " + badReq},
		},
		{
			name: "container-scoped required-plugins overrides without us", labels: allowed,
			ann: ann(w, "true", requiredPlugins+"/pod", us, requiredPlugins+"/container.app", `["other"]`), hostUsers: &fa,
			wantBase: []string{"annotation " + requiredPlugins + "/container.app " + badReq},
		},
		{name: "required-plugins empty list", labels: allowed, ann: ann(w, "true", requiredPlugins, `[]`), hostUsers: &fa, wantBase: []string{badReq}},
		{name: "required-plugins not a list", labels: allowed, ann: ann(w, "true", requiredPlugins, `cgdelegate`), hostUsers: &fa, wantBase: []string{badReq}},
		{name: "required-plugins prefix name", labels: allowed, ann: ann(w, "true", requiredPlugins, `["cgdelegate-x"]`), hostUsers: &fa, wantBase: []string{badReq}},
		{name: "required-plugins name inside a quoted element", labels: allowed, ann: ann(w, "true", requiredPlugins, `["a, cgdelegate"]`), hostUsers: &fa, wantBase: []string{badReq}},
		{name: "required-plugins name inside a later quoted element", labels: allowed, ann: ann(w, "true", requiredPlugins, `[a, "b, cgdelegate, c"]`), hostUsers: &fa, wantBase: []string{badReq}},
		{
			name: "tolerates missing plugins", labels: allowed, ann: ann(w, "true", requiredPlugins, us, tolerate, "true"), hostUsers: &fa,
			wantBase: []string{"annotation " + tolerate + " would let the pod start"},
		},
		{
			name: "tolerates missing plugins, container scope, even false", labels: allowed,
			ann: ann(w, "true", requiredPlugins, us, tolerate+"/container.app", "false"), hostUsers: &fa,
			wantBase: []string{"annotation " + tolerate + "/container.app would let"},
		},
		{name: "tolerating pod that does not ask", ann: ann(tolerate, "true")},
		{
			name: "everything wrong", ann: ann(annotations.CRIOWritableLegacy.Name, "true"),
			wantBase: []string{nsNot, noReq}, wantUserns: []string{noNS},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, ns := pod(t, tc.ann, tc.hostUsers), namespace(t, tc.labels)
			for _, c := range []struct {
				p    policy
				want []string
			}{{base, tc.wantBase}, {userns, tc.wantUserns}} {
				got, err := c.p.admit(p, ns)
				if err != nil {
					t.Fatalf("%s: %v", c.p.name, err)
				}
				wantDenials(t, c.p.name, got, c.want)
			}
		})
	}
}

// Every form of every writable opt-in key in the annotation registry is
// gated, and its disabling values are not.
func TestPolicyCoversRegistry(t *testing.T) {
	base, _ := policies(t)
	unlabelled := namespace(t, nil)
	for _, k := range []annotations.Key{annotations.WritableCgroups, annotations.CRIOWritable, annotations.CRIOWritableLegacy} {
		for _, form := range k.Forms() {
			key := strings.ReplaceAll(form, "<name>", "app")
			for _, v := range []string{"true", "Writable", "false", "ReadOnly"} {
				t.Run(key+"="+v, func(t *testing.T) {
					got, err := base.admit(pod(t, ann(key, v, requiredPlugins, `["cgdelegate"]`), nil), unlabelled)
					if err != nil {
						t.Fatal(err)
					}
					asks := v == "true" || v == "Writable"
					if asks && (len(got) != 1 || !strings.Contains(got[0], "annotation "+key+" asks")) {
						t.Fatalf("denials %q, want one naming %s", got, key)
					}
					if !asks && len(got) != 0 {
						t.Fatalf("denials %q, want none", got)
					}
				})
			}
		}
	}
}

// askVariables are the variables both writable-cgroups policies declare
// first, alike (the chart's cgdelegate.askVariables): what asking for a
// writable cgroup means.
var askVariables = []string{"optInKeys", "writableRuntimeClass", "askedBy", "stopAsking"}

// The manifests have the shape the policy relies on: each policy bound
// with Deny, failing closed, on pod CREATE and UPDATE, and both policies agree on
// what asking for a writable cgroup means.
func TestPolicyManifests(t *testing.T) {
	var optIn [][]admissionv1.Variable
	for _, file := range []string{policyFile, usernsFile} {
		m := loadManifest(t, file)
		for _, p := range m.policies {
			s := p.Spec
			if s.FailurePolicy == nil || *s.FailurePolicy != admissionv1.Fail {
				t.Errorf("%s: policy %s: failurePolicy must be Fail", file, p.Name)
			}
			if s.ParamKind != nil {
				t.Errorf("%s: policy %s: unexpected paramKind", file, p.Name)
			}
			rules := s.MatchConstraints.ResourceRules
			if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"pods"}) ||
				!slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
				t.Errorf("%s: policy %s: want one rule, pods (not their subresources) on CREATE and UPDATE; got %+v", file, p.Name, rules)
			}
			if len(s.Variables) < len(askVariables) {
				t.Fatalf("%s: policy %s has %d variables, want %v first", file, p.Name, len(s.Variables), askVariables)
			}
			first := s.Variables[:len(askVariables)]
			for i, v := range first {
				if v.Name != askVariables[i] {
					t.Fatalf("%s: policy %s: variable %d is %s, want %s", file, p.Name, i, v.Name, askVariables[i])
				}
			}
			optIn = append(optIn, first)
			bound := slices.ContainsFunc(m.bindings, func(b admissionv1.ValidatingAdmissionPolicyBinding) bool {
				return b.Spec.PolicyName == p.Name &&
					slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) &&
					b.Spec.ParamRef == nil && b.Spec.MatchResources == nil
			})
			if !bound {
				t.Errorf("%s: policy %s has no binding with validationActions [Deny] for all namespaces", file, p.Name)
			}
		}
	}
	if len(optIn) != 2 || !slices.Equal(optIn[0], optIn[1]) {
		t.Errorf("the variables %v of %s and %s differ", askVariables, policyFile, usernsFile)
	}
}

// The chart's admissionPolicy.allowedNamespaces admits pods of the
// namespaces it names as if they were labelled; labelled namespaces stay
// allowed, others stay denied. The chart is rendered with go tool helm.
func TestPolicyAllowedNamespaces(t *testing.T) {
	file := renderTemplate(t, policyFile, "--set-json", `admissionPolicy.allowedNamespaces=["ci","team"]`)
	m := loadManifest(t, file)
	if len(m.policies) != 1 {
		t.Fatalf("%d policies, want one", len(m.policies))
	}
	p := compilePolicy(t, m.policies[0], true)
	asks := ann("writable-cgroups.noderesource.dev", "true", requiredPlugins, `["cgdelegate"]`)
	for _, tc := range []struct {
		ns     string
		labels map[string]string
		want   string // a denial's substring; "": admitted
	}{
		{ns: "team"},
		{ns: "ci"},
		{ns: "other", labels: map[string]string{nsLabel: "allowed"}},
		{ns: "other", want: "namespace other is not labelled cgdelegate.io/writable-cgroups=allowed nor one of the namespaces the cgdelegate chart allows by name"},
		{ns: "tea", want: "namespace tea is not labelled"},
	} {
		t.Run(tc.ns+fmt.Sprint(tc.labels), func(t *testing.T) {
			got, err := p.admit(pod(t, asks, nil), namespaceNamed(t, tc.ns, tc.labels))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && len(got) != 0 {
				t.Errorf("denials %q, want none", got)
			}
			if tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)) {
				t.Errorf("denials %q, want one naming %q", got, tc.want)
			}
		})
	}
}

// A pod naming a RuntimeClass of admissionPolicy.writableRuntimeClasses
// (whose handler makes every container writable: containerd's
// cgroup_writable) asks for a writable cgroup as if annotated, and both
// policies judge it by the same rules, their messages naming
// runtimeClassName and its value. A pod naming another class, or none,
// asks for nothing.
func TestPolicyRuntimeClass(t *testing.T) {
	base, userns := classPolicies(t)
	const (
		w        = "writable-cgroups.noderesource.dev"
		us       = `["cgdelegate"]`
		tolerate = "tolerate-missing-plugins.cgdelegate.io"
		byClass  = "runtimeClassName " + writableClass + " asks for a writable cgroup"
		nsNot    = "but namespace team is not labelled cgdelegate.io/writable-cgroups=allowed: ask a cluster admin to label it, or use another runtime class"
	)
	allowed := map[string]string{nsLabel: "allowed"}
	tr, fa := true, false
	tests := []struct {
		name      string
		class     string
		labels    map[string]string
		ann       map[string]string
		hostUsers *bool
		// wantBase and wantUserns hold one substring per denial, in
		// order; none means admitted.
		wantBase, wantUserns []string
	}{
		// Asks for nothing: admitted anywhere.
		{name: "no runtime class"},
		{name: "a class not in the list", class: "runc"},
		{name: "a class named like a listed one", class: writableClass + "-2"},
		{name: "a prefix of a listed class", class: "runc-writabl"},
		{name: "a class not in the list, hostUsers true", class: "kata", hostUsers: &tr},
		{name: "a class not in the list, tolerating", class: "runc", ann: ann(tolerate, "true")},

		// Asks, everything in place.
		{name: "allowed", class: writableClass, labels: allowed, ann: ann(requiredPlugins, us), hostUsers: &fa},
		{name: "allowed, the second class", class: "kata.rw", labels: allowed, ann: ann(requiredPlugins+"/pod", us), hostUsers: &fa},
		{
			name: "allowed, host users: only the user-namespace policy denies", class: writableClass, labels: allowed, ann: ann(requiredPlugins, us),
			wantUserns: []string{byClass + ", which this cluster allows only in a user namespace: set spec.hostUsers: false, or use another runtime class"},
		},

		// Asks, denied: each rule the annotation meets.
		{
			name: "namespace not allowed", class: writableClass, ann: ann(requiredPlugins, us), hostUsers: &fa,
			wantBase: []string{byClass + ", " + nsNot},
		},
		{
			name: "namespace not allowed, the second class", class: "kata.rw", ann: ann(requiredPlugins, us), hostUsers: &fa,
			wantBase: []string{"runtimeClassName kata.rw asks for a writable cgroup, but namespace team"},
		},
		{
			name: "required-plugins missing", class: writableClass, labels: allowed, hostUsers: &fa,
			wantBase: []string{byClass + ", so the pod must also carry the annotation required-plugins.noderesource.dev"},
		},
		{
			name: "required-plugins without us", class: writableClass, labels: allowed, ann: ann(requiredPlugins, `["other"]`), hostUsers: &fa,
			wantBase: []string{"does not list cgdelegate as a flow list of plugin names such as [\"cgdelegate\"] or [other, \"cgdelegate\"]; the pod asks for a writable cgroup (runtimeClassName " + writableClass + ")"},
		},
		{
			name: "tolerates missing plugins", class: writableClass, labels: allowed, ann: ann(requiredPlugins, us, tolerate, "true"), hostUsers: &fa,
			wantBase: []string{"but the pod asks for a writable cgroup (runtimeClassName " + writableClass + "): remove it"},
		},
		{
			// The runtime would make the containers writable whatever
			// the annotation says where the node's guard is off.
			name: "ReadOnly does not take the class back", class: writableClass, ann: ann(w, "ReadOnly", requiredPlugins, us), hostUsers: &fa,
			wantBase: []string{byClass + ", " + nsNot},
		},
		{
			name: "annotation and class", class: writableClass, ann: ann(w, "true"),
			wantBase: []string{
				"annotation " + w + " and runtimeClassName " + writableClass + " asks for a writable cgroup, but namespace team is not labelled cgdelegate.io/writable-cgroups=allowed: ask a cluster admin to label it, or remove the annotation and use another runtime class",
				"annotation " + w + " and runtimeClassName " + writableClass + " asks for a writable cgroup, so the pod must also carry",
			},
			wantUserns: []string{"set spec.hostUsers: false, or remove the annotation and use another runtime class"},
		},
		{
			name: "annotation with a class not in the list", class: "runc", ann: ann(w, "true", requiredPlugins, us), hostUsers: &fa,
			wantBase: []string{"annotation " + w + " asks for a writable cgroup, but namespace team is not labelled cgdelegate.io/writable-cgroups=allowed: ask a cluster admin to label it, or remove the annotation"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, ns := withRuntimeClass(pod(t, tc.ann, tc.hostUsers), tc.class), namespace(t, tc.labels)
			for _, c := range []struct {
				p    policy
				want []string
			}{{base, tc.wantBase}, {userns, tc.wantUserns}} {
				got, err := c.p.admit(p, ns)
				if err != nil {
					t.Fatalf("%s: %v", c.p.name, err)
				}
				wantDenials(t, c.p.name, got, c.want)
			}
		})
	}
}

// An update of a pod may not add, change or remove an annotation the
// runtime reads when it creates the pod sandbox (an opt-in key in any
// scope and with any value, required-plugins.noderesource.dev,
// tolerate-missing-plugins.cgdelegate.io) when the updated pod asks for a
// writable cgroup: the kubelet creates the sandbox from the pod as it is
// then, after a Pending or gated pod was annotated, and again when the
// sandbox is re-created. Any other update is admitted, and a pod that
// (as updated) asks for nothing is never refused. A pod asking by its
// RuntimeClass (spec.runtimeClassName cannot change on a pod) is held to
// the same rule. Each case runs against the chart told of writable runtime
// classes, and, when its pod names no class, against the shipped
// manifests too.
func TestPolicyUpdate(t *testing.T) {
	base, userns := policies(t)
	cBase, cUserns := classPolicies(t)
	const (
		w        = "writable-cgroups.noderesource.dev"
		us       = `["cgdelegate"]`
		tolerate = "tolerate-missing-plugins.cgdelegate.io"
		readAt   = "the runtime reads it when it creates the pod sandbox, so it cannot change on an existing pod: delete the pod and create it again"
		noNS     = "allows only in a user namespace"
	)
	allowed := map[string]string{nsLabel: "allowed"}
	asking := ann(w, "true", requiredPlugins, us)
	tr, fa := true, false
	tests := []struct {
		name      string
		labels    map[string]string
		old, new  map[string]string
		hostUsers *bool
		// class is both pods' spec.runtimeClassName.
		class string
		// newLabels are pod labels the update adds.
		newLabels map[string]string
		// wantBase and wantUserns hold one substring per denial, in
		// order; none means admitted.
		wantBase, wantUserns []string
	}{
		// A Pending pod that asked for nothing, in a namespace not
		// allowed, annotated afterwards.
		{
			name: "Pending pod annotated with the opt-in key", new: ann(w, "Writable"),
			wantBase: []string{"annotation " + w + " was added, changed or removed on a pod that asks for a writable cgroup (annotation " + w + "): " + readAt}, wantUserns: []string{noNS},
		},
		{
			name: "Pending pod annotated with the opt-in key and required-plugins", new: asking,
			wantBase: []string{readAt}, wantUserns: []string{noNS},
		},
		{
			name: "Pending pod annotated with a container-scoped key", new: ann(w+"/container.app", "true"),
			wantBase: []string{"annotation " + w + "/container.app was added"}, wantUserns: []string{noNS},
		},
		{
			name: "Pending pod annotated with the pod-scoped key", new: ann(w+"/pod", "true"),
			wantBase: []string{"annotation " + w + "/pod was added"}, wantUserns: []string{noNS},
		},
		{
			name: "Pending pod annotated with CRI-O's key", new: ann(annotations.CRIOWritable.Name, "true"),
			wantBase: []string{"annotation " + annotations.CRIOWritable.Name + " was added"}, wantUserns: []string{noNS},
		},
		{
			name: "Pending pod annotated with CRI-O's older key", new: ann(annotations.CRIOWritableLegacy.Name, "true"),
			wantBase: []string{"annotation " + annotations.CRIOWritableLegacy.Name + " was added"}, wantUserns: []string{noNS},
		},
		{
			name: "Pending pod annotated with KubeRay's key", new: ann(annotations.KubeRayWritable.Name, "true"),
			wantBase: []string{"annotation " + annotations.KubeRayWritable.Name + " was added"}, wantUserns: []string{noNS},
		},
		{
			name: "opt-in key false turned true", old: ann(w, "false"), new: ann(w, "true"),
			wantBase: []string{"annotation " + w + " was added"}, wantUserns: []string{noNS},
		},
		{
			name: "container-scoped false removed under a pod-wide true", labels: allowed, hostUsers: &fa,
			old: with(asking, w+"/container.app", "false"), new: asking,
			wantBase: []string{"annotation " + w + "/container.app was added"},
		},
		{
			name: "a user-namespaced pod in an allowed namespace, annotated", labels: allowed, hostUsers: &fa,
			new: asking, wantBase: []string{readAt},
		},

		// A pod admitted as asking, in an allowed namespace.
		{
			name: "required-plugins removed", labels: allowed, hostUsers: &fa,
			old: asking, new: without(asking, requiredPlugins),
			wantBase: []string{"annotation " + requiredPlugins + " was added, changed or removed"},
		},
		{
			name: "required-plugins no longer listing us", labels: allowed, hostUsers: &fa,
			old: asking, new: with(asking, requiredPlugins, `["other"]`),
			wantBase: []string{"annotation " + requiredPlugins + " was added"},
		},
		{
			name: "container-scoped required-plugins added", labels: allowed, hostUsers: &fa,
			old: asking, new: with(asking, requiredPlugins+"/container.app", `[]`),
			wantBase: []string{"annotation " + requiredPlugins + "/container.app was added"},
		},
		{
			name: "tolerate-missing-plugins added", labels: allowed, hostUsers: &fa,
			old: asking, new: with(asking, tolerate, "true"),
			wantBase: []string{"annotation " + tolerate + " was added"},
		},
		{
			name: "container-scoped tolerate-missing-plugins added", labels: allowed, hostUsers: &fa,
			old: asking, new: with(asking, tolerate+"/container.app", "true"),
			wantBase: []string{"annotation " + tolerate + "/container.app was added"},
		},
		{
			name: "opt-in value changed", labels: allowed, hostUsers: &fa,
			old: asking, new: with(asking, w, "Writable"),
			wantBase: []string{"annotation " + w + " was added"},
		},
		{
			name: "opt-in key moved to the pod scope", labels: allowed, hostUsers: &fa,
			old: asking, new: with(without(asking, w), w+"/pod", "true"),
			wantBase: []string{"annotation " + w + "/pod, " + w + " was added"},
		},

		// Admitted.
		{name: "asking pod, another annotation added", labels: allowed, hostUsers: &fa, old: asking, new: with(asking, "example.com/owner", "ci")},
		{name: "asking pod, a label added", labels: allowed, hostUsers: &fa, old: asking, new: asking, newLabels: map[string]string{"team": "a"}},
		{name: "asking pod, namespace no longer allowed, another annotation added", old: asking, new: with(asking, "example.com/x", "y")},
		{name: "asking pod outside a user namespace, another annotation added", labels: allowed, old: asking, new: with(asking, "example.com/x", "y")},
		{name: "asking pod, nothing changed", old: asking, new: asking, hostUsers: &tr},
		{name: "opt-in removed", labels: allowed, hostUsers: &fa, old: asking, new: without(asking, w)},
		{name: "every annotation removed", old: asking},
		{name: "plain pod, another annotation added", new: ann("example.com/x", "y")},
		{name: "plain pod, tolerate-missing-plugins added", new: ann(tolerate, "true")},
		{name: "plain pod, required-plugins added and removed", old: ann(requiredPlugins, us), new: ann(requiredPlugins+"/pod", `["other"]`)},
		{name: "plain pod, opt-in key false added", new: ann(w, "false", annotations.KubeRayWritable.Name, "false")},
		{name: "plain pod, ReadOnly changed to false", old: ann(w, "ReadOnly"), new: ann(w, "false")},

		// A pod that asks by its RuntimeClass.
		{
			name: "class: required-plugins removed", class: writableClass, labels: allowed, hostUsers: &fa,
			old: ann(requiredPlugins, us), new: ann(),
			wantBase: []string{"annotation " + requiredPlugins + " was added, changed or removed on a pod that asks for a writable cgroup (runtimeClassName " + writableClass + "): " + readAt},
		},
		{
			name: "class: tolerate-missing-plugins added", class: writableClass, labels: allowed, hostUsers: &fa,
			old: ann(requiredPlugins, us), new: ann(requiredPlugins, us, tolerate, "true"),
			wantBase: []string{"annotation " + tolerate + " was added"},
		},
		{
			name: "class: an opt-in key added", class: writableClass, hostUsers: &tr,
			old: ann(requiredPlugins, us), new: ann(requiredPlugins, us, w, "false"),
			wantBase:   []string{"annotation " + w + " was added, changed or removed on a pod that asks for a writable cgroup (runtimeClassName " + writableClass + ")"},
			wantUserns: []string{"runtimeClassName " + writableClass + " asks for a writable cgroup, which this cluster allows only in a user namespace"},
		},
		{name: "class: another annotation added", class: writableClass, labels: allowed, hostUsers: &fa, old: ann(requiredPlugins, us), new: ann(requiredPlugins, us, "example.com/x", "y")},
		{name: "class, namespace not allowed (created before the class was listed): a label added", class: writableClass, newLabels: map[string]string{"team": "a"}},
		{name: "class not in the list: tolerate-missing-plugins and required-plugins changed", class: "runc", old: ann(requiredPlugins, us), new: ann(tolerate, "true")},
		{
			name: "class not in the list: the opt-in key added", class: "runc", new: ann(w, "true"),
			wantBase: []string{"annotation " + w + " was added, changed or removed on a pod that asks for a writable cgroup (annotation " + w + ")"}, wantUserns: []string{noNS},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old, ns := withRuntimeClass(pod(t, tc.old, tc.hostUsers), tc.class), namespace(t, tc.labels)
			updated := withRuntimeClass(pod(t, tc.new, tc.hostUsers), tc.class)
			if tc.newLabels != nil {
				updated["metadata"].(map[string]any)["labels"] = tc.newLabels
			}
			type judge struct {
				p    policy
				want []string
			}
			judges := []judge{{cBase, tc.wantBase}, {cUserns, tc.wantUserns}}
			if tc.class == "" {
				judges = append(judges, judge{base, tc.wantBase}, judge{userns, tc.wantUserns})
			}
			for _, c := range judges {
				got, err := c.p.update(old, updated, ns)
				if err != nil {
					t.Fatalf("%s: %v", c.p.name, err)
				}
				wantDenials(t, c.p.name, got, c.want)
			}
		})
	}
}

// A pod that asks for nothing is never refused, on CREATE or UPDATE (of
// the pod or of its status), whatever it carried before and whatever
// namespace it is in: random annotation sets drawn from every key the
// policies read, and others, and random spec.runtimeClassName values
// (none, a class the chart was told makes containers writable, classes it
// was not told of, names close to one it was), against the shipped
// manifests (told of no class) and the chart told of two.
func TestPolicyNeverRefusesPodsThatDoNotAsk(t *testing.T) {
	base, userns := policies(t)
	status := statusPolicy(t) // UPDATE of pods/status
	cBase, cUserns := classPolicies(t)
	cStatus := classStatusPolicy(t)
	w := annotations.WritableCgroups.Name
	keys := []string{
		w, w + "/pod", w + "/container.app", annotations.CRIOWritable.Name, annotations.CRIOWritableLegacy.Name,
		annotations.KubeRayWritable.Name, requiredPlugins, requiredPlugins + "/pod", requiredPlugins + "/container.app",
		"tolerate-missing-plugins.cgdelegate.io", "tolerate-missing-plugins.cgdelegate.io/container.app",
		"example.com/x", annotations.MaxDepth.Name,
	}
	values := []string{"true", "Writable", "false", " ReadOnly ", "", `["cgdelegate"]`, `["other"]`, "yes"}
	classes := []string{"", "", writableClass, "kata.rw", "runc", "kata", writableClass + "-2", "kata", "rw"}
	optIn := regexp.MustCompile(`^\s*(ReadOnly|false)\s*$`)
	asks := func(a map[string]string, class string, told bool) bool {
		if told && (class == writableClass || class == "kata.rw") {
			return true
		}
		for k, v := range a {
			isOptIn := k == w || k == w+"/pod" || strings.HasPrefix(k, w+"/container.") || k == annotations.CRIOWritable.Name ||
				k == annotations.CRIOWritableLegacy.Name || k == annotations.KubeRayWritable.Name
			if isOptIn && !optIn.MatchString(v) {
				return true
			}
		}
		return false
	}
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func() map[string]string {
		a := map[string]string{}
		for range rng.IntN(5) {
			a[keys[rng.IntN(len(keys))]] = values[rng.IntN(len(values))]
		}
		return a
	}
	fa := false
	namespaces := []map[string]any{namespace(t, nil), namespace(t, map[string]string{nsLabel: "allowed"})}
	for _, set := range []struct {
		name     string
		told     bool
		policies []policy
	}{
		{"the shipped manifests", false, []policy{base, userns, status}},
		{"the chart told of writable runtime classes", true, []policy{cBase, cUserns, cStatus}},
	} {
		t.Run(set.name, func(t *testing.T) {
			checked, withClass := 0, 0
			for i := range 3000 {
				old, updated := draw(), draw()
				// spec.runtimeClassName cannot change on a pod.
				class := classes[rng.IntN(len(classes))]
				if asks(updated, class, set.told) {
					continue
				}
				checked++
				if class != "" {
					withClass++
				}
				var hostUsers *bool
				if i%2 == 0 {
					hostUsers = &fa
				}
				ns := namespaces[i%len(namespaces)]
				for _, p := range set.policies {
					created, err := p.admit(withRuntimeClass(pod(t, updated, hostUsers), class), ns)
					if err != nil {
						t.Fatalf("%s: CREATE %v class %q: %v", p.name, updated, class, err)
					}
					changed, err := p.update(withRuntimeClass(pod(t, old, hostUsers), class), withRuntimeClass(pod(t, updated, hostUsers), class), ns)
					if err != nil {
						t.Fatalf("%s: UPDATE %v to %v class %q: %v", p.name, old, updated, class, err)
					}
					if len(created) != 0 || len(changed) != 0 {
						t.Fatalf("%s: a pod that asks for nothing (%v, runtime class %q, before %v) was refused: CREATE %q, UPDATE %q", p.name, updated, class, old, created, changed)
					}
				}
			}
			if checked < 500 || withClass < 250 {
				t.Fatalf("only %d draws asked for nothing, %d of them with a runtime class; the generator is off", checked, withClass)
			}
		})
	}
}
