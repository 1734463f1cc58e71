package kubernetes_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/doccheck"
)

// The YAML blocks of the documentation (README.md, docs/*.md,
// docs/*/*.md) are checked here, where the admission policies can judge
// them:
//
//   - a block whose documents have apiVersion and kind is a manifest: each
//     document decodes strictly into its k8s.io/api type, passes the API
//     server's object-meta and container checks that need no cluster, and
//     every pod it makes (a Pod, or the pod template of a workload) is
//     admitted by the chart's default policy (writable-cgroups-policy.yaml)
//     in a namespace labelled cgdelegate.io/writable-cgroups=allowed, as
//     the docs tell a user to label theirs. A block marked
//     <!-- refused: TEXT --> on the line before it is a pod the page shows
//     being refused: the policy must deny it with one message containing
//     TEXT.
//   - any other YAML block is a part of something, and says what with
//     <!-- part of: KIND --> before it: Pod and PodSpec decode strictly into
//     that type, config parses as the plugin's config file
//     (docs/configuration.md), which also rejects unknown keys, and values
//     render the chart (go tool helm template -f), whose values schema
//     rejects an unknown key or a wrong type.
//
// A YAML block with neither fails the test, so nothing a user may copy goes
// unchecked.

// docKinds are the objects a page may show, by apiVersion/kind.
var docKinds = map[string]func() any{
	"v1/Pod":              func() any { return new(corev1.Pod) },
	"v1/Namespace":        func() any { return new(corev1.Namespace) },
	"v1/ConfigMap":        func() any { return new(corev1.ConfigMap) },
	"apps/v1/Deployment":  func() any { return new(appsv1.Deployment) },
	"apps/v1/DaemonSet":   func() any { return new(appsv1.DaemonSet) },
	"apps/v1/StatefulSet": func() any { return new(appsv1.StatefulSet) },
	"batch/v1/Job":        func() any { return new(batchv1.Job) },
}

// docsNamespace is the namespace a page's pod is judged in when it names
// none.
const docsNamespace = "docs"

// docPages are the pages whose YAML blocks are checked.
func docPages(t *testing.T) []string {
	t.Helper()
	var pages []string
	for _, pattern := range []string{"../../README.md", "../../docs/*.md", "../../docs/*/*.md"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, m...)
	}
	if len(pages) < 3 {
		t.Fatalf("found only %q: run from contrib/kubernetes in the module", pages)
	}
	return pages
}

var topLevelKind = regexp.MustCompile(`(?m)^kind:\s*\S`)

// isYAML: a block written as YAML, or one holding a manifest under another
// info string.
func isYAML(b doccheck.Block) bool {
	return b.Info == "yaml" || b.Info == "yml" || topLevelKind.MatchString(b.Text)
}

// podOf returns the pod an object makes (a Pod as is, a workload's pod
// template in the workload's namespace), or false.
func podOf(obj any) (corev1.Pod, bool) {
	tm := metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	template := func(ns string, pt corev1.PodTemplateSpec) corev1.Pod {
		pt.Namespace = ns
		return corev1.Pod{TypeMeta: tm, ObjectMeta: pt.ObjectMeta, Spec: pt.Spec}
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		return *o, true
	case *appsv1.Deployment:
		return template(o.Namespace, o.Spec.Template), true
	case *appsv1.DaemonSet:
		return template(o.Namespace, o.Spec.Template), true
	case *appsv1.StatefulSet:
		return template(o.Namespace, o.Spec.Template), true
	case *batchv1.Job:
		return template(o.Namespace, o.Spec.Template), true
	}
	return corev1.Pod{}, false
}

