//go:build integration_vm

package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// Pinned versions of what runs inside the VM.
const (
	kernelMetapackage = "linux-image-6.12-amd64"
	runcVersion       = "v1.5.2"
	busyboxPath       = "/bin/busybox"
)

// builder builds and caches the VM's ingredients.
type builder struct {
	log      *slog.Logger
	repo     string // module root of cgdelegate
	cacheDir string // survives runs, keyed by version
	workDir  string // this run's scratch space
	// version is the Makefile's VERSION (git describe, else "dev"): our
	// binaries are linked with it and the release image labelled with it.
	version string
}

// gitVersion is what the Makefile's VERSION would be.
func (b *builder) gitVersion(ctx context.Context) string {
	out, err := b.run(ctx, b.repo, nil, "git", "describe", "--tags", "--always", "--dirty")
	if err != nil {
		return "dev"
	}
	return strings.TrimSpace(string(out))
}

// artifacts are the host paths of everything a boot needs.
type artifacts struct {
	Kernel     string // vmlinuz
	OverlayKO  string // decompressed overlay.ko
	KernelName string // Debian package providing the kernel
	Busybox    string
	Runc       string
	// Containerd maps a version to the directory holding containerd, ctr and
	// containerd-shim-runc-v2.
	Containerd map[string]string
	GuestTest  string
	NullCNI    string   // CNI plugin for pods with their own network namespace
	Images     []string // OCI layout tars
	// Plugin and Hook are empty when they did not build; PluginErr says why.
	Plugin, Hook string
	PluginErr    error
	// ReleaseImage is the image `make image` writes (ociimage.Release:
	// cgdelegate, cgdelegate-hook, cgdelegate-init), named
	// ociimage.DefaultRepo:<git describe>; empty when the plugin did not
	// build. Only variants that run the DaemonSet's pod get it
	// (variant.NeedsReleaseImage).
	ReleaseImage string
	// ContainerdDropIn is contrib/containerd/cgdelegate.toml.
	ContainerdDropIn string
	// SystemdRootfs is the Debian root filesystem tar of the systemd
	// variants (debianRootfs); empty when none is booted.
	SystemdRootfs string
	// SystemdPodImage is the OCI layout tar of the image whose PID 1 is
	// systemd (scenario InPodSystemd); empty when no variant runs it.
	SystemdPodImage string
	// EnginesImage is the OCI layout tar of the engines image
	// (enginesImage); empty when no variant runs it.
	EnginesImage string
	// Kubelet is the kubelet binary; empty when no selected variant runs
	// one (it is 90 MB, so it only goes into the initramfs of those that
	// do).
	Kubelet string
	// Cluster is the control plane and its PKI; nil when no selected
	// variant runs a cluster.
	Cluster *clusterArtifacts
	// NetModules are the guest kernel's virtio-net modules, in load order
	// (netModules); only cluster boots carry them.
	NetModules []string
	// PodNet is kube-proxy, the CNI plugins and the netfilter modules of
	// the cluster's pod network; nil when no selected variant runs a
	// cluster.
	PodNet *podNetArtifacts
	// Critest is critest, its images and the stand-in of their programs;
	// nil when no selected variant runs it (variant.RunsCritest).
	Critest *critestArtifacts
}

// defaultCacheDir is $CGDELEGATE_CACHE, else ~/.cache/cgdelegate-integration
// (a temp dir when there is no home).
func defaultCacheDir() string {
	if d := os.Getenv("CGDELEGATE_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "cgdelegate-integration-cache")
	}
	return filepath.Join(home, ".cache", "cgdelegate-integration")
}

// run runs a command with its output captured; on failure the error
// carries the tail of the output.
func (b *builder) run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	b.log.Debug("ran", "cmd", name, "args", args, "took", time.Since(start).Round(time.Millisecond))
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String(), 40))
	}
	return out.Bytes(), nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cached returns dir/<key> after making sure it is complete: when it is
