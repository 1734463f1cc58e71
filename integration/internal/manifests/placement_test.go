package manifests_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/cel/environment"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

// The placement policy renders only where the API server serves
// MutatingAdmissionPolicy v1 (helm's .Capabilities, here --api-versions,
// as helm install finds it on a 1.36+ cluster) and placement.enabled is
// true; then as a policy and its binding named after the release.
func TestChartPlacement(t *testing.T) {
	needGo(t)
	api := []string{"--api-versions", manifests.MutatingAdmissionPolicyAPI}
	tests := []struct {
		name    string
		args    []string
		release string // "": the default cgdelegate
		want    string // the policy's name; "": not rendered
	}{
		{name: "no API: not rendered", args: nil},
		{name: "other admissionregistration APIs only", args: []string{"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", "--api-versions", "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"}},
		{name: "API served", args: api, want: "cgdelegate-placement"},
		{name: "API served, placement off", args: append([]string{"--set", "placement.enabled=false"}, api...)},
		{name: "API served, admissionPolicy off: placement stays", args: append([]string{"--set", "admissionPolicy.enabled=false"}, api...), want: "cgdelegate-placement"},
		{name: "another release", args: api, release: "team-a", want: "team-a-cgdelegate-placement"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				files map[string][]byte
				err   error
			)
			if tc.release == "" {
				files, err = manifests.Template(context.Background(), root, tc.args...)
			} else {
				var out []byte
				out, err = manifests.Helm(context.Background(), root, append([]string{"template", tc.release, manifests.ChartDir, "--namespace", "ops"}, tc.args...)...)
				if err == nil {
					files, err = manifests.Split(out)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			data, ok := files[manifests.PlacementPolicy]
			if tc.want == "" {
				if ok {
					t.Fatalf("%v rendered %s:\n%s", tc.args, manifests.PlacementPolicy, data)
				}
				return
			}
			if !ok {
				t.Fatalf("%v renders no %s", tc.args, manifests.PlacementPolicy)
			}
			docs := strings.Split(string(data), "\n---\n")
			if len(docs) != 2 {
				t.Fatalf("%s: %d documents, want the policy and its binding", manifests.PlacementPolicy, len(docs))
			}
			var (
				p admissionv1.MutatingAdmissionPolicy
				b admissionv1.MutatingAdmissionPolicyBinding
			)
			if err := sigsyaml.UnmarshalStrict([]byte(docs[0]), &p); err != nil {
				t.Fatal(err)
			}
			if err := sigsyaml.UnmarshalStrict([]byte(docs[1]), &b); err != nil {
				t.Fatal(err)
			}
			if p.Kind != "MutatingAdmissionPolicy" || p.APIVersion != "admissionregistration.k8s.io/v1" || p.Name != tc.want {
				t.Errorf("policy %s %s %q, want admissionregistration.k8s.io/v1 MutatingAdmissionPolicy %q", p.APIVersion, p.Kind, p.Name, tc.want)
			}
			if b.Kind != "MutatingAdmissionPolicyBinding" || b.Name != tc.want || b.Spec.PolicyName != tc.want {
				t.Errorf("binding %s %q of policy %q, want %q of %q", b.Kind, b.Name, b.Spec.PolicyName, tc.want, tc.want)
			}
		})
	}
}