// validatePod runs the API server's checks of a pod that need no cluster:
// its object meta (name, annotation keys and size), and for each container
// a DNS-label name unique in the pod, an image, and requests within
// limits; the same for the pod-level resources.
func validatePod(p corev1.Pod, isTemplate bool) field.ErrorList {
	var errs field.ErrorList
	meta := p.ObjectMeta
	if isTemplate {
		// A template's pods get their names from the workload.
		errs = append(errs, apivalidation.ValidateAnnotations(meta.Annotations, field.NewPath("metadata", "annotations"))...)
	} else {
		errs = append(errs, apivalidation.ValidateObjectMeta(&meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	}
	spec := field.NewPath("spec")
	if len(p.Spec.Containers) == 0 {
		errs = append(errs, field.Required(spec.Child("containers"), "a pod needs a container"))
	}
	seen := map[string]bool{}
	check := func(path *field.Path, c corev1.Container) {
		for _, msg := range utilvalidation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(path.Child("name"), c.Name, msg))
		}
		if seen[c.Name] {
			errs = append(errs, field.Duplicate(path.Child("name"), c.Name))
		}
		seen[c.Name] = true
		if strings.TrimSpace(c.Image) == "" {
			errs = append(errs, field.Required(path.Child("image"), ""))
		}
		errs = append(errs, withinLimits(path.Child("resources"), c.Resources)...)
	}
	for i, c := range p.Spec.InitContainers {
		check(spec.Child("initContainers").Index(i), c)
	}
	for i, c := range p.Spec.Containers {
		check(spec.Child("containers").Index(i), c)
	}
	if p.Spec.Resources != nil {
		errs = append(errs, withinLimits(spec.Child("resources"), *p.Spec.Resources)...)
	}
	return errs
}

// withinLimits: every request with a limit is at most that limit.
func withinLimits(path *field.Path, r corev1.ResourceRequirements) field.ErrorList {
	var errs field.ErrorList
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(path.Child("requests").Key(string(name)), req.String(), "must be less than or equal to "+name.String()+" limit of "+lim.String()))
		}
	}
	return errs
}

// checkManifest decodes and judges one manifest block; base is the chart's
// default policy. It returns the problems found and the number of pods
// judged.
func checkManifest(t *testing.T, base policy, b doccheck.Block) (problems []string, pods int) {
	t.Helper()
	objs, err := decodeDocuments([]byte(b.Text), docKinds)
	if err != nil {
		return []string{fmt.Sprintf("decode: %v", err)}, 0
	}
	refusedBy, refused := b.Mark("refused")
	if refused && refusedBy == "" {
		return []string{"<!-- refused: TEXT -->: TEXT, a part of the denial's message, is missing"}, 0
	}
	for _, obj := range objs {
		p, ok := podOf(obj)
		if !ok {
			continue
		}
		pods++
		_, isPod := obj.(*corev1.Pod)
		if p.Namespace == "" {
			p.Namespace = docsNamespace
		}
		for _, e := range validatePod(p, !isPod) {
			problems = append(problems, fmt.Sprintf("pod %s: %v", p.Name, e))
		}
		ns := namespaceNamed(t, p.Namespace, map[string]string{nsLabel: "allowed"})
		got, err := base.admit(asMap(t, p), ns)
		if err != nil {
			return append(problems, fmt.Sprintf("%s: %v", base.name, err)), pods
		}
		switch {
		case refused && (len(got) != 1 || !strings.Contains(got[0], refusedBy)):
			problems = append(problems, fmt.Sprintf("pod %s is marked refused with %q; the policy's denials: %q", p.Name, refusedBy, got))
		case !refused && len(got) != 0:
			problems = append(problems, fmt.Sprintf("pod %s is denied by %s in a namespace labelled %s=allowed: %q "+
				"(fix the page, or mark the block <!-- refused: TEXT --> if the page shows a refusal)", p.Name, base.name, nsLabel, got))
		}
	}
	if refused && pods == 0 {
		problems = append(problems, "marked refused, but the block makes no pod")
	}
	return problems, pods
}

// checkPart decodes a block marked <!-- part of: KIND --> strictly as that
// kind; values (the chart's) are rendered with the chart, whose schema
// rejects an unknown key or a wrong type.
func checkPart(t *testing.T, kind string, b doccheck.Block) error {
	t.Helper()
	var err error
	switch kind {
	case "values":
		err = renderWithValues(t, b.Text)
	case "Pod":
		err = sigsyaml.UnmarshalStrict([]byte(b.Text), new(corev1.Pod))
	case "PodSpec":
		err = sigsyaml.UnmarshalStrict([]byte(b.Text), new(corev1.PodSpec))
	case "config":
		_, err = config.Parse(strings.NewReader(b.Text))
	default:
		return fmt.Errorf("<!-- part of: %s -->: unknown kind, want Pod, PodSpec, config or values", kind)
	}
	if err != nil {
		return fmt.Errorf("part of %s: %w", kind, err)
	}
	return nil
}

