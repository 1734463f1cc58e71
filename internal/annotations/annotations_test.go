package annotations

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/plugin"
)

func TestFirst(t *testing.T) {
	w := WritableCgroups.Name
	tests := []struct {
		name     string
		pod, ctr map[string]string
		keys     []Key
		want     Found
		found    bool
	}{
		{name: "nothing", keys: []Key{WritableCgroups}},
		{name: "bare", pod: map[string]string{w: "true"}, keys: []Key{WritableCgroups}, want: Found{w, "true"}, found: true},
		{name: "pod scope beats bare", pod: map[string]string{w: "a", w + "/pod": "b"}, keys: []Key{WritableCgroups}, want: Found{w + "/pod", "b"}, found: true},
		{
			name: "container scope beats pod scope", pod: map[string]string{w + "/pod": "b", w + "/container.app": "c", w: "a"},
			keys: []Key{WritableCgroups}, want: Found{w + "/container.app", "c"}, found: true,
		},
		{name: "other container ignored", pod: map[string]string{w + "/container.other": "c"}, keys: []Key{WritableCgroups}},
		{name: "longer key with same prefix ignored", pod: map[string]string{w + "x": "c", w + "/podx": "d"}, keys: []Key{WritableCgroups}},
		{name: "container name prefix ignored", pod: map[string]string{w + "/container.ap": "c", w + "/container.appx": "d"}, keys: []Key{WritableCgroups}},
		{name: "first key wins", pod: map[string]string{w: "ours", CRIOWritable.Name: "crio"}, keys: []Key{WritableCgroups, CRIOWritable}, want: Found{w, "ours"}, found: true},
		{name: "second key", pod: map[string]string{CRIOWritableLegacy.Name: "x"}, keys: []Key{WritableCgroups, CRIOWritable, CRIOWritableLegacy}, want: Found{CRIOWritableLegacy.Name, "x"}, found: true},
		{name: "pod before container", pod: map[string]string{CRIOWritable.Name: "pod"}, ctr: map[string]string{w: "ctr"}, keys: []Key{WritableCgroups, CRIOWritable}, want: Found{CRIOWritable.Name, "pod"}, found: true},
		{name: "container fallback", ctr: map[string]string{w: "ctr"}, keys: []Key{WritableCgroups}, want: Found{w, "ctr"}, found: true},
		{name: "pod-scoped key exact only", pod: map[string]string{MaxDepth.Name + "/pod": "3"}, keys: []Key{MaxDepth}},
		{name: "per-container key", pod: map[string]string{"resources.cgdelegate.io/container.app": "cpu=1"}, keys: []Key{ContainerResources}, want: Found{"resources.cgdelegate.io/container.app", "cpu=1"}, found: true},
		{name: "per-container has no pod fallback", pod: map[string]string{"lifecycle.cgdelegate.io": "init", "lifecycle.cgdelegate.io/pod": "init"}, keys: []Key{Lifecycle}},
		{name: "per-container ignores the pod key", pod: map[string]string{PodResources.Name: "cpu=1"}, keys: []Key{ContainerResources}},
		{name: "empty value is found", pod: map[string]string{w: ""}, keys: []Key{WritableCgroups}, want: Found{w, ""}, found: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := First(tc.pod, tc.ctr, "app", tc.keys...)
			if ok != tc.found || got != tc.want {
				t.Fatalf("First = %+v, %v; want %+v, %v", got, ok, tc.want, tc.found)
			}
		})
	}
}

// Effective keys agree with NRI's own plugin.GetEffectiveAnnotation.
func TestEffectiveMatchesNRI(t *testing.T) {
	w := WritableCgroups.Name
	maps := []map[string]string{
		nil,
		{w: "a"},
		{w + "/pod": "b"},
		{w + "/container.app": "c"},
		{w: "a", w + "/pod": "b"},
		{w: "a", w + "/container.app": "c"},
		{w: "a", w + "/pod": "b", w + "/container.app": "c"},
		{w + "/container.other": "x", w: "a"},
		{w + "/container.other": "x"},
		{w + "/pods": "x", w + ".x": "y"},
	}
	for _, m := range maps {
		for _, name := range []string{"app", "other"} {
			pod := &api.PodSandbox{Annotations: m}
			wantV, wantOK := plugin.GetEffectiveAnnotation(pod, w, name)
			got, ok := ForContainer(pod, &api.Container{Name: name}, WritableCgroups)
			if ok != wantOK || got.Value != wantV {
				t.Errorf("annotations %v, container %s: got %q,%v; NRI says %q,%v", m, name, got.Value, ok, wantV, wantOK)
			}
		}
	}
}

func TestForms(t *testing.T) {
	got := strings.Join(WritableCgroups.Forms(), " ")
	want := "writable-cgroups.noderesource.dev/container.<name> writable-cgroups.noderesource.dev/pod writable-cgroups.noderesource.dev"
	if got != want {
		t.Fatalf("Forms = %q, want %q", got, want)
	}
	if f := Lifecycle.Forms(); len(f) != 1 || f[0] != "lifecycle.cgdelegate.io/container.<name>" {
		t.Fatalf("Lifecycle.Forms = %q", f)
	}
}

// docs/writable-cgroups.md documents every key a user can write, in every form.
func TestDocsListEveryKey(t *testing.T) {
	readme, err := os.ReadFile("../../docs/writable-cgroups.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9./-]+(?:<name>)?)`").FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = true
	}
	seen := map[string]bool{}
	for _, k := range All() {
		if seen[k.Name] {
			t.Errorf("key %q registered twice", k.Name)
		}
		seen[k.Name] = true
		for _, f := range k.Forms() {
			if !documented[f] {
				t.Errorf("docs/writable-cgroups.md does not list the annotation `%s` (%s's key)", f, k.Owner)
			}
		}
	}
}

func BenchmarkForContainer(b *testing.B) {
	pod := &api.PodSandbox{Annotations: map[string]string{
		"kubernetes.io/config.seen": "x", "kubernetes.io/config.source": "file", "kubernetes.io/config.hash": "abc",
		WritableCgroups.Name + "/container.app": "true",
	}}
	ctr := &api.Container{Name: "app"}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ForContainer(pod, ctr, WritableCgroups, CRIOWritable, CRIOWritableLegacy); !ok {
			b.Fatal("not found")
		}
	}
}
