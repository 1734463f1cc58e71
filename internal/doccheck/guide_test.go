package doccheck

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The user's guide says what to do and what happens, not how the project's
// own test harness proves it: that is docs/development.md's. A guide page
// names no scenario of integration/internal/variant, no boot (ctd24-...)
// and none of the harness's words (the VM suite, the emulator, TCG, qemu,
// the guest); it links to development.md instead. A mark (<!-- manifest:
// integration/guest/... -->) and a link's destination are not read: they
// are how a page points, not what it says.

var (
	// harnessWords are the words that narrate the test harness.
	harnessWords = regexp.MustCompile(`(?i)\bVM suite\b|\bthe emulator\b|\bTCG\b|\bqemu\b|\bguests?\b`)
	// htmlComment is an HTML comment, over lines too.
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
	// linkDest is the destination of an inline link: ](../x.md#a).
	linkDest = regexp.MustCompile(`\]\([^)\s]*\)`)
)

// guidePages are the pages of the user's guide: docs/*.md and
// docs/*/*.md but docs/development.md and docs/critest.md, which are about
// the project's own tests, and docs/security.md, whose test column names
// the test (a scenario among them) that plays each attack, for reviewers.
func guidePages(root fs.FS) ([]string, error) {
	pages, err := docPages(root)
	return slices.DeleteFunc(pages, func(p string) bool {
		return p == "docs/development.md" || p == "docs/critest.md" || p == "docs/security.md"
	}), err
}

// blankOut replaces every match of re in s by spaces, newlines kept, so
// that the lines of what is left still count as the page's.
func blankOut(s string, re *regexp.Regexp) string {
	return re.ReplaceAllStringFunc(s, func(m string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, m)
	})
}

// checkHarness returns a problem for every scenario, boot and harness word
// a guide page names, once per name and line.
func checkHarness(page, md string, scenarios map[string]bool) []string {
	text := blankOut(blankOut(md, htmlComment), linkDest)
	// A scenario of two words or more (ClusterRegistryUpgrade) is one
	// anywhere; one of a single word (Restarts, Harness) only in a code
	// span, since prose uses the word.
	var names, words []string
	for s := range scenarios {
		if strings.ContainsFunc(s[1:], unicode.IsUpper) {
			names = append(names, regexp.QuoteMeta(s))
		} else {
			words = append(words, regexp.QuoteMeta(s))
		}
	}
	slices.Sort(names)
	slices.Sort(words)
	scenario := regexp.MustCompile(`\b(?:` + strings.Join(names, "|") + `)\b|` + "`(?:" + strings.Join(words, "|") + ")`")
	var problems []string
	for i, line := range strings.Split(text, "\n") {
		seen := map[string]bool{}
		add := func(what, name string) {
			if !seen[name] {
				seen[name] = true
				problems = append(problems, fmt.Sprintf("%s:%d: %s %q: the user's guide does not narrate the test harness; say it in docs/development.md and link there", page, i+1, what, name))
			}
		}
		for _, s := range scenario.FindAllString(line, -1) {
			add("scenario", strings.Trim(s, "`"))
		}
		for _, b := range bootName.FindAllString(line, -1) {
			add("boot", b)
		}
		for _, w := range harnessWords.FindAllString(line, -1) {
			add("the words", w)
		}
	}
	return problems
}

func TestHarness(t *testing.T) {
	scenarios := map[string]bool{"ClusterRegistryUpgrade": true, "PodBounds": true, "Restarts": true}
	md := "# Install\n\nInstall it. <!-- manifest: integration/guest/testdata/a.yaml -->\n" +
		"How this is tested: [development](development.md#how-the-vm-suite-proves-the-install).\n" +
		"In the VM suite, `ClusterRegistryUpgrade` on `ctd24-Systemd-numa-smp4-Cluster` checks it;\n" +
		"PodBounds under TCG, in QEMU's guest; the emulator. ClusterRegistryUpgraded and PodBoundsX are other words.\n" +
		"<!--\nthe VM suite, in a comment\n-->\n## Restarts\n\nRestarts lose nothing; `Restarts` checks it.\n"
	got := checkHarness("docs/a.md", md, scenarios)
	want := []string{
		`docs/a.md:5: the words "VM suite": the user's guide does not narrate the test harness; say it in docs/development.md and link there`,
		`docs/a.md:5: scenario "ClusterRegistryUpgrade": the user's guide does not narrate the test harness; say it in docs/development.md and link there`,
		`docs/a.md:5: boot "ctd24-Systemd-numa-smp4-Cluster": the user's guide does not narrate the test harness; say it in docs/development.md and link there`,
		`docs/a.md:6: scenario "PodBounds": the user's guide does not narrate the test harness; say it in docs/development.md and link there`,
		`docs/a.md:6: the words "TCG": the user's guide does not narrate the test harness; say it in docs/development.md and link there`,
		`docs/a.md:6: the words "QEMU": the user's guide does not narrate the test harness; say it in docs/development.md and link there`,
		`docs/a.md:6: the words "guest": the user's guide does not narrate the test harness; say it in docs/development.md and link there`,
		`docs/a.md:6: the words "the emulator": the user's guide does not narrate the test harness; say it in docs/development.md and link there`,
		`docs/a.md:12: scenario "Restarts": the user's guide does not narrate the test harness; say it in docs/development.md and link there`,
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("checkHarness =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestGuideNamesNoHarness: no page of the user's guide names a scenario, a
// boot or the harness's words.
func TestGuideNamesNoHarness(t *testing.T) {
	root := os.DirFS("../..")
	scenarios, err := scenarioConsts(root, "integration/internal/variant")
	if err != nil {
		t.Fatal(err)
	}
	if len(scenarios) < 40 || !scenarios["ClusterRegistryUpgrade"] {
		t.Fatalf("found %d scenarios in integration/internal/variant, without ClusterRegistryUpgrade: the code no longer reads as this test expects", len(scenarios))
	}
	pages, err := guidePages(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pages, "docs/deploying.md") || slices.Contains(pages, "docs/development.md") {
		t.Fatalf("guide pages %q: want docs/deploying.md and not docs/development.md", pages)
	}
	for _, page := range pages {
		b, err := fs.ReadFile(root, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range checkHarness(page, string(b), scenarios) {
			t.Error(p)
		}
	}
}
