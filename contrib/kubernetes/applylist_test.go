package kubernetes_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// optionalManifests are the files of contrib/kubernetes/ the chart's
// default install does not have.
var optionalManifests = []string{"writable-cgroups-userns-policy.yaml", "placement-policy.yaml"}

// applyFile is one -f of a kubectl apply, a file of contrib/kubernetes/.
var applyFile = regexp.MustCompile(`-f\s+contrib/kubernetes/(\S+\.yaml)`)

// applyLists returns the files of every kubectl apply command on a page
// that applies daemonset.yaml (a whole install), a command's continuation
// lines (ending in \) included.
func applyLists(page string) [][]string {
	var lists [][]string
	lines := strings.Split(page, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.Contains(lines[i], "kubectl apply") {
			continue
		}
		cmd := lines[i]
		for strings.HasSuffix(strings.TrimSpace(lines[i]), `\`) && i+1 < len(lines) {
			i++
			cmd += " " + lines[i]
		}
		var files []string
		for _, m := range applyFile.FindAllStringSubmatch(cmd, -1) {
			files = append(files, m[1])
		}
		if slices.Contains(files, "daemonset.yaml") {
			lists = append(lists, files)
		}
	}
	return lists
}

// TestApplyListIsTheDefaultInstall: the plain-manifest install the docs
// show applies every default manifest (every file of contrib/kubernetes/
// but the optional ones), each once, the DaemonSet last, and README.md
// shows no other list.
func TestApplyListIsTheDefaultInstall(t *testing.T) {
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range paths {
		if !slices.Contains(optionalManifests, p) {
			want = append(want, p)
		}
	}
	deploying, err := os.ReadFile("../../docs/deploying.md")
	if err != nil {
		t.Fatal(err)
	}
	lists := applyLists(string(deploying))
	if len(lists) != 1 {
		t.Fatalf("docs/deploying.md has %d kubectl apply commands of the DaemonSet, want 1: %q", len(lists), lists)
	}
	got := lists[0]
	if got[len(got)-1] != "daemonset.yaml" {
		t.Errorf("docs/deploying.md applies %q: the DaemonSet is not last", got)
	}
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if !slices.Equal(sorted, want) {
		t.Errorf("docs/deploying.md applies %q; the chart's default install is %q", sorted, want)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if l := applyLists(string(readme)); len(l) != 0 {
		t.Errorf("README.md has its own apply list %q; it links to docs/deploying.md", l)
	}
}

func TestApplyLists(t *testing.T) {
	page := "kubectl apply -f contrib/kubernetes/a.yaml \\\n    -f contrib/kubernetes/daemonset.yaml\n" +
		"kubectl apply -f contrib/kubernetes/policy.yaml\n"
	got := applyLists(page)
	if len(got) != 1 || !slices.Equal(got[0], []string{"a.yaml", "daemonset.yaml"}) {
		t.Fatalf("applyLists = %q", got)
	}
}