// renderWithValues renders the chart with values as a values file (-f) and
// returns helm's error, which names the key a schema check refused.
func renderWithValues(t *testing.T, values string) error {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go on PATH to run go tool helm: %v", err)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
		return err
	}
	cmd := exec.Command("go", "tool", "helm", "template", "cgdelegate", "../helm/cgdelegate", "--namespace", "kube-system", "-f", file)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // helm's one build (Makefile, chart)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm template -f: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// checkDocBlocks checks every YAML block of the page md and returns a
// problem per fault, each prefixed with page:line, and the number of pods
// judged.
func checkDocBlocks(t *testing.T, base policy, page, md string) (problems []string, pods int) {
	t.Helper()
	blocks, err := doccheck.Blocks(md)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", page, err)}, 0
	}
	for _, b := range blocks {
		if !isYAML(b) {
			continue
		}
		at := fmt.Sprintf("%s:%d: ", page, b.Line)
		if kind, ok := b.Mark("part of"); ok {
			if err := checkPart(t, kind, b); err != nil {
				problems = append(problems, at+err.Error())
			}
			continue
		}
		if !topLevelKind.MatchString(b.Text) {
			problems = append(problems, at+"a YAML block that is neither a manifest (apiVersion and kind) nor marked "+
				"<!-- part of: Pod|PodSpec|config|values --> on the line before it")
			continue
		}
		p, n := checkManifest(t, base, b)
		for _, s := range p {
			problems = append(problems, at+s)
		}
		pods += n
	}
	return problems, pods
}

// TestDocsManifests: every YAML block of the documentation decodes
// strictly, and every pod the pages show is admitted by the chart's
// default admission policy, or refused where the page says so.
func TestDocsManifests(t *testing.T) {
	base, _ := policies(t)
	pods := 0
	for _, page := range docPages(t) {
		md, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		problems, n := checkDocBlocks(t, base, strings.TrimPrefix(page, "../../"), string(md))
		for _, p := range problems {
			t.Error(p)
		}
		pods += n
	}
	// The pages show at least the three in-pod examples and the four
	// stories; fewer means the blocks were not found.
	if pods < 7 {
		t.Errorf("judged %d pods in the docs, want at least 7", pods)
	}
}