// NOTES.txt says whether placement was installed: off by value, or not
// served by this API server (helm install --dry-run=client has the
// default capabilities, which name no kinds). The installed case is
// checked against a real API server (integration/vm
// TestAPIServerPlacement).
func TestChartPlacementNotes(t *testing.T) {
	needGo(t)
	tests := []struct {
		args       []string
		want, lack string
	}{
		{nil, "Placement is NOT installed: this API server does not serve\nadmissionregistration.k8s.io/v1 MutatingAdmissionPolicy", "Placement is off"},
		{[]string{"--set", "placement.enabled=false"}, "Placement is off (placement.enabled false)", "NOT installed"},
	}
	for _, tc := range tests {
		out, err := manifests.Helm(t.Context(), root, append([]string{"install", "cgdelegate", manifests.ChartDir, "--namespace", "kube-system", "--dry-run=client"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		_, notes, ok := strings.Cut(string(out), "NOTES:\n")
		if !ok {
			t.Fatalf("no NOTES in\n%s", out)
		}
		if !strings.Contains(notes, tc.want) || strings.Contains(notes, tc.lack) {
			t.Errorf("%v: NOTES lack %q or have %q:\n%s", tc.args, tc.want, tc.lack, notes)
		}
		if !strings.Contains(notes, `cgdelegate.io/supports-cgroup-options: "true"`) {
			t.Errorf("%v: NOTES do not give the node selector:\n%s", tc.args, notes)
		}
	}
}

// The schema refuses a misspelt or mistyped placement value.
func TestChartRefusesBadPlacementValues(t *testing.T) {
	needGo(t)
	for _, args := range [][]string{{"--set", "placement.enable=false"}, {"--set", "placement.enabled=no"}} {
		_, err := manifests.Template(context.Background(), root, args...)
		if err == nil || !strings.Contains(err.Error(), "/placement") {
			t.Errorf("%v: %v, want the schema to refuse it naming /placement", args, err)
		}
	}
}

// A pod naming one of admissionPolicy.writableRuntimeClasses asks too
// (cgdelegate.asks follows cgdelegate.askVariables, where that value
// exists: rendered here without the schema, which may not know it yet),
// evaluated as the API server's CEL environment evaluates the match
// condition; without the value, the runtime class does not matter.
func TestChartPlacementFollowsWritableRuntimeClasses(t *testing.T) {
	needGo(t)
	asks := func(t *testing.T, args ...string) func(runtimeClass string, annotations map[string]string) bool {
		t.Helper()
		files, err := manifests.Template(context.Background(), root, append([]string{"--api-versions", manifests.MutatingAdmissionPolicyAPI}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var p admissionv1.MutatingAdmissionPolicy
		doc, _, _ := strings.Cut(string(files[manifests.PlacementPolicy]), "\n---\n")
		if err := sigsyaml.UnmarshalStrict([]byte(doc), &p); err != nil {
			t.Fatal(err)
		}
		base, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
		if err != nil {
			t.Fatal(err)
		}
		env, err := base.Extend(cel.Variable("object", cel.DynType))
		if err != nil {
			t.Fatal(err)
		}
		ast, iss := env.Compile(p.Spec.MatchConditions[0].Expression)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", p.Spec.MatchConditions[0].Name, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		return func(runtimeClass string, annotations map[string]string) bool {
			spec := map[string]any{}
			if runtimeClass != "" {
				spec["runtimeClassName"] = runtimeClass
			}
			meta := map[string]any{"name": "p"}
			if annotations != nil {
				meta["annotations"] = annotations
			}
			out, _, err := prg.Eval(map[string]any{"object": map[string]any{"metadata": meta, "spec": spec}})
			if err != nil {
				t.Fatal(err)
			}
			return out.Value() == true
		}
	}
	optIn := map[string]string{"writable-cgroups.noderesource.dev": "true"}
	with := asks(t, "--skip-schema-validation", "--set-json", `admissionPolicy.writableRuntimeClasses=["kata-writable"]`)
	without := asks(t)
	for _, tc := range []struct {
		class       string
		annotations map[string]string
		with, wo    bool
	}{
		{"kata-writable", nil, true, false},
		{"runc", nil, false, false},
		{"", nil, false, false},
		{"", optIn, true, true},
		{"runc", optIn, true, true},
		{"kata-writable", map[string]string{"writable-cgroups.noderesource.dev": "ReadOnly"}, true, false},
	} {
		if got := with(tc.class, tc.annotations); got != tc.with {
			t.Errorf("writableRuntimeClasses [kata-writable], runtimeClassName %q, annotations %v: asks %v, want %v", tc.class, tc.annotations, got, tc.with)
		}
		if got := without(tc.class, tc.annotations); got != tc.wo {
			t.Errorf("no writableRuntimeClasses, runtimeClassName %q, annotations %v: asks %v, want %v", tc.class, tc.annotations, got, tc.wo)
		}
	}
}