// missing, fill builds it in a temporary sibling that is then renamed into
// place, so an interrupted build never looks cached.
func (b *builder) cached(key string, fill func(tmp string) error) (string, error) {
	final := filepath.Join(b.cacheDir, key)
	if _, err := os.Stat(filepath.Join(final, ".complete")); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return "", fmt.Errorf("cache %s: %w", key, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(final), filepath.Base(final)+".tmp-")
	if err != nil {
		return "", fmt.Errorf("cache %s: %w", key, err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	b.log.Info("building", "what", key)
	if err := fill(tmp); err != nil {
		return "", fmt.Errorf("build %s: %w", key, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return "", fmt.Errorf("cache %s: %w", key, err)
	}
	if err := os.RemoveAll(final); err != nil {
		return "", fmt.Errorf("cache %s: %w", key, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("cache %s: %w", key, err)
	}
	b.log.Info("built", "what", key, "took", time.Since(start).Round(time.Second))
	return final, nil
}

// goInstall installs pkgs (each pkg@version) into dir with GOBIN.
func (b *builder) goInstall(ctx context.Context, dir string, env []string, flags []string, pkgs ...string) error {
	args := append([]string{"install"}, flags...)
	args = append(args, pkgs...)
	env = append(env, "GOBIN="+dir, "GOFLAGS=-buildvcs=false", "GOWORK=off")
	_, err := b.run(ctx, dir, env, "go", args...)
	return err
}

func (b *builder) containerd(ctx context.Context, version string) (string, error) {
	return b.cached("containerd/"+version, func(tmp string) error {
		var pkgs []string
		for _, c := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
			pkgs = append(pkgs, "github.com/containerd/containerd/v2/cmd/"+c+"@"+version)
		}
		return b.goInstall(ctx, tmp, []string{"CGO_ENABLED=0"},
			[]string{"-tags", "no_btrfs", "-trimpath", "-ldflags", "-s -w"}, pkgs...)
	})
}

func (b *builder) runc(ctx context.Context) (string, error) {
	dir, err := b.cached("runc/"+runcVersion, func(tmp string) error {
		return b.goInstall(ctx, tmp, []string{"CGO_ENABLED=1"},
			[]string{"-tags", "seccomp netgo osusergo", "-trimpath", "-ldflags", "-s -w -extldflags -static"},
			"github.com/opencontainers/runc@"+runcVersion)
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "runc"), nil
}

// kernelPackage resolves the metapackage to the real linux-image package and
// its version, with apt-cache (local; needs apt-get update to have run once).
func (b *builder) kernelPackage(ctx context.Context) (name, version string, err error) {
	out, err := b.run(ctx, "", nil, "apt-cache", "depends", kernelMetapackage)
	if err != nil {
		return "", "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		if dep, ok := strings.CutPrefix(l, "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
			name = dep
			break
		}
	}
	if name == "" {
		return "", "", fmt.Errorf("apt-cache depends %s: no linux-image dependency (run apt-get update?)", kernelMetapackage)
	}
	out, err = b.run(ctx, "", nil, "apt-cache", "policy", name)
	if err != nil {
		return "", "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Candidate: "); ok {
			version = v
		}
	}
	if version == "" || version == "(none)" {
		return "", "", fmt.Errorf("apt-cache policy %s: no candidate version", name)
	}
	return name, version, nil
}

func (b *builder) kernel(ctx context.Context) (dir, pkg string, err error) {
	name, version, err := b.kernelPackage(ctx)
	if err != nil {
		// Package lists may be missing or stale on a fresh machine.
		b.log.Warn("cannot resolve the kernel package; running apt-get update", "err", err)
		if _, uerr := b.run(ctx, "", nil, "apt-get", "update", "-qq"); uerr == nil {
			name, version, err = b.kernelPackage(ctx)
		}
	}
	if err != nil {
		// Offline or no apt lists: fall back to any kernel already cached.
		if matches, _ := filepath.Glob(filepath.Join(b.cacheDir, "kernel", "*", ".complete")); len(matches) > 0 {
			d := filepath.Dir(matches[len(matches)-1])
			b.log.Warn("cannot resolve kernel package, using cached kernel", "err", err, "dir", d)
			return d, filepath.Base(d), nil
		}
		return "", "", err
	}
	key := name + "_" + strings.ReplaceAll(version, "~", "_")
	dir, err = b.cached("kernel/"+key, func(tmp string) error {
		if _, err := b.run(ctx, tmp, nil, "apt-get", "download", name+"="+version); err != nil {
			b.log.Warn("apt-get download failed, updating package lists", "err", err)
			if _, err := b.run(ctx, tmp, nil, "apt-get", "update", "-qq"); err != nil {
				return err
			}
			if _, err := b.run(ctx, tmp, nil, "apt-get", "download", name+"="+version); err != nil {
				return err
			}
		}
		debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
		if len(debs) != 1 {
			return fmt.Errorf("apt-get download %s: got %v", name, debs)
		}
		// Extract only what the VM needs instead of the whole package.
		script := `dpkg-deb --fsys-tarfile "$1" | tar -x --wildcards './boot/vmlinuz-*' '*/kernel/fs/overlayfs/overlay.ko*'`
		if _, err := b.run(ctx, tmp, nil, "sh", "-c", script, "sh", debs[0]); err != nil {
			return err
		}
		vmlinuz, _ := filepath.Glob(filepath.Join(tmp, "boot", "vmlinuz-*"))
		kos, _ := filepath.Glob(filepath.Join(tmp, "lib", "modules", "*", "kernel", "fs", "overlayfs", "overlay.ko*"))
		if len(vmlinuz) != 1 || len(kos) != 1 {
			return fmt.Errorf("%s: vmlinuz %v, overlay module %v", debs[0], vmlinuz, kos)
		}
		if err := os.Rename(vmlinuz[0], filepath.Join(tmp, "vmlinuz")); err != nil {
			return fmt.Errorf("kernel: %w", err)
		}
		if err := decompressModule(kos[0], filepath.Join(tmp, "overlay.ko")); err != nil {
			return err
		}
		for _, junk := range append(debs, filepath.Join(tmp, "boot"), filepath.Join(tmp, "lib")) {
			if err := os.RemoveAll(junk); err != nil {
				return fmt.Errorf("kernel: %w", err)
			}
		}
		return nil
	})
	return dir, key, err
}

// decompressModule writes the module at src to dst, decompressing .ko.xz
// and .ko.zst (Debian 6.12) with the host tools; plain .ko (6.1) is copied.
func decompressModule(src, dst string) error {
	var cmd *exec.Cmd
	switch {
	case strings.HasSuffix(src, ".xz"):
		cmd = exec.Command("xz", "-dc", src)
	case strings.HasSuffix(src, ".zst"):
		cmd = exec.Command("zstd", "-dc", src)
	default:
		cmd = exec.Command("cat", src)
	}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("decompress %s: %w", src, err)
	}
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		return fmt.Errorf("decompress %s: %w", src, err)
	}
	return nil
}

