package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// The names a page gives that the code defines: a make target, a VM boot
// (variant), a VM scenario, an annotation or label key. A page may name
// only what exists; these checks read the code for the names, so a
// rename in the code fails here until the pages follow.

var (
	// makeTarget is a make command in copyable text: `make integration`,
	// `make release VERSION=v1.2.3`.
	makeTarget = regexp.MustCompile(`(?:^|[\s;&|(])make\s+([a-z][a-z0-9-]*)\b`)
	// makeRule is a rule of the Makefile: "name:" or "a b: deps", not "X := v".
	makeRule = regexp.MustCompile(`(?m)^([a-z][a-z0-9 -]*):(?:[^=]|$)`)
	// bootName is a VM boot's name: ctd24-..., ctd23-...
	bootName = regexp.MustCompile(`\bctd[0-9]+-[A-Za-z0-9-]*[A-Za-z0-9]`)
	// scenarioList is CGD_SCENARIOS=A,B,C.
	scenarioList = regexp.MustCompile(`\bCGD_SCENARIOS=([A-Za-z0-9,]+)`)
	// identSpan is a code span that is one Go-style identifier.
	identSpan = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	// annotationKey is a key of the project's own domains, an annotation
	// (cgroup-max-depth.cgdelegate.io, required-plugins.noderesource.dev/pod)
	// or a label (cgdelegate.io/writable-cgroups).
	annotationKey = regexp.MustCompile(`\b(?:[a-z0-9][a-z0-9-]*\.)*(?:cgdelegate\.io|noderesource\.dev)(?:/[a-z0-9][a-z0-9-]*[a-z0-9])?`)
)

// makeTargets are the rules of a Makefile.
func makeTargets(makefile string) map[string]bool {
	targets := map[string]bool{}
	for _, m := range makeRule.FindAllStringSubmatch(makefile, -1) {
		for _, t := range strings.Fields(m[1]) {
			targets[t] = true
		}
	}
	return targets
}

// checkMakeTargets returns a problem for every `make X` in the code spans
// and fenced blocks of a page whose X is not a target.
func checkMakeTargets(page, md string, targets map[string]bool) []string {
	var problems []string
	seen := map[string]bool{}
	for _, text := range codeText(md) {
		for _, m := range makeTarget.FindAllStringSubmatch(text, -1) {
			if t := m[1]; !targets[t] && !seen[t] {
				seen[t] = true
				problems = append(problems, fmt.Sprintf("%s: `make %s`: the Makefile has no target %s", where(page, md, "make "+t), t, t))
			}
		}
	}
	return problems
}

// checkBoots returns a problem for every boot name in the code spans and
// fenced blocks of a page that no variant has. A boot renamed since is
// named in plain text when a page must keep the old name (a dated
// measurement).
func checkBoots(page, md string, boots map[string]bool) []string {
	var problems []string
	seen := map[string]bool{}
	for _, text := range codeText(md) {
		for _, b := range bootName.FindAllString(text, -1) {
			if !boots[b] && !seen[b] {
				seen[b] = true
				problems = append(problems, fmt.Sprintf("%s: boot %s: no variant of integration/internal/variant is named so", where(page, md, b), b))
			}
		}
	}
	return problems
}

// checkScenarios returns a problem for every code span of a page that
// looks like a scenario (one identifier starting with a family's word:
// Cluster, Kubelet, Pinning) and is no scenario, and for every name in
// CGD_SCENARIOS=... that is none. idents are the other names the variant
// package declares (ClusterMark), which a page may name too.
func checkScenarios(page, md string, scenarios, idents map[string]bool, families []string) []string {
	var problems []string
	seen := map[string]bool{}
	bad := func(name string) {
		if !seen[name] {
			seen[name] = true
			problems = append(problems, fmt.Sprintf("%s: scenario %s: integration/internal/variant has no such scenario", where(page, md, name), name))
		}
	}
	for _, span := range codeSpans(md) {
		if !identSpan.MatchString(span) || scenarios[span] || idents[span] {
			continue
		}
		for _, f := range families {
			if rest, ok := strings.CutPrefix(span, f); ok && rest != "" && rest[0] >= 'A' && rest[0] <= 'Z' {
				bad(span)
			}
		}
	}
	for _, text := range codeText(md) {
		for _, m := range scenarioList.FindAllStringSubmatch(text, -1) {
			for name := range strings.SplitSeq(m[1], ",") {
				if name != "" && !scenarios[name] {
					bad(name)
				}
			}
		}
	}
	return problems
}

