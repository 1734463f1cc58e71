//go:build integration_vm

package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cgdelegate/cgdelegate/integration/internal/critest"
	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// critestKey is the cache key of critest's build.
const critestKey = "critest/" + critest.Version

// critestBinary builds critest (go test -c of cri-tools' cmd/critest, a
// test package) at critest.Version from the module proxy, static, in an
// empty module that requires cri-tools, and caches it by version: about a
// minute and a half on two cores with a warm module cache.
func (b *builder) critestBinary(ctx context.Context) (string, error) {
	dir, err := b.cached(critestKey, func(tmp string) error {
		env := []string{"GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off", "CGO_ENABLED=0"}
		src := filepath.Join(tmp, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module cgdelegate.local/critest\n\ngo 1.26\n"), 0o644); err != nil {
			return err
		}
		if _, err := b.run(ctx, src, env, "go", "get", critest.Module+"@"+critest.Version); err != nil {
			return err
		}
		if _, err := b.run(ctx, src, env, "go", "test", "-c", "-trimpath", "-ldflags", "-s -w",
			"-o", filepath.Join(tmp, "critest"), critest.Module+"/cmd/critest"); err != nil {
			return err
		}
		return os.RemoveAll(src)
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "critest"), nil
}

// dynamicBusybox is Debian's dynamically linked busybox (package busybox,
// the candidate version, cached by it) with the shared libraries it loads
// (as ldd resolves them on this Debian host) and its applets
// (critest.Userland says why not busybox-static).
func (b *builder) dynamicBusybox(ctx context.Context) (critest.Userland, error) {
	out, err := b.run(ctx, "", nil, "apt-cache", "policy", "busybox")
	if err != nil {
		return critest.Userland{}, err
	}
	version := ""
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Candidate: "); ok && v != "(none)" {
			version = strings.ReplaceAll(strings.ReplaceAll(v, ":", "_"), "~", "_")
		}
	}
	if version == "" {
		return critest.Userland{}, fmt.Errorf("apt-cache policy busybox: no candidate version:\n%s", out)
	}
	dir, err := b.cached("busybox/"+version, func(tmp string) error {
		if _, err := b.run(ctx, tmp, nil, "apt-get", "download", "busybox"); err != nil {
			return err
		}
		debs, _ := filepath.Glob(filepath.Join(tmp, "busybox_*.deb"))
		if len(debs) != 1 {
			return fmt.Errorf("apt-get download busybox: got %v", debs)
		}
		if _, err := b.run(ctx, tmp, nil, "dpkg-deb", "-x", debs[0], filepath.Join(tmp, "root")); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(tmp, "root", "bin", "busybox"), filepath.Join(tmp, "busybox")); err != nil {
			return err
		}
		return errors.Join(os.RemoveAll(filepath.Join(tmp, "root")), os.Remove(debs[0]))
	})
	if err != nil {
		return critest.Userland{}, err
	}
	u := critest.Userland{Busybox: filepath.Join(dir, "busybox"), Libs: map[string]string{}}
	ldd, err := b.run(ctx, "", nil, "ldd", u.Busybox)
	if err != nil {
		return u, err
	}
	for _, l := range strings.Split(string(ldd), "\n") {
		f := strings.Fields(l)
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and the
		// loader, "/lib64/ld-linux-x86-64.so.2 (0x...)"; not linux-vdso.
		p := ""
		switch {
		case len(f) == 4 && f[1] == "=>":
			p = f[2]
		case len(f) == 2 && strings.HasPrefix(f[0], "/"):
			p = f[0]
		}
		if p == "" {
			continue
		}
		host, err := filepath.EvalSymlinks(p)
		if err != nil {
			return u, fmt.Errorf("busybox's %s: %w", p, err)
		}
		u.Libs[strings.TrimPrefix(p, "/")] = host
	}
	if len(u.Libs) < 2 {
		return u, fmt.Errorf("ldd %s: want libc and the loader, got %v:\n%s", u.Busybox, u.Libs, ldd)
	}
	applets, err := exec.Command(u.Busybox, "--list").Output()
	if err != nil {
		return u, fmt.Errorf("busybox --list: %w", err)
	}
	u.Applets = strings.Fields(string(applets))
	return u, nil
}

// critestArtifacts are what a conformance boot carries.
type critestArtifacts struct {
	Critest string // the critest binary
	Standin string // integration/cmd/critestimage (the VM's ipcmk)
	// Images are OCI layout tars, one per critest.Images entry, in order.
	Images []string
	// Modules are critest.Modules, decompressed, in load order.
	Modules []string
}

// buildCritest builds critest, the stand-in and the images critest pulls,
// and extracts critest.Modules from the kernel package kernelKey.
func (b *builder) buildCritest(ctx context.Context, pause, kernelKey string) (*critestArtifacts, error) {
	bin, err := b.critestBinary(ctx)
	if err != nil {
		return nil, err
	}
	mods, err := b.kernelModules(ctx, "critestmodules", kernelKey, critest.Modules)
	if err != nil {
		return nil, err
	}
	standin, err := b.goBuild(ctx, "critestimage", "./integration/cmd/critestimage", false, "")
	if err != nil {
		return nil, err
	}
	u, err := b.dynamicBusybox(ctx)
	if err != nil {
		return nil, err
	}
	u.Standin, u.Pause = standin, pause
	ca := &critestArtifacts{Critest: bin, Standin: standin, Modules: mods}
	for i, img := range critest.Images(u) {
		p := filepath.Join(b.workDir, fmt.Sprintf("critest-image-%d.tar", i))
		f, err := os.Create(p) //nolint:forbidigo // scratch file in our own work dir
		if err != nil {
			return nil, fmt.Errorf("critest image %s: %w", img.Name, err)
		}
		werr := ociimage.WriteLayout(f, img.Image)
		cerr := f.Close()
		if err := errors.Join(werr, cerr); err != nil {
			return nil, fmt.Errorf("critest image %s: %w", img.Name, err)
		}
		ca.Images = append(ca.Images, p)
	}
	return ca, nil
}

// writeCritest puts critest's pieces into a conformance boot's initramfs:
// critest, the stand-in as the node's ipcmk, the images, numbered as
// critest.Images lists them (the guest pushes image i under its Refs), and
// the kernel modules.
func writeCritest(w *cpioWriter, ca *critestArtifacts) {
	rel := func(p string) string { return strings.TrimPrefix(p, "/") }
	w.HostFile(rel(critest.GuestBinary), 0o755, ca.Critest)
	w.HostFile(rel(critest.GuestIPCMK), 0o755, ca.Standin)
	w.Dir(rel(critest.ImagesDir), 0o755)
	for i, p := range ca.Images {
		w.HostFile(fmt.Sprintf("%s/%d.tar", rel(critest.ImagesDir), i), 0o644, p)
	}
	w.Dir(rel(critest.ModulesDir), 0o755)
	for _, p := range ca.Modules {
		w.HostFile(rel(critest.ModulesDir)+"/"+filepath.Base(p), 0o644, p)
	}
}