// goBuild builds one of our own packages statically into the work dir.
func (b *builder) goBuild(ctx context.Context, out, pkg string, test bool, tags string) (string, error) {
	dst := filepath.Join(b.workDir, out)
	args := []string{"build", "-trimpath", "-o", dst}
	if test {
		args = []string{"test", "-c", "-trimpath", "-o", dst}
	}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	if !test && b.version != "" {
		// As `make build` links it (the Makefile's LDFLAGS).
		args = append(args, "-ldflags", "-X github.com/cgdelegate/cgdelegate/internal/version.linked="+b.version)
	}
	args = append(args, pkg)
	start := time.Now()
	b.log.Info("building", "what", out)
	if _, err := b.run(ctx, b.repo, []string{"CGO_ENABLED=0", "GOFLAGS=-buildvcs=false"}, "go", args...); err != nil {
		return "", err
	}
	b.log.Info("built", "what", out, "took", time.Since(start).Round(time.Second))
	return dst, nil
}

// imageBase are the directories and account files of our busybox-based
// images.
func imageBase() []ociimage.File {
	return []ociimage.File{
		{Name: "bin", Mode: 0o755, Dir: true},
		{Name: "dev", Mode: 0o755, Dir: true},
		{Name: "etc", Mode: 0o755, Dir: true},
		{Name: "proc", Mode: 0o755, Dir: true},
		{Name: "sys", Mode: 0o755, Dir: true},
		{Name: "tmp", Mode: 0o1777, Dir: true},
		{Name: "root", Mode: 0o700, Dir: true},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(guestPasswd)},
		{Name: "etc/group", Mode: 0o644, Data: []byte(guestGroup)},
	}
}

// busyboxFiles are the files of a busybox image: imageBase, busybox and a
// link for each of its applets.
func busyboxFiles(busybox string) ([]ociimage.File, error) {
	applets, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	bb := append(imageBase(), ociimage.File{Name: "bin/busybox", Mode: 0o755, HostPath: busybox})
	sc := bufio.NewScanner(bytes.NewReader(applets))
	for sc.Scan() {
		if a := strings.TrimSpace(sc.Text()); a != "" && a != "busybox" {
			bb = append(bb, ociimage.File{Name: "bin/" + a, Linkname: "busybox"})
		}
	}
	return bb, nil
}

// images writes the busybox and pause images as OCI layout tars; extra
// are more files of the busybox image (the in-pod tools).
func (b *builder) images(busybox, pause string, extra []ociimage.File) ([]string, error) {
	bb, err := busyboxFiles(busybox)
	if err != nil {
		return nil, err
	}
	imgs := []ociimage.Image{
		{Name: busyboxImage, Files: append(bb, extra...), Cmd: []string{"sh"}},
		{Name: pauseImage, Files: append(imageBase(),
			ociimage.File{Name: "pause", Mode: 0o755, HostPath: pause}), Entrypoint: []string{"/pause"}},
	}
	var paths []string
	for i, img := range imgs {
		p := filepath.Join(b.workDir, fmt.Sprintf("image-%d.tar", i))
		f, err := os.Create(p) //nolint:forbidigo // scratch file in our own work dir
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Name, err)
		}
		werr := ociimage.WriteLayout(f, img)
		cerr := f.Close()
		if err := errors.Join(werr, cerr); err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Name, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Images the guest imports (names are fixed: the guest tests use them).