// TestDocsManifestsFail runs the check on literal pages, broken blocks
// included, so that it is known to fail when it should.
func TestDocsManifestsFail(t *testing.T) {
	base, _ := policies(t)
	const (
		asks       = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    writable-cgroups.noderesource.dev: \"true\"\n"
		required   = "    required-plugins.noderesource.dev: '[\"cgdelegate\"]'\n"
		containers = "spec:\n  containers:\n  - name: app\n    image: busybox\n"
		deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ml}\nspec:\n  selector: {matchLabels: {a: b}}\n  template:\n" +
			"    metadata:\n      labels: {a: b}\n      annotations: {writable-cgroups.noderesource.dev: \"true\"}\n    spec: {containers: [{name: a, image: b}]}\n"
	)
	for _, tc := range []struct {
		name, md string
		// want is a substring of the one problem, "" for none.
		want string
	}{
		{"admitted", "```yaml\n" + asks + required + containers + "```\n", ""},
		{"without required-plugins", "```yaml\n" + asks + containers + "```\n", "page.md:1: pod p is denied by cgdelegate-writable-cgroups"},
		{"refused as marked", "<!-- refused: must also carry the annotation required-plugins -->\n```yaml\n" + asks + containers + "```\n", ""},
		{"marked refused, admitted", "<!-- refused: required-plugins -->\n```yaml\n" + asks + required + containers + "```\n", `pod p is marked refused with "required-plugins"; the policy's denials: []`},
		{"marked refused by another message", "<!-- refused: not labelled -->\n```yaml\n" + asks + containers + "```\n", `marked refused with "not labelled"`},
		{"refused without text", "<!-- refused -->\n```yaml\n" + asks + containers + "```\n", "TEXT, a part of the denial's message, is missing"},
		{"a misspelt field", "```yaml\n" + asks + required + "spec:\n  containers:\n  - name: app\n    imge: busybox\n```\n", `unknown field "imge"`},
		{"no image", "```yaml\n" + asks + required + "spec:\n  containers:\n  - name: app\n```\n", "spec.containers[0].image: Required value"},
		{"no container", "```yaml\n" + asks + required + "```\n", "spec.containers: Required value"},
		{"a bad container name", "```yaml\n" + asks + required + "spec:\n  containers:\n  - name: App_1\n    image: busybox\n```\n", `spec.containers[0].name: Invalid value: "App_1"`},
		{"two containers of one name", "```yaml\n" + asks + required + containers + "  - name: app\n    image: busybox\n```\n", `spec.containers[1].name: Duplicate value: "app"`},
		{"a bad pod name", "```yaml\n" + strings.Replace(asks, "name: p", "name: P_1", 1) + required + containers + "```\n", "metadata.name: Invalid value"},
		{"a bad annotation key", "```yaml\n" + asks + required + "    a b: c\n" + containers + "```\n", "metadata.annotations: Invalid value"},
		{"request over limit", "```yaml\n" + asks + required + containers + "    resources: {requests: {cpu: 2}, limits: {cpu: 1}}\n```\n", "must be less than or equal to cpu limit of 1"},
		{"a pod-level request over limit", "```yaml\n" + asks + required + containers + "  resources: {requests: {cpu: 2}, limits: {cpu: 1}}\n```\n", "spec.resources.requests[cpu]"},
		{"a deployment's template", "```yaml\n" + deployment + "```\n", "pod  is denied by cgdelegate-writable-cgroups"},
		{"the second document", "```yaml\n" + asks + required + containers + "---\n" + asks + containers + "```\n", "page.md:1: pod p is denied"},
		{"an unknown kind", "```yaml\napiVersion: v1\nkind: Pdo\n```\n", `unexpected apiVersion "v1" kind "Pdo"`},
		{"an unmarked fragment", "text\n\n```yaml\nnodeSelector:\n  a: b\n```\n", "page.md:3: a YAML block that is neither"},
		{"a PodSpec fragment", "<!-- part of: PodSpec -->\n```yaml\nnodeSelector:\n  a: b\n```\n", ""},
		{"a misspelt PodSpec fragment", "<!-- part of: PodSpec -->\n```yaml\nnodeSelecter:\n  a: b\n```\n", `part of PodSpec: error unmarshaling JSON: while decoding JSON: json: unknown field "nodeSelecter"`},
		{"a Pod fragment", "<!-- part of: Pod -->\n```yaml\nmetadata:\n  annotations:\n    a: b\n```\n", ""},
		{"a config fragment", "<!-- part of: config -->\n```yaml\noptIn:\n  namespaces: [a]\n```\n", ""},
		{"a misspelt config key", "<!-- part of: config -->\n```yaml\noptin:\n  namespaces: [a]\n```\n", "part of config: "},
		{"an unknown part", "<!-- part of: Node -->\n```yaml\na: b\n```\n", "unknown kind, want Pod, PodSpec, config or values"},
		{"chart values", "<!-- part of: values -->\n```yaml\nadmissionPolicy:\n  allowedNamespaces: [ci]\n```\n", ""},
		{"misspelt chart values", "<!-- part of: values -->\n```yaml\nadmissionPolicy:\n  allowedNamespace: [ci]\n```\n", "additional properties 'allowedNamespace' not allowed"},
		{"not YAML", "```sh\nkubectl apply -f x.yaml\n```\n", ""},
		{"a manifest under another info string", "```\n" + asks + containers + "```\n", "pod p is denied"},
		{"never closed", "```yaml\n" + asks, "page.md: line 1: the code block is never closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the values cases run helm, seconds each
			got, _ := checkDocBlocks(t, base, "page.md", tc.md)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("problems %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("problems %q, want one containing %q", got, tc.want)
			}
		})
	}
}
