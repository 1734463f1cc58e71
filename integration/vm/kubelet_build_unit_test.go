//go:build integration_vm

package vm

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestStagingModules(t *testing.T) {
	gomod := "module k8s.io/kubernetes\n\nrequire k8s.io/api v0.0.0\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/kubelet => ./staging/src/k8s.io/kubelet\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\nreplace k8s.io/cri-api => ./staging/src/k8s.io/cri-api\n"
	got, err := stagingModules(bytes.NewReader([]byte(gomod)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "k8s.io/api,k8s.io/kubelet,k8s.io/cri-api" {
		t.Fatalf("staging modules = %v", got)
	}
	if _, err := stagingModules(bytes.NewReader([]byte("module x\n"))); err == nil {
		t.Fatal("a go.mod without staging replaces was accepted")
	}
	if f := kubeletLDFlags("v1.37.2"); !strings.Contains(f, "k8s.io/component-base/version.gitVersion=v1.37.2") || !strings.Contains(f, "version.gitMinor=37 ") {
		t.Fatalf("ldflags: %s", f)
	}
	mod := kubeletGoMod("v1.37.2", got)
	if !strings.Contains(mod, "replace k8s.io/kubelet => k8s.io/kubelet v0.37.2\n") || !strings.Contains(mod, "require k8s.io/kubernetes v1.37.2") {
		t.Fatalf("go.mod:\n%s", mod)
	}
}

// TestKubeletBuild builds (or finds cached) the kubelet and checks its
// version. CGD_BUILD_KUBELET=1 runs it; TestVM builds it anyway.
func TestKubeletBuild(t *testing.T) {
	if os.Getenv("CGD_BUILD_KUBELET") == "" {
		t.Skip("set CGD_BUILD_KUBELET=1 to build the kubelet alone (TestVM builds it too)")
	}
	b := &builder{log: slog.New(slog.NewTextHandler(os.Stderr, nil)), repo: repoRoot(t), cacheDir: defaultCacheDir(), workDir: t.TempDir()}
	k, err := b.kubelet(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(k, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), kubeletVersion) {
		t.Fatalf("%s --version: %v: %s", k, err, out)
	}
}
