package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

// troubleshootingPage is the page keyed by every refusal cause and every
// error the code defines.
const troubleshootingPage = "docs/troubleshooting.md"

// sentinel is a package-level error of the code: var Name = errors.New(Text),
// or such an error made a refusal where it is declared, directly
// (refusal.New(refusal.Cause, errors.New(Text))) or by a helper of its
// package (pinningRefusal(Text)); cause is then the name of the refusal
// package's constant (Pinning), else "".
type sentinel struct{ file, name, text, cause string }

// helper is a function of a package that makes a sentinel of its one
// string argument, with the refusal cause it gives it ("" for none).
type helper struct{ cause string }

// sentinels returns every package-level sentinel (see sentinel) in the
// non-test Go files under dirs of fsys: the stable texts the binaries print
// (every error that reaches a user wraps one as "%w: detail").
func sentinels(fsys fs.FS, dirs ...string) ([]sentinel, error) {
	// The Go files by directory: a package's helpers serve its files.
	byDir := map[string][]string{}
	var order []string
	for _, dir := range dirs {
		err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			dir := path.Dir(p)
			if byDir[dir] == nil {
				order = append(order, dir)
			}
			byDir[dir] = append(byDir[dir], p)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var out []sentinel
	fset := token.NewFileSet()
	for _, dir := range order {
		files := map[string]*ast.File{}
		helpers := map[string]helper{}
		for _, p := range byDir[dir] {
			src, err := fs.ReadFile(fsys, p)
			if err != nil {
				return nil, err
			}
			f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			files[p] = f
			for _, decl := range f.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok {
					if h, ok := helperOf(fn); ok {
						helpers[fn.Name.Name] = h
					}
				}
			}
		}
		for _, p := range byDir[dir] {
			for _, decl := range files[p].Decls {
				g, ok := decl.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, v := range vs.Values {
						if e, ok := errorValue(v, "", helpers); ok && !e.fromParam {
							out = append(out, sentinel{file: p, name: vs.Names[i].Name, text: e.text, cause: e.cause})
						}
					}
				}
			}
		}
	}
	return out, nil
}

// errorVal is what errorValue read: the error's text, or (fromParam) the
// parameter it comes from, and its refusal cause's constant name.
type errorVal struct {
	text      string
	fromParam bool
	cause     string
}

// errorValue reads e as errors.New("text") (or errors.New(param) when param
// is not ""), refusal.New(refusal.Cause, <such an error>), or a call
// helper("text") of one of helpers.
func errorValue(e ast.Expr, param string, helpers map[string]helper) (errorVal, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return errorVal{}, false
	}
	if fn, ok := call.Fun.(*ast.Ident); ok && len(call.Args) == 1 {
		h, ok := helpers[fn.Name]
		text, isLit := stringLit(call.Args[0])
		if !ok || !isLit {
			return errorVal{}, false
		}
		return errorVal{text: text, cause: h.cause}, true
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return errorVal{}, false
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return errorVal{}, false
	}
	switch {
	case pkg.Name == "errors" && sel.Sel.Name == "New" && len(call.Args) == 1:
		if text, ok := stringLit(call.Args[0]); ok {
			return errorVal{text: text}, true
		}
		if id, ok := call.Args[0].(*ast.Ident); ok && param != "" && id.Name == param {
			return errorVal{fromParam: true}, true
		}
	case pkg.Name == "refusal" && sel.Sel.Name == "New" && len(call.Args) == 2:
		c, ok := call.Args[0].(*ast.SelectorExpr)
		if x, isIdent := c.X.(*ast.Ident); !ok || !isIdent || x.Name != "refusal" {
			return errorVal{}, false
		}
		inner, ok := errorValue(call.Args[1], param, helpers)
		if !ok {
			return errorVal{}, false
		}
		inner.cause = c.Sel.Name
		return inner, true
	}
	return errorVal{}, false
}

// helperOf reads fn as a helper: a function of one string parameter whose
// body is one return of errors.New of it, made a refusal or not.
func helperOf(fn *ast.FuncDecl) (helper, bool) {
	if fn.Recv != nil || fn.Body == nil || len(fn.Body.List) != 1 {
		return helper{}, false
	}
	params := fn.Type.Params.List
	if len(params) != 1 || len(params[0].Names) != 1 {
		return helper{}, false
	}
	if typ, ok := params[0].Type.(*ast.Ident); !ok || typ.Name != "string" {
		return helper{}, false
	}
	ret, ok := fn.Body.List[0].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return helper{}, false
	}
	e, ok := errorValue(ret.Results[0], params[0].Names[0].Name, nil)
	if !ok || !e.fromParam {
		return helper{}, false
	}
	return helper{cause: e.cause}, true
}