const (
	busyboxImage = "cgd.local/busybox:1"
	pauseImage   = "cgd.local/pause:1"
	systemdImage = "cgd.local/systemd:1"
	// systemdPodImagePath is where the initramfs holds the systemd image.
	systemdPodImagePath = "cgd/pod-images/systemd.tar"
)

// systemdPodImage writes the image of scenario InPodSystemd: the Debian
// root filesystem rootfs as its one layer, systemd as PID 1, and the
// container env var systemd reads to know it runs in a container. The
// apparmor package's unit is masked in it: a pod has no securityfs, so
// the unit could only fail.
func (b *builder) systemdPodImage(rootfs string) (string, error) {
	p := filepath.Join(b.workDir, "image-systemd.tar")
	f, err := os.Create(p) //nolint:forbidigo // scratch file in our own work dir
	if err != nil {
		return "", fmt.Errorf("image %s: %w", systemdImage, err)
	}
	werr := ociimage.WriteLayout(f, ociimage.Image{
		Name: systemdImage, LayerTar: rootfs, Entrypoint: []string{"/sbin/init"}, Env: []string{"container=containerd"},
		Files: []ociimage.File{{Name: "etc/systemd/system/apparmor.service", Linkname: "/dev/null"}},
	})
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("image %s: %w", systemdImage, err)
	}
	return p, nil
}

const (
	guestPasswd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	guestGroup  = "root:x:0:\nnogroup:x:65534:\n"
)

// hostTools are the host commands the harness runs; install-deps.sh
// installs the ones that are not part of a Go toolchain.
var hostTools = []string{"go", "qemu-system-x86_64", "apt-get", "apt-cache", "dpkg-deb", "tar", "xz", "gcc", "ldd"}

func checkHostTools() error {
	var missing []string
	for _, tool := range hostTools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("host tools missing: %s (run integration/vm/install-deps.sh)", strings.Join(missing, ", "))
	}
	return nil
}

