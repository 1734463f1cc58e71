package critest

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// reportJSON is the shape of ginkgo v2's --json-report: a suite with its
// suite nodes and specs (trimmed to the fields read here and a few more).
const reportJSON = `[{"SuitePath": "/cgd", "SuiteDescription": "CRI validation", "SuiteSucceeded": false,
 "SpecReports": [
  {"ContainerHierarchyTexts": null, "LeafNodeType": "BeforeSuite", "LeafNodeText": "", "State": "passed", "Failure": {}},
  {"ContainerHierarchyTexts": ["[k8s.io] Networking", "runtime should support networking"], "LeafNodeType": "It",
   "LeafNodeText": "runtime should support DNS config [Conformance]", "State": "passed", "NumAttempts": 1},
  {"ContainerHierarchyTexts": ["[k8s.io] Image Manager"], "LeafNodeType": "It",
   "LeafNodeText": "public image with digest should be pulled and removed [Conformance]", "State": "skipped"},
  {"ContainerHierarchyTexts": ["[k8s.io] Security Context", "SeccompProfilePath"], "LeafNodeType": "It",
   "LeafNodeText": "should support seccomp localhost profile on the container", "State": "skipped",
   "Failure": {"Message": "seccomp is not enabled"}},
  {"ContainerHierarchyTexts": ["[k8s.io] PodSandbox"], "LeafNodeType": "It",
   "LeafNodeText": "runtime should support metrics", "State": "failed",
   "Failure": {"Message": "Expected <int>: 0 to be > 0"}}
 ]}]`

