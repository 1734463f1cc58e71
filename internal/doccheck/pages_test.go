package doccheck

import (
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// allPages are every page a reader may open: README.md, CHANGELOG.md,
// docs/*.md and docs/*/*.md, and the README.md of any directory under
// contrib/ (the chart's, hooks.d's).
func allPages(root fs.FS) ([]string, error) {
	pages, err := docPages(root)
	if err != nil {
		return nil, err
	}
	pages = append([]string{"README.md", "CHANGELOG.md"}, pages...)
	err = fs.WalkDir(root, "contrib", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && path.Base(p) == "README.md" {
			pages = append(pages, p)
		}
		return err
	})
	return pages, err
}

// namingPages are the pages whose names must exist now: allPages but
// CHANGELOG.md, whose older sections name what a release removed or
// renamed.
func namingPages(root fs.FS) ([]string, error) {
	pages, err := allPages(root)
	return slices.DeleteFunc(pages, func(p string) bool { return p == "CHANGELOG.md" }), err
}

// lineOf is the 1-based line of the first s in md, 0 when it is not
// there (a code span that runs over lines).
func lineOf(md, s string) int {
	i := strings.Index(md, s)
	if i < 0 {
		return 0
	}
	return strings.Count(md[:i], "\n") + 1
}

// where names a page and, when found, the line of s in it: "docs/a.md:12".
func where(page, md, s string) string {
	if n := lineOf(md, s); n > 0 {
		return page + ":" + strconv.Itoa(n)
	}
	return page
}

// codeText is the text of a page a reader copies: its code spans and its
// fenced blocks, one string each. A page whose fences do not close gives
// only its code spans.
func codeText(md string) []string {
	texts := codeSpans(md)
	blocks, _ := Blocks(md)
	for _, b := range blocks {
		texts = append(texts, b.Text)
	}
	return texts
}
