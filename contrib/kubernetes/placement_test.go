package kubernetes_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/annotations"
)

// placementFile is the MutatingAdmissionPolicy that schedules pods that
// ask onto nodes that support writable cgroups: optional (Kubernetes
// 1.36+), rendered by make manifests with the API named.
const placementFile = "placement-policy.yaml"

// placementPolicy is the compiled MutatingAdmissionPolicy: its match
// conditions and mutations compiled as the API server compiles them
// (k8s.io/apiserver's mutating policy plugin, compilePolicy: the
// composited compiler over the base environment of this release, object
// untyped), so the test runs the very CEL the API server runs.
type placementPolicy struct {
	spec     admissionv1.MutatingAdmissionPolicySpec
	matcher  matchconditions.Matcher
	patchers []patch.Patcher
}

func loadPlacement(t *testing.T) placementPolicy {
	t.Helper()
	var (
		policies []*admissionv1.MutatingAdmissionPolicy
		bindings []*admissionv1.MutatingAdmissionPolicyBinding
	)
	for _, obj := range decodeFile(t, placementFile) {
		switch o := obj.(type) {
		case *admissionv1.MutatingAdmissionPolicy:
			policies = append(policies, o)
		case *admissionv1.MutatingAdmissionPolicyBinding:
			bindings = append(bindings, o)
		default:
			t.Fatalf("%s: unexpected %T", placementFile, obj)
		}
	}
	if len(policies) != 1 || len(bindings) != 1 || bindings[0].Spec.PolicyName != policies[0].Name {
		t.Fatalf("%s: %d policies and %d bindings, want one policy and its binding", placementFile, len(policies), len(bindings))
	}
	p := policies[0]
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	if len(p.Spec.Variables) != 0 {
		t.Fatalf("%s: variables: the test compiles none", placementFile)
	}
	conds := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
	for i := range p.Spec.MatchConditions {
		conds[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
	}
	pp := placementPolicy{
		spec:    p.Spec,
		matcher: matchconditions.NewMatcher(compiler.CompileCondition(conds, opts, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name),
	}
	opts.HasPatchTypes = true
	for _, m := range p.Spec.Mutations {
		if m.PatchType != admissionv1.PatchTypeJSONPatch || m.JSONPatch == nil {
			t.Fatalf("%s: mutation %+v: want JSONPatch", placementFile, m)
		}
		ev := compiler.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, opts, environment.StoredExpressions)
		if errs := ev.CompilationErrors(); len(errs) != 0 {
			t.Fatalf("%s: %v", placementFile, errs)
		}
		pp.patchers = append(pp.patchers, patch.NewJSONPatcher(ev))
	}
	return pp
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// create runs the policy on the CREATE of pod as the API server does: the
// match conditions, then each mutation on the result of the last; the
// policy reinvoked (IfNeeded) on its own output until the match
// conditions exclude it (at most twice). It returns the pod as admitted and
// whether any mutation ran.
func (p placementPolicy) create(t *testing.T, pod *corev1.Pod) (*corev1.Pod, bool) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	obj := pod.DeepCopy()
	ran := false
	for round := range 3 {
		attrs := admission.NewAttributesRecord(obj, nil, gvk, obj.Namespace, obj.Name, podsGVR, "", admission.Create, &metav1.CreateOptions{}, false, nil)
		va := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(obj)}
		m := p.matcher.Match(t.Context(), va, nil, nil)
		if m.Error != nil {
			t.Fatalf("match conditions: %v", m.Error)
		}
		if !m.Matches {
			return obj, ran
		}
		if round == 2 {
			t.Fatalf("the policy still matches its own output after two invocations:\n%s", podJSON(t, obj))
		}
		ran = true
		for _, pt := range p.patchers {
			out, err := pt.Patch(t.Context(), patch.Request{
				MatchedResource: podsGVR, VersionedAttributes: va,
				ObjectInterfaces: admission.NewObjectInterfacesFromScheme(scheme),
			}, celconfig.RuntimeCELCostBudget)
			if err != nil {
				t.Fatalf("mutation of\n%s\n%v", podJSON(t, obj), err)
			}
			obj = out.(*corev1.Pod)
			va = &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(obj)}
		}
	}
	return obj, ran
}

func podJSON(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// askingPod is a pod that asks (writable-cgroups.noderesource.dev: true)
// with the given spec's scheduling.
func askingPod(spec corev1.PodSpec) *corev1.Pod {
	spec.Containers = []corev1.Container{{Name: "app", Image: "busybox"}}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "team-a",
			Annotations: map[string]string{annotations.WritableCgroups.Name: "true", requiredPlugins: `["cgdelegate"]`},
		},
		Spec: spec,
	}
}