func TestReadReport(t *testing.T) {
	res, err := ReadReport(strings.NewReader(reportJSON))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Counts(), (Counts{Specs: 4, Passed: 1, Failed: 1, Skipped: 2, ByName: 1}); got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	if s := res.Skipped(); len(s) != 2 || s[0].Message != "" || s[1].Message != "seccomp is not enabled" {
		t.Errorf("skipped %+v", s)
	}
	if f := res.Failures(); len(f) != 1 || f[0].Name != "[k8s.io] PodSandbox runtime should support metrics" || !strings.Contains(f[0].Message, "to be > 0") {
		t.Errorf("failures %+v", f)
	}
	for _, tc := range []struct {
		name, json string
	}{
		{"not JSON", "{"},
		{"no specs", `[{"SpecReports": []}]`},
		{"twice", `[{"SpecReports": [{"LeafNodeType": "It", "LeafNodeText": "a", "State": "passed"}, {"LeafNodeType": "It", "LeafNodeText": "a", "State": "failed"}]}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadReport(strings.NewReader(tc.json)); !errors.Is(err, ErrReport) {
				t.Fatalf("ReadReport = %v, want %v", err, ErrReport)
			}
		})
	}
	t.Run("broken suite node", func(t *testing.T) {
		res, err := ReadReport(strings.NewReader(`[{"SpecReports": [{"LeafNodeType": "BeforeSuite", "State": "failed", "Failure": {"Message": "no runtime"}}]}]`))
		if err != nil {
			t.Fatal(err)
		}
		if c := res.Counts(); c.Failed != 1 || res.Specs[0].Name != "[BeforeSuite]" {
			t.Fatalf("a failed BeforeSuite reads as %+v", res.Specs)
		}
	})
}

func result(specs ...Spec) Result {
	r := Result{Specs: specs}
	slices.SortFunc(r.Specs, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	return r
}

func TestCompare(t *testing.T) {
	base := result(Spec{Name: "A a", State: Passed}, Spec{Name: "B b", State: Failed}, Spec{Name: "C c", State: Skipped})
	for _, tc := range []struct {
		name string
		got  Result
		want []string
	}{
		{"same", result(Spec{Name: "A a", State: Passed}, Spec{Name: "B b", State: Failed}, Spec{Name: "C c", State: Skipped}), nil},
		{"one fails", result(Spec{Name: "A a", State: Failed}, Spec{Name: "B b", State: Failed}, Spec{Name: "C c", State: Skipped}), []string{"A a:passed:failed"}},
		{"one passes", result(Spec{Name: "A a", State: Passed}, Spec{Name: "B b", State: Passed}, Spec{Name: "C c", State: Skipped}), []string{"B b:failed:passed"}},
		{"missing and extra", result(Spec{Name: "A a", State: Passed}, Spec{Name: "B b", State: Failed}, Spec{Name: "D d", State: Passed}), []string{"C c:skipped:absent", "D d:absent:passed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range Compare(base, tc.got, "default") {
				got = append(got, d.Spec+":"+string(d.Baseline)+":"+string(d.Pass))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("differences %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("explained", func(t *testing.T) {
		old := Explained
		t.Cleanup(func() { Explained = old })
		Explained = []Explanation{{Pass: "pinning", Spec: "a", Reason: "because"}}
		got := result(Spec{Name: "A a", State: Failed}, Spec{Name: "B b", State: Failed}, Spec{Name: "C c", State: Skipped})
		if u := Unexplained(Compare(base, got, "pinning")); len(u) != 0 {
			t.Errorf("unexplained %v under the pass the explanation names", u)
		}
		if u := Unexplained(Compare(base, got, "default")); len(u) != 1 {
			t.Errorf("unexplained %v under another pass, want the one difference", u)
		}
	})
}

func TestSkipPattern(t *testing.T) {
	re := regexp.MustCompile(SkipPattern())
	for _, s := range Skips {
		if !re.MatchString("[k8s.io] Some Describe " + s.Spec) {
			t.Errorf("the skip pattern does not match %q", s.Spec)
		}
		if s.Reason == "" {
			t.Errorf("skip %q has no reason", s.Spec)
		}
	}
	// The host network portforward runs: it must not match the
	// portforward skip.
	for _, keep := range []string{
		"[k8s.io] Streaming runtime should support streaming interfaces runtime should support portforward in host network",
		"[k8s.io] Image Manager public image without tag should be pulled and removed [Conformance]",
		"[k8s.io] Multiple Containers [Conformance] when running multiple containers in a pod should support container log",
	} {
		if re.MatchString(keep) {
			t.Errorf("the skip pattern matches %q", keep)
		}
	}
}

func TestImages(t *testing.T) {
	imgs := Images(Userland{
		Busybox: "/x/busybox", Applets: []string{"sh", "busybox", "echo", "pgrep"}, Standin: "/x/critestimage", Pause: "/x/pause",
		Libs: map[string]string{"lib/x86_64-linux-gnu/libc.so.6": "/usr/lib/x86_64-linux-gnu/libc.so.6", "lib64/ld-linux-x86-64.so.2": "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
	})
	// The busybox image: the libraries with their directories, applets
	// hard-linked to busybox, pgrep to the stand-in.
	entries := map[string]ociimage.File{}
	for _, f := range imgs[0].Files {
		if _, dup := entries[f.Name]; dup {
			t.Errorf("%s twice in the busybox image", f.Name)
		}
		entries[f.Name] = f
	}
	for name, want := range map[string]string{
		"lib": "dir", "lib/x86_64-linux-gnu": "dir", "lib64": "dir",
		"lib64/ld-linux-x86-64.so.2": "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "bin/sh": "=bin/busybox", "bin/pgrep": "=" + standinPath,
	} {
		f, ok := entries[name]
		got := f.HostPath
		switch {
		case f.Dir:
			got = "dir"
		case f.Hardlink != "":
			got = "=" + f.Hardlink
		}
		if !ok || got != want {
			t.Errorf("busybox image %s: %q (present %v), want %q", name, got, ok, want)
		}
	}
	seen := map[string]bool{}
	for _, img := range imgs {
		if img.Name != img.Refs[0] {
			t.Errorf("image %q is named for its first reference %q", img.Name, img.Refs[0])
		}
		for _, ref := range img.Refs {
			if seen[ref] {
				t.Errorf("reference %q twice", ref)
			}
			seen[ref] = true
			if _, _, err := RegistryPath(ref); err != nil {
				t.Error(err)
			}
		}
	}
	// What critest v1.37.0 pulls (pkg/validate, pkg/framework), but the
	// digest-pinned image.
	for _, ref := range []string{
		"registry.k8s.io/e2e-test-images/busybox:1.29-2", "registry.k8s.io/e2e-test-images/nginx:1.14-2",
		"registry.k8s.io/e2e-test-images/httpd:2.4.39-4", "registry.k8s.io/e2e-test-images/nonewprivs:1.3",
		"gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64:latest",
		"gcr.io/k8s-staging-cri-tools/test-image-user-uid:latest", "gcr.io/k8s-staging-cri-tools/test-image-user-username:latest",
		"gcr.io/k8s-staging-cri-tools/test-image-user-uid-group:latest", "gcr.io/k8s-staging-cri-tools/test-image-user-username-group:latest",
		"gcr.io/k8s-staging-cri-tools/test-image-predefined-group:latest",
		"gcr.io/k8s-staging-cri-tools/test-image-1:latest", "gcr.io/k8s-staging-cri-tools/test-image-2:latest",
		"gcr.io/k8s-staging-cri-tools/test-image-3:latest", "gcr.io/k8s-staging-cri-tools/test-image-latest:latest",
		"gcr.io/k8s-staging-cri-tools/test-image-tags:1", "gcr.io/k8s-staging-cri-tools/test-image-tags:2",
		"gcr.io/k8s-staging-cri-tools/test-image-tags:3", "gcr.io/k8s-staging-cri-tools/test-image-tag:test",
		"gcr.io/k8s-staging-cri-tools/test-image-tag:all", "registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9",
	} {
		if !seen[ref] {
			t.Errorf("no image for %q", ref)
		}
	}
	for _, bad := range []string{"busybox", "quay.io/x:1", "gcr.io/x@sha256:00", "gcr.io/x"} {
		if _, _, err := RegistryPath(bad); err == nil {
			t.Errorf("RegistryPath(%q) succeeded", bad)
		}
	}
}

// TestDocs keeps docs/critest.md and this package in agreement: every
// skip, pass and explained difference is on the page.
func TestDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "critest.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, s := range Skips {
		if !strings.Contains(page, s.Spec) {
			t.Errorf("docs/critest.md does not list the skipped spec %q", s.Spec)
		}
	}
	for _, p := range Passes {
		if !strings.Contains(page, "`"+p.Name+"`") {
			t.Errorf("docs/critest.md does not name the pass `%s`", p.Name)
		}
	}
	for _, e := range Explained {
		if !strings.Contains(page, e.Spec) {
			t.Errorf("docs/critest.md does not explain %q (pass %s)", e.Spec, e.Pass)
		}
	}
	if !strings.Contains(page, Version) {
		t.Errorf("docs/critest.md does not name critest %s", Version)
	}
}