// buildAll produces every artifact, the kubelet only when withKubelet, the
// control plane and the guest's network modules only when withCluster,
// critest and its images only when withCritest.
// Only the plugin and hook may fail without failing the build: the
// scenarios that need them then fail.
func (b *builder) buildAll(ctx context.Context, versions []string, withKubelet, withCluster, withCritest bool) (*artifacts, error) {
	a := &artifacts{
		Busybox: busyboxPath, Containerd: map[string]string{},
		ContainerdDropIn: filepath.Join(b.repo, "contrib", "containerd", "cgdelegate.toml"),
	}
	if err := checkHostTools(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(busyboxPath); err != nil {
		return nil, fmt.Errorf("busybox-static (run integration/vm/install-deps.sh): %w", err)
	}
	kdir, kname, err := b.kernel(ctx)
	if err != nil {
		return nil, err
	}
	a.Kernel, a.OverlayKO, a.KernelName = filepath.Join(kdir, "vmlinuz"), filepath.Join(kdir, "overlay.ko"), kname
	for _, v := range versions {
		d, err := b.containerd(ctx, v)
		if err != nil {
			return nil, err
		}
		a.Containerd[v] = d
	}
	if a.Runc, err = b.runc(ctx); err != nil {
		return nil, err
	}
	if withKubelet || withCluster {
		if a.Kubelet, err = b.kubelet(ctx); err != nil {
			return nil, err
		}
	}
	if withCluster {
		if a.Cluster, err = b.buildCluster(ctx); err != nil {
			return nil, err
		}
		if a.NetModules, err = b.netModules(ctx, kname); err != nil {
			return nil, err
		}
		if a.PodNet, err = b.buildPodNet(ctx, kname); err != nil {
			return nil, err
		}
	}
	if b.version == "" {
		b.version = b.gitVersion(ctx)
	}
	if a.GuestTest, err = b.goBuild(ctx, "guest.test", "./integration/guest", true, "integration_guest"); err != nil {
		return nil, err
	}
	pause, err := b.goBuild(ctx, "pause", "./integration/cmd/pause", false, "")
	if err != nil {
		return nil, err
	}
	if a.NullCNI, err = b.goBuild(ctx, "nullcni", "./integration/cmd/nullcni", false, ""); err != nil {
		return nil, err
	}
	if withCritest {
		if a.Critest, err = b.buildCritest(ctx, pause, kname); err != nil {
			return nil, err
		}
	}
	plugin, perr := b.goBuild(ctx, "cgdelegate", "./cmd/cgdelegate", false, "")
	hook, herr := b.goBuild(ctx, "cgdelegate-hook", "./cmd/cgdelegate-hook", false, "")
	tools, terr := b.inPodTools(ctx, a.Runc)
	if perr == nil && herr == nil && terr == nil {
		a.Plugin, a.Hook = plugin, hook
	} else {
		a.PluginErr = errors.Join(perr, herr, terr)
	}
	if a.Images, err = b.images(a.Busybox, pause, tools); err != nil {
		return nil, err
	}
	if a.PluginErr == nil {
		// cgdelegate-init as inPodTools built it.
		a.ReleaseImage, a.PluginErr = b.releaseImage(plugin, hook, filepath.Join(b.workDir, "cgdelegate-init"))
	}
	if a.PluginErr == nil && withCluster {
		// The cluster's registry gets the releases, the same binaries.
		if a.Cluster.Releases, err = b.buildReleases(ctx, a.Cluster.Helm, a.Cluster.Chart, plugin, hook, filepath.Join(b.workDir, "cgdelegate-init")); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// enginesImage writes the engines image: the engines root filesystem with
// cgdelegate-init (as inPodTools built it) and the inner busybox image in
// a layer above it.
func (b *builder) enginesImage(rootfs, busybox string) (string, error) {
	bb, err := busyboxFiles(busybox)
	if err != nil {
		return "", err
	}
	var inner bytes.Buffer
	if err := ociimage.WriteLayout(&inner, ociimage.Image{Name: innerImage, Files: bb, Cmd: []string{"sh"}}); err != nil {
		return "", err
	}
	p := filepath.Join(b.workDir, "image-engines.tar")
	f, err := os.Create(p) //nolint:forbidigo // scratch file in our own work dir
	if err != nil {
		return "", fmt.Errorf("image %s: %w", enginesImage, err)
	}
	werr := ociimage.WriteLayout(f, ociimage.Image{
		Name: enginesImage, LayerTar: rootfs,
		Files: []ociimage.File{
			{Name: "images", Mode: 0o755, Dir: true},
			{Name: innerImagePath, Mode: 0o644, Data: inner.Bytes()},
			{Name: "usr/local/bin/cgdelegate-init", Mode: 0o755, HostPath: filepath.Join(b.workDir, "cgdelegate-init")},
		},
	})
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("image %s: %w", enginesImage, err)
	}
	return p, nil
}

// releaseImage writes the release image as `make image` does (the same
// ociimage.Release, the binaries in the same order), labelled with
// b.version, the version they were linked with.
func (b *builder) releaseImage(binaries ...string) (string, error) {
	r := ociimage.Release{Repo: ociimage.DefaultRepo, Version: b.version, Binaries: map[string][]string{"amd64": binaries}}
	p := filepath.Join(b.workDir, "cgdelegate-image.tar")
	f, err := os.Create(p) //nolint:forbidigo // scratch file in our own work dir
	if err != nil {
		return "", fmt.Errorf("release image: %w", err)
	}
	werr := r.Write(f)
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("release image %s: %w", r.Name(), err)
	}
	return p, nil
}

// inPodTools are the busybox image's tools for the in-pod scenarios, in
// /usr/local/bin: cgdelegate-init, the delegate package's test binary (its
// kernel tests run inside a writable pod) and the static runc, for a
// nested container.
func (b *builder) inPodTools(ctx context.Context, runc string) ([]ociimage.File, error) {
	initBin, err := b.goBuild(ctx, "cgdelegate-init", "./cmd/cgdelegate-init", false, "")
	if err != nil {
		return nil, err
	}
	delegateTest, err := b.goBuild(ctx, "delegate.test", "./delegate", true, "")
	if err != nil {
		return nil, err
	}
	return []ociimage.File{
		{Name: "usr", Mode: 0o755, Dir: true},
		{Name: "usr/local", Mode: 0o755, Dir: true},
		{Name: "usr/local/bin", Mode: 0o755, Dir: true},
		{Name: "usr/local/bin/cgdelegate-init", Mode: 0o755, HostPath: initBin},
		{Name: "usr/local/bin/delegate.test", Mode: 0o755, HostPath: delegateTest},
		{Name: "usr/local/bin/runc", Mode: 0o755, HostPath: runc},
	}, nil
}