// supportReq is the requirement the policy adds.
var supportReq = corev1.NodeSelectorRequirement{Key: advert.FeatureLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func required(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

var preferred = []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: corev1.NodeSelectorTerm{
	MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "a")},
}}}

// A pod that asks gets the requirement, ANDed with its own scheduling: in
// every term of its required node affinity; everything else of the pod
// kept. A pod that already requires the label is not matched.
func TestPlacementMutation(t *testing.T) {
	p := loadPlacement(t)
	byName := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}
	podAff := &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
	}}}
	tests := []struct {
		name      string
		spec      corev1.PodSpec
		want      *corev1.Affinity // nil: unchanged
		unchanged bool
	}{
		{
			name: "no affinity", spec: corev1.PodSpec{},
			want: required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{supportReq}}),
		},
		{
			name: "pod affinity only", spec: corev1.PodSpec{Affinity: &corev1.Affinity{PodAffinity: podAff}},
			want: &corev1.Affinity{PodAffinity: podAff, NodeAffinity: required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{supportReq}}).NodeAffinity},
		},
		{
			name: "preferred only", spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}},
			want: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: preferred,
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{supportReq}},
				}},
			}},
		},
		{
			name: "nodeSelector kept", spec: corev1.PodSpec{NodeSelector: map[string]string{"disk": "ssd"}},
			want: required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{supportReq}}),
		},
		{
			name: "several terms, each gets it", spec: corev1.PodSpec{Affinity: required(
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "a")}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("gpu", corev1.NodeSelectorOpExists), req("zone", corev1.NodeSelectorOpNotIn, "c")}},
				corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{byName}},
			)},
			want: required(
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "a"), supportReq}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("gpu", corev1.NodeSelectorOpExists), req("zone", corev1.NodeSelectorOpNotIn, "c"), supportReq}},
				corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{byName}, MatchExpressions: []corev1.NodeSelectorRequirement{supportReq}},
			),
		},
		{
			name: "one term has it, the other gets it", spec: corev1.PodSpec{Affinity: required(
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{supportReq, req("zone", corev1.NodeSelectorOpIn, "a")}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "b")}},
			)},
			want: required(
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{supportReq, req("zone", corev1.NodeSelectorOpIn, "a")}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "b"), supportReq}},
			),
		},
		{
			name: "the label with another operator is ANDed, not trusted", spec: corev1.PodSpec{Affinity: required(
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req(advert.FeatureLabel, corev1.NodeSelectorOpExists)}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req(advert.FeatureLabel, corev1.NodeSelectorOpIn, "true", "false")}},
			)},
			want: required(
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req(advert.FeatureLabel, corev1.NodeSelectorOpExists), supportReq}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req(advert.FeatureLabel, corev1.NodeSelectorOpIn, "true", "false"), supportReq}},
			),
		},
		{
			name: "an empty term stays empty (it matches no node)", spec: corev1.PodSpec{Affinity: required(
				corev1.NodeSelectorTerm{},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "b")}},
			)},
			want: required(
				corev1.NodeSelectorTerm{},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "b"), supportReq}},
			),
		},
		{name: "already required in every term", unchanged: true, spec: corev1.PodSpec{Affinity: required(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "a"), supportReq}},
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{supportReq}},
		)}},
		{name: "already in the nodeSelector", unchanged: true, spec: corev1.PodSpec{NodeSelector: map[string]string{advert.FeatureLabel: "true"}}},
		{
			name: "nodeSelector with another value", spec: corev1.PodSpec{NodeSelector: map[string]string{advert.FeatureLabel: "false"}},
			want: required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{supportReq}}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := askingPod(tc.spec)
			got, ran := p.create(t, in)
			want := in.DeepCopy()
			if !tc.unchanged {
				want.Spec.Affinity = tc.want
			}
			if ran == tc.unchanged {
				t.Errorf("mutated %v, want %v", ran, !tc.unchanged)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got\n%s\nwant\n%s", podJSON(t, got), podJSON(t, want))
			}
			// Idempotent: the admitted pod, created again (or the
			// policy reinvoked on it), is not matched.
			if again, ran := p.create(t, got); ran || !reflect.DeepEqual(again, got) {
				t.Errorf("the policy matched its own output:\n%s", podJSON(t, again))
			}
		})
	}
}