// stringLit is the value of a string literal.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// causeConsts maps the names of the refusal package's Cause constants
// (Pinning) to their values (pinning), read from its source in fsys.
func causeConsts(fsys fs.FS, file string) (map[string]refusal.Cause, error) {
	src, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, err
	}
	f, err := parser.ParseFile(token.NewFileSet(), file, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]refusal.Cause{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "Cause" {
			return true
		}
		for i, v := range vs.Values {
			if s, ok := stringLit(v); ok {
				out[vs.Names[i].Name] = refusal.Cause(s)
			}
		}
		return true
	})
	return out, nil
}

// codeSpans returns the text of the code spans of a page's prose (outside
// fenced blocks), headings and table cells included. A span may run over
// lines, as in Markdown; its line breaks read as spaces.
func codeSpans(md string) []string {
	var text []string
	var open string
	for _, line := range strings.Split(md, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
			case m[1] == open:
				open = ""
			}
			text = append(text, "")
			continue
		}
		if open == "" {
			text = append(text, line)
		}
	}
	var spans []string
	for _, m := range codeSpan.FindAllString(strings.Join(text, "\n"), -1) {
		spans = append(spans, strings.Join(strings.Fields(strings.Trim(m, "`")), " "))
	}
	return spans
}

// headingLines returns the heading lines of a page, outside fenced blocks.
func headingLines(md string) []string {
	var lines []string
	var open string
	for _, line := range strings.Split(md, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
			case m[1] == open:
				open = ""
			}
			continue
		}
		if open == "" && heading.MatchString(line) {
			lines = append(lines, line)
		}
	}
	return lines
}

// causeSections returns, for each refusal cause a heading names first in a
// code span (### `policy`: ...), the code spans of the text below that
// heading, up to the next heading.
func causeSections(md string) map[string][]string {
	out := map[string][]string{}
	var cause string
	var body []string
	flush := func() {
		if cause != "" {
			out[cause] = append(out[cause], codeSpans(strings.Join(body, "\n"))...)
		}
	}
	var open string
	for _, line := range strings.Split(md, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
			case m[1] == open:
				open = ""
			}
		}
		if open == "" && heading.MatchString(line) {
			flush()
			cause, body = "", nil
			if spans := codeSpans(line); len(spans) > 0 {
				cause = spans[0]
			}
			continue
		}
		body = append(body, line)
	}
	flush()
	return out
}

// checkTroubleshooting returns a problem for every cause without a heading
// naming it in a code span (### `policy`: ...), every sentinel whose
// text is in no code span of the page, and every sentinel made a refusal
// where it is declared (its cause the name of a constant of causeOf)
// whose text is on the page but not under its cause's heading.
func checkTroubleshooting(md string, causes []refusal.Cause, errs []sentinel, causeOf map[string]refusal.Cause) []string {
	var problems []string
	var headingSpans []string
	// The code spans of the headings, outside fenced blocks.
	for _, h := range headingLines(md) {
		headingSpans = append(headingSpans, codeSpans(h)...)
	}
	for _, c := range causes {
		if !slices.Contains(headingSpans, string(c)) {
			problems = append(problems, fmt.Sprintf("%s: no heading for the refusal cause %q (e.g. ### `%s`: what it means)", troubleshootingPage, c, c))
		}
	}
	spans := codeSpans(md)
	sections := causeSections(md)
	for _, s := range errs {
		has := func(span string) bool { return strings.Contains(span, s.text) }
		if !slices.ContainsFunc(spans, has) {
			problems = append(problems, fmt.Sprintf("%s: no entry for %s (%s), whose message is %q: put the message in a code span with what it means and what to do",
				troubleshootingPage, s.name, s.file, s.text))
			continue
		}
		if s.cause == "" {
			continue
		}
		c, ok := causeOf[s.cause]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: %s (%s) is a refusal of refusal.%s, which is no refusal cause", troubleshootingPage, s.name, s.file, s.cause))
		case !slices.ContainsFunc(sections[string(c)], has):
			problems = append(problems, fmt.Sprintf("%s: the entry for %s (%s), %q, is not under the heading of its cause, `%s`", where(troubleshootingPage, md, s.text), s.name, s.file, s.text, c))
		}
	}
	return problems
}

