package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
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

// sentinel is a package-level error of the code: var Name = errors.New(Text).
type sentinel struct{ file, name, text string }

// sentinels returns every package-level var set to errors.New("...") in the
// non-test Go files under dirs of fsys: the stable texts the binaries print
// (every error that reaches a user wraps one as "%w: detail").
func sentinels(fsys fs.FS, dirs ...string) ([]sentinel, error) {
	var out []sentinel
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
			for _, decl := range f.Decls {
				g, ok := decl.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, v := range vs.Values {
						if text, ok := errorsNew(v); ok {
							out = append(out, sentinel{file: p, name: vs.Names[i].Name, text: text})
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// errorsNew returns the text of errors.New("text").
func errorsNew(e ast.Expr) (string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "New" {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "errors" {
		return "", false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
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

// checkTroubleshooting returns a problem for every cause without a heading
// naming it in a code span (### `policy`: ...) and every sentinel whose
// text is in no code span of the page.
func checkTroubleshooting(md string, causes []refusal.Cause, errs []sentinel) []string {
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
	for _, s := range errs {
		if !slices.ContainsFunc(spans, func(span string) bool { return strings.Contains(span, s.text) }) {
			problems = append(problems, fmt.Sprintf("%s: no entry for %s (%s), whose message is %q: put the message in a code span with what it means and what to do",
				troubleshootingPage, s.name, s.file, s.text))
		}
	}
	return problems
}

func TestCheckTroubleshooting(t *testing.T) {
	fsys := fstest.MapFS{
		"internal/a/a.go":      {Data: []byte("package a\n\nimport \"errors\"\n\n// ErrA is a.\nvar ErrA = errors.New(\"a went wrong\")\n\nvar (\n\terrB = errors.New(`b \"quoted\"`)\n\tx    = 1\n\tErrC = fmt.Errorf(\"not a sentinel\")\n)\n")},
		"internal/a/a_test.go": {Data: []byte("package a\n\nimport \"errors\"\n\nvar errT = errors.New(\"test only\")\n")},
		"cmd/m/main.go":        {Data: []byte("package main\n\nimport \"errors\"\n\nfunc f() error { var e = errors.New(\"local\"); return e }\n")},
	}
	errs, err := sentinels(fsys, "internal", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	want := []sentinel{{"internal/a/a.go", "ErrA", "a went wrong"}, {"internal/a/a.go", "errB", `b "quoted"`}}
	if !slices.Equal(errs, want) {
		t.Fatalf("sentinels = %q, want %q", errs, want)
	}
	causes := []refusal.Cause{"policy", "other"}
	for _, tc := range []struct {
		name, md string
		want     []string
	}{
		{"complete", "# T\n\n## `policy`: refused\n\n### `other`\n\n| `a went wrong: detail` | x |\n\nprinted as `b \"quoted\"`.\n", nil},
		{"a cause only in prose", "# T\n\n## Policy\n\n`policy`\n\n## `other`\n\n`a went wrong`, `b \"quoted\"`\n", []string{`no heading for the refusal cause "policy"`}},
		{"a message only in a fenced block", "## `policy`\n## `other`\n\n```\na went wrong\n```\n`b \"quoted\"`\n", []string{"no entry for ErrA (internal/a/a.go)"}},
		{"a message over two lines", "## `policy`\n## `other`\n\n- `a went\n  wrong`, `b \"quoted\"`\n", nil},
		{"a message in plain text", "## `policy`\n## `other`\n\na went wrong, b \"quoted\"\n", []string{"no entry for ErrA", "no entry for errB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkTroubleshooting(tc.md, causes, errs)
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
// errors.New under internal/, delegate/ and cmd/).
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
	if len(errs) < 40 {
		t.Fatalf("found only %d errors.New sentinels: run from internal/doccheck in the module", len(errs))
	}
	for _, p := range checkTroubleshooting(string(md), refusal.Causes, errs) {
		t.Error(p)
	}
}
