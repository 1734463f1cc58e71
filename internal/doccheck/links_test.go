package doccheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

// slug is GitHub's anchor for a heading's text: lowercase, every character
// other than a letter, a digit, a space, '-' or '_' dropped, spaces to '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

var (
	fence   = regexp.MustCompile("^\\s{0,3}(```|~~~)")
	heading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	// A code span: a run of backticks, anything, the same run. Good enough
	// for our pages, which never nest them.
	codeSpan = regexp.MustCompile("(`+)[^`]*?(`+)")
	// An inline link or image: [text](target) or [text](target "title").
	// The text may span lines.
	link = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// A URL scheme such as https: or mailto:.
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose returns the text of a Markdown file without its fenced code blocks
// and code spans (blank lines and spaces in their place, so nothing joins).
func prose(md string) string {
	var out []string
	var open string // the fence that opened the current code block
	for _, line := range strings.Split(md, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
			case m[1] == open:
				open = ""
			}
			out = append(out, "")
			continue
		}
		if open != "" {
			out = append(out, "")
			continue
		}
		out = append(out, codeSpan.ReplaceAllStringFunc(line, func(s string) string {
			return strings.Repeat(" ", len(s))
		}))
	}
	return strings.Join(out, "\n")
}

// headingAnchors returns the anchors of the headings in a Markdown file.
// Headings are read from the raw lines (code spans in a heading count:
// their text is in the slug), outside fenced code blocks.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
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
		if open != "" {
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				anchors[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
	}
	return anchors
}

// links returns the targets of the inline links of a Markdown file, outside
// code, in order.
func links(md string) []string {
	var targets []string
	for _, m := range link.FindAllStringSubmatch(prose(md), -1) {
		targets = append(targets, m[1])
	}
	return targets
}

// check returns one problem per broken relative link in the named Markdown
// files of fsys: a target that does not exist, or an anchor that no heading
// of the target has. External links are skipped.
func check(fsys fs.FS, files []string) []string {
	var problems []string
	for _, file := range files {
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for _, target := range links(string(data)) {
			if target == "" || scheme.MatchString(target) {
				continue
			}
			ref, anchor, _ := strings.Cut(target, "#")
			dest := file
			if ref != "" {
				dest = path.Join(path.Dir(file), ref)
				if !fs.ValidPath(dest) {
					problems = append(problems, fmt.Sprintf("%s: link %q leaves the repository", file, target))
					continue
				}
				if _, err := fs.Stat(fsys, dest); err != nil {
					problems = append(problems, fmt.Sprintf("%s: link %q: %s does not exist", file, target, dest))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				problems = append(problems, fmt.Sprintf("%s: link %q: an anchor into %s, which is not Markdown", file, target, dest))
				continue
			}
			md, err := fs.ReadFile(fsys, dest)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: link %q: %v", file, target, err))
				continue
			}
			if !headingAnchors(string(md))[anchor] {
				problems = append(problems, fmt.Sprintf("%s: link %q: %s has no heading #%s", file, target, dest, anchor))
			}
		}
	}
	return problems
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"QoS: what NRI carries", "qos-what-nri-carries"},
		{"Fail closed, per pod", "fail-closed-per-pod"},
		{"Compared with the kubelet's pod-level resource managers", "compared-with-the-kubelets-pod-level-resource-managers"},
		{"CPU pinning (pod-level resource manager)", "cpu-pinning-pod-level-resource-manager"},
		{"kubectl exec and exec probes", "kubectl-exec-and-exec-probes"},
		{"The `make` targets", "the-make-targets"},
		{"snake_case and a-dash", "snake_case-and-a-dash"},
		{"Two  spaces", "two--spaces"},
		{"systemd as PID 1", "systemd-as-pid-1"},
	} {
		t.Run(tc.heading, func(t *testing.T) {
			if got := slug(tc.heading); got != tc.want {
				t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
			}
		})
	}
}

