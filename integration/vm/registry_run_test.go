//go:build integration_vm

package vm

// The cluster boot's OCI registry, the running part: the two releases
// built (buildReleases: each release image as `make image` writes it, and
// the chart packaged with `helm package`), the registry started on the
// host's bridge address (startRegistry: `docker-registry serve`, the CNCF
// distribution registry from Debian's docker-registry package) and the
// releases pushed to it before the boot (publishReleases, as `make push`
// does: the image with internal/ociimage, the chart with `helm push`).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// registryCommand is the distribution registry's binary (Debian's
// docker-registry package, integration/vm/install-deps.sh).
const registryCommand = "docker-registry"

// builtRelease is a clusterRelease built for this run.
type builtRelease struct {
	clusterRelease
	// ImageArchive is the release image's archive as `make release`
	// writes it; Digest is the digest of the image (or index) in it.
	ImageArchive, Digest string
	// ChartPackage is the chart packaged for the release (.tgz).
	ChartPackage string
}

// buildReleases writes clusterReleases into workDir/releases as `make
// release` writes a release: each image from binaries (amd64, the VM's),
// labelled and tagged with its appVersion (ociimage.Release), and the
// chart directory packaged by `mkimage chart` (version and appVersion
// checked in the package).
func (b *builder) buildReleases(ctx context.Context, helm, chart string, binaries ...string) ([]builtRelease, error) {
	dir := filepath.Join(b.workDir, "releases")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("releases: %w", err)
	}
	mkimage, err := b.goBuild(ctx, "mkimage", "./cmd/mkimage", false, "")
	if err != nil {
		return nil, fmt.Errorf("releases: %w", err)
	}
	var out []builtRelease
	for _, r := range clusterReleases {
		rel, err := b.buildRelease(ctx, dir, mkimage, helm, chart, r, binaries)
		if err != nil {
			return nil, err
		}
		out = append(out, rel)
	}
	return out, nil
}

// buildRelease writes release r into dir: its image from binaries
// (amd64), labelled and tagged with its appVersion, and the chart
// directory packaged by mkimage chart.
func (b *builder) buildRelease(ctx context.Context, dir, mkimage, helm, chart string, r clusterRelease, binaries []string) (builtRelease, error) {
	rel := ociimage.Release{Repo: registryImageRepo, Version: r.AppVersion, Binaries: map[string][]string{"amd64": binaries}}
	archive := filepath.Join(dir, "cgdelegate-"+r.AppVersion+".oci.tar")
	f, err := os.Create(archive) //nolint:forbidigo // scratch file in our own work dir
	if err != nil {
		return builtRelease{}, fmt.Errorf("release %s: %w", r.AppVersion, err)
	}
	werr := rel.Write(f)
	if err := errors.Join(werr, f.Close()); err != nil {
		return builtRelease{}, fmt.Errorf("release %s: %w", r.AppVersion, err)
	}
	digest, err := archiveDigest(archive, dir)
	if err != nil {
		return builtRelease{}, fmt.Errorf("release %s: %w", r.AppVersion, err)
	}
	if _, err := b.run(ctx, b.repo, helmEnv(dir), mkimage, "chart", "-version", r.AppVersion, "-o", dir, "-helm", helm, chart); err != nil {
		return builtRelease{}, fmt.Errorf("release %s: %w", r.AppVersion, err)
	}
	return builtRelease{
		clusterRelease: r, ImageArchive: archive, Digest: digest,
		ChartPackage: filepath.Join(dir, "cgdelegate-"+r.Chart+".tgz"),
	}, nil
}

// archiveDigest is the digest of the image or index an archive holds.
func archiveDigest(archive, tmp string) (string, error) {
	f, err := os.Open(archive)
	if err != nil {
		return "", err
	}
	defer f.Close()
	a, cleanup, err := ociimage.ReadArchive(f, tmp)
	if err != nil {
		return "", fmt.Errorf("%s: %w", archive, err)
	}
	defer cleanup()
	d, err := a.Digest()
	if err != nil {
		return "", fmt.Errorf("%s: %w", archive, err)
	}
	return d.String(), nil
}

