package hook_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/config"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// hooksD is the containers/common hooks.d schema 1.0.0 (oci-hooks(5)).
type hooksD struct {
	Version string     `json:"version"`
	Hook    specs.Hook `json:"hook"`
	When    struct {
		Always        *bool             `json:"always"`
		Annotations   map[string]string `json:"annotations"`
		Commands      []string          `json:"commands"`
		HasBindMounts *bool             `json:"hasBindMounts"`
	} `json:"when"`
	Stages []string `json:"stages"`
}

// ociStages are the hook stages of the OCI runtime spec.
var ociStages = []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}

// matches is the containers/common rule: every when.annotations entry must
// match some annotation, key and value as unanchored regular expressions.
func (h *hooksD) matches(annotations map[string]string) bool {
	for kp, vp := range h.When.Annotations {
		kre, vre := regexp.MustCompile(kp), regexp.MustCompile(vp)
		found := false
		for k, v := range annotations {
			if kre.MatchString(k) && vre.MatchString(v) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return len(h.When.Annotations) > 0
}

func TestHooksDFile(t *testing.T) {
	data, err := os.ReadFile("../../contrib/hooks.d/cgdelegate-hook.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var h hooksD
	if err := dec.Decode(&h); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if h.Version != "1.0.0" {
		t.Errorf("version %q, want 1.0.0", h.Version)
	}
	if h.Hook.Path != config.DefaultHookPath {
		t.Errorf("hook.path %q, want %q", h.Hook.Path, config.DefaultHookPath)
	}
	if h.Hook.Timeout == nil || *h.Hook.Timeout != config.DefaultHookTimeout {
		t.Errorf("hook.timeout %v, want %d", h.Hook.Timeout, config.DefaultHookTimeout)
	}
	if len(h.Stages) == 0 {
		t.Fatal("no stages")
	}
	for _, s := range h.Stages {
		if !slices.Contains(ociStages, s) {
			t.Errorf("stage %q is not an OCI hook stage", s)
		}
	}
	if !slices.Equal(h.Stages, []string{"createRuntime"}) {
		t.Errorf("stages %q, want [createRuntime]", h.Stages)
	}
	for k, v := range h.When.Annotations {
		for _, re := range []string{k, v} {
			if _, err := regexp.Compile(re); err != nil {
				t.Errorf("annotation pattern %q: %v", re, err)
			}
		}
	}
	if t.Failed() {
		return
	}

	for _, tc := range []struct {
		key, value string
		want       bool
	}{
		{"writable-cgroups.noderesource.dev", "true", true},
		{"writable-cgroups.noderesource.dev/pod", "Writable", true},
		{"writable-cgroups.noderesource.dev/container.app", "writable", true},
		{"cgroup2-mount-hierarchy-rw.crio.io", "true", true},
		{"io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw", "TRUE", true},
		{"writable-cgroups.noderesource.dev", "false", false},
		{"writable-cgroups.noderesource.dev/pod", "ReadOnly", false},
		{"writable-cgroups.noderesource.dev", "not-true", false},
		{"writable-cgroups.noderesource.dev", "truthy", false},
		{"x.writable-cgroups.noderesource.dev", "true", false},
		{"writable-cgroups-noderesource-dev", "true", false},
		{"cgroup2-mount-hierarchy-rw.crio.io.extra", "true", false},
		{"io.kubernetes.cri-o.Annotations", "true", false},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			got := h.matches(map[string]string{tc.key: tc.value, "io.kubernetes.pod.name": "p"})
			if got != tc.want {
				t.Errorf("hook injected = %v, want %v", got, tc.want)
			}
		})
	}
}
