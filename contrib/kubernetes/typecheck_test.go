package kubernetes_test

import (
	"fmt"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/openapi/openapitest"
)

// coreOpenAPI serves the core/v1 OpenAPI v3 document client-go ships for
// its tests, as a discovery client would from an API server; nothing else
// of discovery is used.
type coreOpenAPI struct{ discovery.DiscoveryInterface }

func (coreOpenAPI) OpenAPIV3() openapi.Client { return openapitest.NewEmbeddedFileClient() }

// typeChecker is the API server's type checker for ValidatingAdmissionPolicy
// expressions (the one that fills status.typeChecking), resolving pods and
// nodes from core/v1's OpenAPI schema.
func typeChecker() *validating.TypeChecker {
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}})
	for _, kind := range []string{"Pod", "Node"} {
		mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: kind}, meta.RESTScopeRoot)
	}
	return &validating.TypeChecker{
		SchemaResolver: &resolver.ClientDiscoveryResolver{Discovery: coreOpenAPI{}},
		RestMapper:     mapper,
	}
}

// Every policy type-checks against the real Pod and Node schemas with no
// warning, as the API server would check it: each expression is checked
// with typed object and oldObject, not as dyn.
func TestPoliciesTypeCheck(t *testing.T) {
	tc := typeChecker()
	for _, file := range []string{policyFile, usernsFile, nodeLabelPolicyFile, uninstallPolicyFile} {
		for _, p := range loadManifest(t, file).policies {
			t.Run(p.Name, func(t *testing.T) {
				if w := tc.Check(&p); len(w) != 0 {
					t.Errorf("%s: type checking warnings: %+v", file, w)
				}
			})
		}
	}
}

// The checker does check types: a misspelt field and a string compared to
// a number are warned about.
func TestPoliciesTypeCheckCanFail(t *testing.T) {
	tc := typeChecker()
	p := loadManifest(t, nodeLabelPolicyFile).policies[0]
	for _, bad := range []string{"object.spec.taintz == oldObject.spec.taintz", "object.metadata.name == 1"} {
		q := p.DeepCopy()
		q.Spec.Validations = append(q.Spec.Validations, admissionv1.Validation{Expression: bad, Message: "x"})
		w := tc.Check(q)
		ref := fmt.Sprintf("spec.validations[%d].expression", len(p.Spec.Validations))
		if !slices.ContainsFunc(w, func(w admissionv1.ExpressionWarning) bool { return w.FieldRef == ref }) || len(w) != 1 {
			t.Errorf("%q: want one type checking warning, at %s; got %+v", bad, ref, w)
		}
	}
}