func TestLinks(t *testing.T) {
	for _, tc := range []struct {
		name, md string
		want     []string
	}{
		{"inline", "see [the docs](docs/a.md) and [b](#b).", []string{"docs/a.md", "#b"}},
		{"text over two lines", "see [Request\ntimeouts](#request-timeouts).", []string{"#request-timeouts"}},
		{"title", `[a](a.md "the a page")`, []string{"a.md"}},
		{"angle brackets", "[a](<a.md#x>)", []string{"a.md#x"}},
		{"image", "![logo](img/logo.png)", []string{"img/logo.png"}},
		{"external", "[nri](https://github.com/containerd/nri)", []string{"https://github.com/containerd/nri"}},
		{"code span", "`[not](a-link.md)` but [this](b.md)", []string{"b.md"}},
		{"fenced code", "```go\nx := a[i](j)\n[no](c.md)\n```\n[yes](d.md)", []string{"d.md"}},
		{"no target", "[plugins.\"io.containerd.nri.v1.nri\".default_validator]", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := links(tc.md); !slices.Equal(got, tc.want) {
				t.Errorf("links = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHeadingAnchors(t *testing.T) {
	md := "# Title\n\n## Usage\n\n```sh\n# a comment, not a heading\n```\n\n### Usage\n\n## `cgdelegate status` flags ##\n"
	got := headingAnchors(md)
	for _, want := range []string{"title", "usage", "usage-1", "cgdelegate-status-flags"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["a-comment-not-a-heading"] {
		t.Errorf("a comment in a code block became an anchor: %v", got)
	}
}

// TestCheck runs the check on literal pages, broken links included, so that
// it is known to fail when it should.
func TestCheck(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md": {Data: []byte("# cgdelegate\n\n## Quick start\n\n" +
			"[ok](docs/a.md), [ok](docs/a.md#how-it-works), [ok](#quick-start), [ok](contrib/), [ok](https://example.com/x#y)\n" +
			"[missing file](docs/nope.md), [missing anchor](docs/a.md#nope), [missing here](#nope)\n")},
		"docs/a.md": {Data: []byte("# A\n\n## How it works\n\n" +
			"[ok](../README.md#quick-start), [ok](../contrib/x.yaml)\n" +
			"[broken](../README.md#how-it-works), [outside](../../etc/passwd), [anchor in yaml](../contrib/x.yaml#l1)\n")},
		"contrib/x.yaml": {Data: []byte("a: 1\n")},
	}
	got := check(fsys, []string{"README.md", "docs/a.md"})
	want := []string{
		`README.md: link "docs/nope.md": docs/nope.md does not exist`,
		`README.md: link "docs/a.md#nope": docs/a.md has no heading #nope`,
		`README.md: link "#nope": README.md has no heading #nope`,
		`docs/a.md: link "../README.md#how-it-works": README.md has no heading #how-it-works`,
		`docs/a.md: link "../../etc/passwd" leaves the repository`,
		`docs/a.md: link "../contrib/x.yaml#l1": an anchor into contrib/x.yaml, which is not Markdown`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("check found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// docPages are the documentation's pages: docs/*.md and docs/*/*.md.
func docPages(root fs.FS) ([]string, error) {
	var pages []string
	for _, pattern := range []string{"docs/*.md", "docs/*/*.md"} {
		m, err := fs.Glob(root, pattern)
		if err != nil {
			return nil, err
		}
		pages = append(pages, m...)
	}
	if len(pages) == 0 {
		return nil, errors.New("no docs/*.md found: run from internal/doccheck in the module")
	}
	return pages, nil
}

// TestRepositoryLinks checks every page (allPages): README.md,
// CHANGELOG.md, docs/ and the READMEs under contrib/.
func TestRepositoryLinks(t *testing.T) {
	root := os.DirFS("../..")
	files, err := allPages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range check(root, files) {
		t.Error(p)
	}
}