// checkAnnotationKeys returns a problem for every key of the project's
// domains a page names (anywhere: prose, spans, blocks) that is in no
// string of the code (literals, for Go; the text of chart templates).
// A scoped form names its base key: writable-cgroups.noderesource.dev/pod
// is writable-cgroups.noderesource.dev.
func checkAnnotationKeys(page, md string, code []string) []string {
	var problems []string
	seen := map[string]bool{}
	for _, k := range annotationKey.FindAllString(md, -1) {
		base := k
		if i := strings.Index(k, "/"); i >= 0 && !strings.HasPrefix(k, "cgdelegate.io/") && !strings.HasPrefix(k, "noderesource.dev/") {
			base = k[:i]
		}
		if seen[base] || slices.ContainsFunc(code, func(s string) bool { return strings.Contains(s, base) }) {
			continue
		}
		seen[base] = true
		problems = append(problems, fmt.Sprintf("%s: %s: no annotation or label of that name in the code or the chart", where(page, md, k), k))
	}
	return problems
}

// goStrings returns every string literal of the non-test Go files under
// dirs of fsys, and the Go declarations' names.
func goStrings(fsys fs.FS, dirs ...string) (literals []string, names map[string]bool, err error) {
	names = map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			src, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if n.Kind == token.STRING {
						if s, err := strconv.Unquote(n.Value); err == nil {
							literals = append(literals, s)
						}
					}
				case *ast.ValueSpec:
					for _, id := range n.Names {
						names[id.Name] = true
					}
				case *ast.TypeSpec:
					names[n.Name.Name] = true
				case *ast.FuncDecl:
					names[n.Name.Name] = true
				}
				return true
			})
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	return literals, names, nil
}

// scenarioConsts returns the values of the constants of type Scenario in
// the Go files of dir.
func scenarioConsts(fsys fs.FS, dir string) (map[string]bool, error) {
	scenarios := map[string]bool{}
	files, err := fs.Glob(fsys, dir+"/*.go")
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "Scenario" {
				return true
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						scenarios[s] = true
					}
				}
			}
			return true
		})
	}
	return scenarios, nil
}

// scenarioFamilies are the first words (Cluster, Kubelet) that at least
// five scenarios share.
func scenarioFamilies(scenarios map[string]bool) []string {
	count := map[string]int{}
	for s := range scenarios {
		i := 1
		for i < len(s) && (s[i] < 'A' || s[i] > 'Z') {
			i++
		}
		count[s[:i]]++
	}
	var families []string
	for w, n := range count {
		if n >= 5 {
			families = append(families, w)
		}
	}
	slices.Sort(families)
	return families
}

