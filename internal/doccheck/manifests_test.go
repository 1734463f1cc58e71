package doccheck

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// manifestMark names, on the line before a fenced code block, the file the
// block must equal byte for byte.
var manifestMark = regexp.MustCompile(`^<!-- manifest: (\S+) -->$`)

// manifestBlocks returns the marked code blocks of a Markdown file: the
// named file and the block's content (its lines, each with its newline).
// A mark without a fenced block right after it is a problem.
func manifestBlocks(file, md string) (map[string]string, []string) {
	blocks := map[string]string{}
	var problems []string
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		m := manifestMark.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || fence.FindStringSubmatch(lines[i+1]) == nil {
			problems = append(problems, fmt.Sprintf("%s:%d: manifest mark for %s without a fenced block on the next line", file, i+1, m[1]))
			continue
		}
		open := fence.FindStringSubmatch(lines[i+1])[1]
		var b strings.Builder
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != open; j++ {
			b.WriteString(lines[j] + "\n")
		}
		if j == len(lines) {
			problems = append(problems, fmt.Sprintf("%s:%d: the block of %s is never closed", file, i+2, m[1]))
			continue
		}
		if _, dup := blocks[m[1]]; dup {
			problems = append(problems, fmt.Sprintf("%s: %s shown twice", file, m[1]))
		}
		blocks[m[1]] = b.String()
		i = j
	}
	return blocks, problems
}

// checkManifests returns a problem for every marked block of the pages that
// differs from the file it names, and for every file matching tested that
// no page shows.
func checkManifests(fsys fs.FS, pages []string, tested string) []string {
	var problems []string
	shown := map[string]bool{}
	for _, page := range pages {
		md, err := fs.ReadFile(fsys, page)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		blocks, p := manifestBlocks(page, string(md))
		problems = append(problems, p...)
		names := make([]string, 0, len(blocks))
		for name := range blocks {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			shown[name] = true
			want, err := fs.ReadFile(fsys, name)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: manifest %s: %v", page, name, err))
				continue
			}
			if blocks[name] != string(want) {
				problems = append(problems, fmt.Sprintf("%s: the block of %s differs from the file the VM suite applies", page, name))
			}
		}
	}
	files, err := fs.Glob(fsys, tested)
	if err != nil {
		return append(problems, err.Error())
	}
	for _, f := range files {
		if !shown[f] {
			problems = append(problems, fmt.Sprintf("%s: no page shows it (<!-- manifest: %s --> before a fenced block)", f, f))
		}
	}
	return problems
}

func TestCheckManifests(t *testing.T) {
	pod := "apiVersion: v1\nkind: Pod\n"
	fsys := fstest.MapFS{
		"t/a.yaml":    {Data: []byte(pod)},
		"t/b.yaml":    {Data: []byte(pod)},
		"t/c.yaml":    {Data: []byte(pod)},
		"docs/ok.md":  {Data: []byte("# A\n\n<!-- manifest: t/a.yaml -->\n```yaml\n" + pod + "```\n")},
		"docs/bad.md": {Data: []byte("# B\n\n<!-- manifest: t/b.yaml -->\n```yaml\napiVersion: v1\nkind: Pod  \n```\n\n<!-- manifest: t/d.yaml -->\n```yaml\n```\n\n<!-- manifest: t/c.yaml -->\ntext\n")},
	}
	got := checkManifests(fsys, []string{"docs/bad.md", "docs/ok.md"}, "t/*.yaml")
	want := []string{
		"docs/bad.md:13: manifest mark for t/c.yaml without a fenced block on the next line",
		"docs/bad.md: the block of t/b.yaml differs from the file the VM suite applies",
		"docs/bad.md: manifest t/d.yaml: open t/d.yaml: file does not exist",
		"t/c.yaml: no page shows it (<!-- manifest: t/c.yaml --> before a fenced block)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkManifests found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRepositoryManifests: every manifest the VM suite's story scenarios
// apply (integration/guest/testdata/stories), and the AppArmor profile
// cgdelegate install-profiles writes, is shown on a page of docs/, byte for
// byte.
func TestRepositoryManifests(t *testing.T) {
	root := os.DirFS("../..")
	pages, err := docPages(root)
	if err != nil {
		t.Fatal(err)
	}
	tested, err := fs.Glob(root, "integration/guest/testdata/stories/*.yaml")
	if err != nil || len(tested) == 0 {
		t.Fatalf("no story manifests found (%v): run from internal/doccheck in the module", err)
	}
	for _, p := range checkManifests(root, pages, "integration/guest/testdata/stories/*.yaml") {
		t.Error(p)
	}
	// The AppArmor profile the installer writes is shown too
	// (docs/engine-profiles.md); the blocks were checked above.
	for _, p := range checkManifests(root, pages, "internal/lsmprofile/cgdelegate-engines") {
		if strings.Contains(p, "no page shows it") {
			t.Error(p)
		}
	}
}
