package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHookLinksNoNRI: the hook runs at every writable container's start;
// the NRI API (protobuf, ttrpc, a WebAssembly runtime) would make its
// binary 40 % larger and its start half again as slow. Packages the hook
// imports (config, logging, host, hook) must not name NRI types.
func TestHookLinksNoNRI(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go on PATH to list the hook's packages: %v", err)
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/containerd/nri") || strings.HasPrefix(pkg, "github.com/tetratelabs/wazero") {
			t.Errorf("the hook links %s", pkg)
		}
	}
}
