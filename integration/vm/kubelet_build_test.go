//go:build integration_vm

package vm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// kubeletVersion is the kubelet the Kubelet scenarios run. Its staging
// modules are published as v0.<minor>.<patch>.
const kubeletVersion = "v1.37.2"

// stagingVersion maps v1.37.2 to v0.37.2.
func stagingVersion(v string) string { return "v0" + strings.TrimPrefix(v, "v1") }

// stagingModules lists the k8s.io modules that k8s.io/kubernetes' go.mod
// replaces with ./staging paths; r is that go.mod.
func stagingModules(r *bytes.Reader) ([]string, error) {
	var mods []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "replace" {
			f = f[1:]
		}
		if len(f) == 3 && f[1] == "=>" && strings.HasPrefix(f[2], "./staging/") {
			mods = append(mods, f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read k8s.io/kubernetes go.mod: %w", err)
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("k8s.io/kubernetes go.mod: no ./staging replace lines")
	}
	return mods, nil
}

// kubeletGoMod is the go.mod of a module that builds the kubelet from the
// module proxy: it requires k8s.io/kubernetes and points every staging module
// at its published version.
func kubeletGoMod(version string, staging []string) string {
	var s strings.Builder
	s.WriteString("module cgdelegate.local/kubelet\n\ngo 1.26\n\nrequire k8s.io/kubernetes " + version + "\n\n")
	for _, m := range staging {
		fmt.Fprintf(&s, "replace %s => %s %s\n", m, m, stagingVersion(version))
	}
	return s.String()
}

// kubeletLDFlags strips the binary and stamps the version the kubelet
// reports (--version, node status); without it a module build says
// v0.0.0-master.
func kubeletLDFlags(version string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags, "-X "+pkg+".gitVersion="+version, "-X "+pkg+".gitMajor="+major, "-X "+pkg+".gitMinor="+minor,
			"-X "+pkg+".gitTreeState=clean")
	}
	return "-s -w " + strings.Join(flags, " ")
}

// kubernetesCommands are every k8s.io/kubernetes command the VM suite
// runs: the kubelet (the Kubelet and Cluster variants), kube-proxy (the
// cluster's pod network) and the control plane (controlPlaneCommands).
var kubernetesCommands = append([]string{"kubelet", "kube-proxy"}, controlPlaneCommands...)

// kubernetesKey is the cache key of kubernetes' build.
const kubernetesKey = "kubernetes/" + kubeletVersion

// kubernetes builds kubernetesCommands at kubeletVersion in one go build
// (static) and caches them by version: one module tidy, one package load
// and one build for the packages they share, where three builds (the
// kubelet, then the control plane, then kube-proxy) took 16m24s cold
// beside make test on 2026-11-27. With a warm Go build cache it links all
// six in 1m20s (2026-11-28). It returns their directory.
func (b *builder) kubernetes(ctx context.Context) (string, error) {
	return b.cached(kubernetesKey, func(tmp string) error {
		return b.k8sBuild(ctx, tmp, kubeletVersion, kubernetesCommands...)
	})
}

// kubelet is the kubelet of kubernetes' build.
func (b *builder) kubelet(ctx context.Context) (string, error) {
	dir, err := b.kubernetes(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "kubelet"), nil
}

// k8sBuild builds the commands (k8s.io/kubernetes/cmd/<name>) at version
// into dir, in an empty module that requires k8s.io/kubernetes and points
// every staging module at its published version (kubeletGoMod). Every
// caller uses the same environment and flags, so the Go build cache shares
// the packages they have in common.
func (b *builder) k8sBuild(ctx context.Context, dir, version string, cmds ...string) error {
	env := []string{"GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off", "CGO_ENABLED=0"}
	out, err := b.run(ctx, dir, env, "go", "mod", "download", "-json", "k8s.io/kubernetes@"+version)
	if err != nil {
		return err
	}
	gomod := ""
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), `"GoMod": "`); ok {
			gomod = strings.TrimSuffix(v, `",`)
		}
	}
	raw, err := os.ReadFile(gomod)
	if err != nil {
		return fmt.Errorf("k8s.io/kubernetes %s go.mod: %w", version, err)
	}
	staging, err := stagingModules(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("build %v: %w", cmds, err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(kubeletGoMod(version, staging)), 0o644); err != nil {
		return fmt.Errorf("build %v: %w", cmds, err)
	}
	tools := "//go:build tools\n\npackage tools\n\nimport (\n"
	pkgs := make([]string, len(cmds))
	for i, c := range cmds {
		pkgs[i] = "k8s.io/kubernetes/cmd/" + c
		tools += "\t_ \"" + pkgs[i] + "\"\n"
	}
	if err := os.WriteFile(filepath.Join(src, "tools.go"), []byte(tools+")\n"), 0o644); err != nil {
		return fmt.Errorf("build %v: %w", cmds, err)
	}
	if _, err := b.run(ctx, src, env, "go", "mod", "tidy"); err != nil {
		return err
	}
	args := append([]string{"build", "-trimpath", "-ldflags", kubeletLDFlags(version), "-o", dir + string(filepath.Separator)}, pkgs...)
	if _, err := b.run(ctx, src, env, "go", args...); err != nil {
		return err
	}
	return os.RemoveAll(src)
}