// helmEnv keeps helm's config, cache and registry logins in dir, not in
// the user's home.
func helmEnv(dir string) []string {
	return []string{
		"HELM_CONFIG_HOME=" + filepath.Join(dir, "helm", "config"),
		"HELM_CACHE_HOME=" + filepath.Join(dir, "helm", "cache"),
		"HELM_DATA_HOME=" + filepath.Join(dir, "helm", "data"),
		"HELM_REGISTRY_CONFIG=" + filepath.Join(dir, "helm", "registry.json"),
	}
}

// guestRegistry is what the guest is told of the registry and its
// releases (variant.RegistryFile); prev is the previous release, nil for
// a boot that does not install it (variant.Variant.NeedsPrevious).
func guestRegistry(r registryServer, rels []builtRelease, prev *builtRelease) ([]byte, error) {
	reg := variant.Registry{Host: r.GuestHost(), ImageRepo: registryImageRepo, ChartRepo: registryChartRepo}
	for _, rel := range rels {
		reg.Releases = append(reg.Releases, variant.Release{Chart: rel.Chart, AppVersion: rel.AppVersion, Digest: rel.Digest})
	}
	if prev != nil {
		reg.Previous = &variant.Release{Chart: prev.Chart, AppVersion: prev.AppVersion, Digest: prev.Digest}
	}
	b, err := json.MarshalIndent(reg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("registry file: %w", err)
	}
	return b, nil
}

// startRegistry starts the registry r (its Dir made here) and waits until
// GET /v2/ answers; t.Cleanup stops it, so it never outlives the
// variant's test.
func startRegistry(t *testing.T, log *slog.Logger, r registryServer) error {
	t.Helper()
	if err := r.validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(r.StorageDir(), 0o755); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if err := os.WriteFile(r.ConfigPath(), []byte(r.Config()), 0o644); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	start := time.Now()
	p, err := startHostProc("registry", filepath.Join(r.Dir, "registry.log"), registryCommand, "serve", r.ConfigPath())
	if err != nil {
		return fmt.Errorf("%w (run integration/vm/install-deps.sh)", err)
	}
	t.Cleanup(func() {
		if err := p.stop(10 * time.Second); err != nil {
			log.Warn("registry stop", "err", err)
		}
	})
	if err := waitHealthy(p, &http.Client{Timeout: 5 * time.Second}, "http://"+r.Addr()+"/v2/", 30*time.Second); err != nil {
		return fmt.Errorf("%w\n--- %s ---\n%s", err, p.log, fileTail(p.log, 30))
	}
	log.Info("registry up", "addr", r.Addr(), "pid", p.cmd.Process.Pid, "took", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// publishReleases pushes every release to the registry as `make push
// PLAIN_HTTP=1` does: the image archive under its appVersion tag
// (ociimage.PushArchive, `mkimage push`; the digest checked against the
// one the guest was told), then the chart with helm push.
func publishReleases(ctx context.Context, log *slog.Logger, r registryServer, helm string, rels []builtRelease) error {
	for _, rel := range rels {
		start := time.Now()
		ref := r.Addr() + "/" + registryImageRepo + ":" + rel.AppVersion
		d, err := ociimage.PushArchive(ctx, rel.ImageArchive, ref, ociimage.PushOptions{PlainHTTP: true})
		if err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		if d.String() != rel.Digest {
			return fmt.Errorf("push %s: pushed %s, the guest expects %s", ref, d, rel.Digest)
		}
		out, err := runCmd(ctx, helmEnv(r.Dir), helm, "push", rel.ChartPackage, "oci://"+r.Addr()+"/"+registryChartRepo, "--plain-http")
		if err != nil {
			return fmt.Errorf("push chart %s: %w", rel.Chart, err)
		}
		log.Info("release pushed", "image", ref, "digest", rel.Digest, "chart", rel.Chart,
			"helm", strings.TrimSpace(string(out)), "took", time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}

// runCmd runs name with env added and returns its combined output, which
// the error carries too.
func runCmd(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}