// The policy is what the chart says: CREATE of pods only, Fail,
// reinvoked if needed, bound without a narrower match.
func TestPlacementPolicyShape(t *testing.T) {
	p := loadPlacement(t)
	s := p.spec
	if s.FailurePolicy == nil || *s.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", s.FailurePolicy)
	}
	if s.ReinvocationPolicy != admissionv1.IfNeededReinvocationPolicy {
		t.Errorf("reinvocationPolicy %q, want IfNeeded", s.ReinvocationPolicy)
	}
	rules := s.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create}) ||
		!slices.Equal(rules[0].Resources, []string{"pods"}) || !slices.Equal(rules[0].APIGroups, []string{""}) {
		t.Errorf("resource rules %+v, want CREATE of pods only", rules)
	}
}

// The placement policy's match condition "asks" decides as the
// writable-cgroups policy's optInKeys: both come from the chart's one
// definition.
func TestPlacementAsksIsTheOptIn(t *testing.T) {
	p := loadPlacement(t)
	i := slices.IndexFunc(p.spec.MatchConditions, func(c admissionv1.MatchCondition) bool { return c.Name == "asks-for-a-writable-cgroup" })
	if i < 0 {
		t.Fatalf("%s: no match condition asks-for-a-writable-cgroup", placementFile)
	}
	optIn := loadManifest(t, policyFile).policies[0]
	j := slices.IndexFunc(optIn.Spec.Variables, func(v admissionv1.Variable) bool { return v.Name == "optInKeys" })
	if j < 0 {
		t.Fatalf("%s: no optInKeys variable", policyFile)
	}
	want := "(" + optIn.Spec.Variables[j].Expression + ").size() != 0"
	if got := p.spec.MatchConditions[i].Expression; got != want {
		t.Errorf("%s: the match condition\n%s\nis not %s's optInKeys\n%s", placementFile, got, policyFile, want)
	}
}

// A pod that asks for nothing is never changed, byte for byte, whatever
// its annotations (random sets drawn from every opt-in key, with values
// that ask for less, ReadOnly and false, and others) and its scheduling
// (none, a nodeSelector, required and preferred node affinity).
func TestPlacementNeverChangesPodsThatDoNotAsk(t *testing.T) {
	p := loadPlacement(t)
	w := annotations.WritableCgroups.Name
	keys := []string{
		w, w + "/pod", w + "/container.app", annotations.CRIOWritable.Name, annotations.CRIOWritableLegacy.Name,
		annotations.KubeRayWritable.Name, requiredPlugins, "tolerate-missing-plugins.cgdelegate.io",
		"example.com/x", annotations.MaxDepth.Name,
	}
	values := []string{"true", "Writable", "false", " ReadOnly ", "ReadOnly", "", `["cgdelegate"]`, "yes"}
	lessOrNothing := regexp.MustCompile(`^\s*(ReadOnly|false)\s*$`)
	asks := func(a map[string]string) bool {
		for k, v := range a {
			isOptIn := k == w || k == w+"/pod" || strings.HasPrefix(k, w+"/container.") || k == annotations.CRIOWritable.Name ||
				k == annotations.CRIOWritableLegacy.Name || k == annotations.KubeRayWritable.Name
			if isOptIn && !lessOrNothing.MatchString(v) {
				return true
			}
		}
		return false
	}
	specs := []corev1.PodSpec{
		{},
		{NodeSelector: map[string]string{"disk": "ssd"}},
		{Affinity: required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "a")}},
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", corev1.NodeSelectorOpIn, "b")}})},
		{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	checked, asked := 0, 0
	for i := range 2000 {
		a := map[string]string{}
		for range rng.IntN(5) {
			a[keys[rng.IntN(len(keys))]] = values[rng.IntN(len(values))]
		}
		pod := askingPod(specs[i%len(specs)])
		pod.Annotations = a
		before := podJSON(t, pod)
		got, ran := p.create(t, pod)
		if asks(a) {
			asked++
			if !ran {
				t.Fatalf("a pod that asks (%v) was not placed", a)
			}
			continue
		}
		checked++
		if after := podJSON(t, got); ran || after != before {
			t.Fatalf("a pod that asks for nothing (%v) was changed:\n%s\nto\n%s", a, before, after)
		}
	}
	if checked < 300 || asked < 300 {
		t.Fatalf("%d draws asked for nothing, %d asked; the generator is off", checked, asked)
	}
	t.Logf("%d pods that ask for nothing unchanged, %d that ask placed", checked, asked)
}