func TestMakeTargets(t *testing.T) {
	makefile := "GO ?= go\nX := y\n.PHONY: all test\n\nall: build\n\nbuild:\n\tgo build\ntest vet: build\n\t$(GO) test\n"
	targets := makeTargets(makefile)
	for _, want := range []string{"all", "build", "test", "vet"} {
		if !targets[want] {
			t.Errorf("makeTargets: no %q in %v", want, targets)
		}
	}
	if targets["X"] || targets["GO"] {
		t.Errorf("makeTargets took a variable for a target: %v", targets)
	}
	md := "# A\n\nRun `make test` and `make  build VERSION=v1`, then make anything in prose.\n\n```sh\nmake vet\ncd x && make integraton   # planted\n```\n\n`make tset`, and `make` alone.\n"
	got := checkMakeTargets("docs/a.md", md, targets)
	want := []string{
		"docs/a.md:10: `make tset`: the Makefile has no target tset",
		"docs/a.md:7: `make integraton`: the Makefile has no target integraton",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkMakeTargets =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestBoots(t *testing.T) {
	boots := map[string]bool{"ctd24-failclosed": true, "ctd24-Systemd-numa-smp4-Cluster": true, "ctd24-Systemd-numa-smp4-Cluster-fleet": true}
	md := "The boot `ctd24-failclosed`, `ctd24-Systemd-numa-smp4-Cluster-fleet` and\n`ctd24-Systemd-numa-smp4-Cluster`; then named ctd24-Kubelet in prose.\n\n" +
		"```sh\nCGD_VARIANTS=ctd24-failclosed make boots\n```\n\nNot `ctd24-failclosed-x` nor `ctd24-Systemd-Kubelet`.\n"
	got := checkBoots("docs/a.md", md, boots)
	want := []string{
		"docs/a.md:8: boot ctd24-failclosed-x: no variant of integration/internal/variant is named so",
		"docs/a.md:8: boot ctd24-Systemd-Kubelet: no variant of integration/internal/variant is named so",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkBoots =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestScenarios(t *testing.T) {
	scenarios := map[string]bool{"Harness": true, "ClusterNodeReady": true, "ClusterNodeLabel": true, "KubeletWritable": true}
	idents := map[string]bool{"ClusterMark": true}
	md := "`ClusterNodeReady`, `ClusterMark`, `KubeletResizeReason` (no family), `Cluster` alone,\n" +
		"`ClusterHelmUpgrade` was renamed.\n\n```sh\nCGD_SCENARIOS=Harness,ClusterNodeLabel,ClusterNodeLable make boots\n```\n"
	got := checkScenarios("docs/a.md", md, scenarios, idents, []string{"Cluster"})
	want := []string{
		"docs/a.md:2: scenario ClusterHelmUpgrade: integration/internal/variant has no such scenario",
		"docs/a.md:5: scenario ClusterNodeLable: integration/internal/variant has no such scenario",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkScenarios =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := scenarioFamilies(map[string]bool{"ClusterA": true, "ClusterB": true, "ClusterC": true, "ClusterD": true, "ClusterE": true, "KubeletA": true, "Harness": true}); !slices.Equal(got, []string{"Cluster"}) {
		t.Errorf("scenarioFamilies = %q, want [Cluster]", got)
	}
}

func TestAnnotationKeys(t *testing.T) {
	code := []string{"writable-cgroups.noderesource.dev", "cgroup-max-depth.cgdelegate.io", "label %s: cgdelegate.io/supports-cgroup-options", "'cgdelegate.io/writable-cgroups'"}
	md := "Annotate `writable-cgroups.noderesource.dev/container.<name>` or writable-cgroups.noderesource.dev/pod,\n" +
		"`cgroup-max-depth.cgdelegate.io: \"3\"`; label cgdelegate.io/writable-cgroups=allowed;\n" +
		"`kubectl label nodes --all cgdelegate.io/supports-cgroup-options-`.\n" +
		"Planted: `cgroup-max-depht.cgdelegate.io` and cgdelegate.io/supports-cgroups-options.\n"
	got := checkAnnotationKeys("docs/a.md", md, code)
	want := []string{
		"docs/a.md:4: cgroup-max-depht.cgdelegate.io: no annotation or label of that name in the code or the chart",
		"docs/a.md:4: cgdelegate.io/supports-cgroups-options: no annotation or label of that name in the code or the chart",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkAnnotationKeys =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestGoStrings(t *testing.T) {
	fsys := fstest.MapFS{
		"v/a.go":      {Data: []byte("package v\n\ntype Scenario string\n\nconst (\n\tA Scenario = \"A\"\n\tMark = \"M\"\n)\n\nfunc Suite() []string { return []string{`ctd24-x`} }\n")},
		"v/a_test.go": {Data: []byte("package v\n\nvar t = \"ctd24-test-only\"\n")},
	}
	lits, names, err := goStrings(fsys, "v")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lits, []string{"A", "M", "ctd24-x"}) {
		t.Errorf("goStrings literals = %q", lits)
	}
	for _, n := range []string{"Scenario", "A", "Mark", "Suite"} {
		if !names[n] {
			t.Errorf("goStrings names: no %s in %v", n, names)
		}
	}
	sc, err := scenarioConsts(fsys, "v")
	if err != nil || len(sc) != 1 || !sc["A"] {
		t.Errorf("scenarioConsts = %v, %v; want only A", sc, err)
	}
}

// TestRepositoryNames: every page but the changelog (namingPages) names only make targets of
// the Makefile, boots and scenarios of integration/internal/variant, and
// annotation and label keys the code or the chart uses.
func TestRepositoryNames(t *testing.T) {
	root := os.DirFS("../..")
	pages, err := namingPages(root)
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := fs.ReadFile(root, "Makefile")
	if err != nil {
		t.Fatal(err)
	}
	targets := makeTargets(string(makefile))
	if !targets["test"] || !targets["boots-extended"] {
		t.Fatalf("the Makefile's targets %v lack test or boots-extended: the rule pattern no longer reads it", targets)
	}
	const variantDir = "integration/internal/variant"
	variantStrings, variantNames, err := goStrings(root, variantDir)
	if err != nil {
		t.Fatal(err)
	}
	boots := map[string]bool{}
	for _, s := range variantStrings {
		if bootName.FindString(s) == s {
			boots[s] = true
		}
	}
	scenarios, err := scenarioConsts(root, variantDir)
	if err != nil {
		t.Fatal(err)
	}
	families := scenarioFamilies(scenarios)
	if len(boots) < 10 || len(scenarios) < 40 || !slices.Contains(families, "Cluster") {
		t.Fatalf("found %d boots, %d scenarios and the families %q in %s: the code no longer reads as this test expects", len(boots), len(scenarios), families, variantDir)
	}
	code, _, err := goStrings(root, "internal", "cmd", "delegate")
	if err != nil {
		t.Fatal(err)
	}
	templates, err := fs.Glob(root, "contrib/helm/cgdelegate/templates/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range templates {
		b, err := fs.ReadFile(root, p)
		if err != nil {
			t.Fatal(err)
		}
		code = append(code, string(b))
	}
	for _, page := range pages {
		b, err := fs.ReadFile(root, page)
		if err != nil {
			t.Fatal(err)
		}
		md := string(b)
		var problems []string
		problems = append(problems, checkMakeTargets(page, md, targets)...)
		problems = append(problems, checkBoots(page, md, boots)...)
		problems = append(problems, checkScenarios(page, md, scenarios, variantNames, families)...)
		problems = append(problems, checkAnnotationKeys(page, md, code)...)
		for _, p := range problems {
			t.Error(p)
		}
	}
}