func TestCheckTroubleshooting(t *testing.T) {
	fsys := fstest.MapFS{
		"internal/a/a.go": {Data: []byte("package a\n\nimport \"errors\"\n\n// ErrA is a.\nvar ErrA = errors.New(\"a went wrong\")\n\nvar (\n\terrB = errors.New(`b \"quoted\"`)\n\tx    = 1\n\tErrC = fmt.Errorf(\"not a sentinel\")\n" +
			"\tErrD = refusal.New(refusal.Policy, errors.New(\"d refused\"))\n\tErrE = policyRefusal(\"e refused\")\n\tErrF = other(\"not a helper's\")\n)\n\n" +
			"func policyRefusal(text string) error { return refusal.New(refusal.Policy, errors.New(text)) }\n\nfunc other(s string) error { return fmt.Errorf(\"%s\", s) }\n")},
		"internal/a/a_test.go": {Data: []byte("package a\n\nimport \"errors\"\n\nvar errT = errors.New(\"test only\")\n")},
		"internal/b/b.go":      {Data: []byte("package b\n\nvar ErrG = policyRefusal(\"another package's helper\")\n")},
		"cmd/m/main.go":        {Data: []byte("package main\n\nimport \"errors\"\n\nfunc f() error { var e = errors.New(\"local\"); return e }\n")},
	}
	errs, err := sentinels(fsys, "internal", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	want := []sentinel{
		{"internal/a/a.go", "ErrA", "a went wrong", ""},
		{"internal/a/a.go", "errB", `b "quoted"`, ""},
		{"internal/a/a.go", "ErrD", "d refused", "Policy"},
		{"internal/a/a.go", "ErrE", "e refused", "Policy"},
	}
	if !slices.Equal(errs, want) {
		t.Fatalf("sentinels = %q, want %q", errs, want)
	}
	causes := []refusal.Cause{"policy", "other"}
	causeOf := map[string]refusal.Cause{"Policy": "policy", "Other": "other"}
	for _, tc := range []struct {
		name, md string
		want     []string
	}{
		{"complete", "# T\n\n## `policy`: refused\n\n`d refused`, `e refused: detail`\n\n### `other`\n\n| `a went wrong: detail` | x |\n\nprinted as `b \"quoted\"`.\n", nil},
		{"a cause only in prose", "# T\n\n## Policy\n\n`policy`, `d refused`, `e refused`\n\n## `other`\n\n`a went wrong`, `b \"quoted\"`\n", []string{
			`no heading for the refusal cause "policy"`,
			"the entry for ErrD (internal/a/a.go), \"d refused\", is not under the heading of its cause, `policy`",
			"the entry for ErrE (internal/a/a.go), \"e refused\", is not under the heading of its cause, `policy`",
		}},
		{"a message only in a fenced block", "## `policy`\n`d refused`, `e refused`\n## `other`\n\n```\na went wrong\n```\n`b \"quoted\"`\n", []string{"no entry for ErrA (internal/a/a.go)"}},
		{"a message over two lines", "## `policy`\n`d\n refused`, `e refused`\n## `other`\n\n- `a went\n  wrong`, `b \"quoted\"`\n", nil},
		{"a message in plain text", "## `policy`\n`d refused` `e refused`\n## `other`\n\na went wrong, b \"quoted\"\n", []string{"no entry for ErrA", "no entry for errB"}},
		{"a refusal under another cause", "## `policy`\n`d refused`\n## `other`\n\n`a went wrong`, `b \"quoted\"`, `e refused`\n", []string{
			"troubleshooting.md:5: the entry for ErrE (internal/a/a.go), \"e refused\", is not under the heading of its cause, `policy`",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkTroubleshooting(tc.md, causes, errs, causeOf)
			if len(got) != len(tc.want) {
				t.Fatalf("problems\n%s\nwant %d: %q", strings.Join(got, "\n"), len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %q does not contain %q", got[i], tc.want[i])
				}
			}
		})
	}
}

// TestTroubleshootingCoversEveryError: docs/troubleshooting.md has a
// heading for every refusal cause (refusal.Causes, the cause label of
// cgdelegate_refusals_total) and an entry for every error the plugin, the
// hook, cgdelegate-init and the status command define (every package-level
// sentinel under internal/, delegate/ and cmd/), each refusal declared with
// its cause under that cause's heading.
func TestTroubleshootingCoversEveryError(t *testing.T) {
	root := os.DirFS("../..")
	md, err := fs.ReadFile(root, troubleshootingPage)
	if err != nil {
		t.Fatal(err)
	}
	errs, err := sentinels(root, "internal", "delegate", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	withCause := 0
	for _, s := range errs {
		if s.cause != "" {
			withCause++
		}
	}
	if len(errs) < 40 || withCause < 5 {
		t.Fatalf("found only %d sentinels, %d of them refusals with their cause: run from internal/doccheck in the module", len(errs), withCause)
	}
	causeOf, err := causeConsts(root, "internal/refusal/refusal.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(causeOf) != len(refusal.Causes) {
		t.Fatalf("internal/refusal/refusal.go declares %d Cause constants, refusal.Causes lists %d", len(causeOf), len(refusal.Causes))
	}
	for _, p := range checkTroubleshooting(string(md), refusal.Causes, errs, causeOf) {
		t.Error(p)
	}
}
