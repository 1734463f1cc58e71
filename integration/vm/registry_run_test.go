//go:build integration_vm

package vm

// The cluster boot's OCI registry, the running part: the two releases
// built (buildReleases: each release image as `make image` writes it, and
// the chart packaged with `helm package`), the registry started on the
// host's loopback (startRegistry: `docker-registry serve`, the CNCF
// distribution registry from Debian's docker-registry package) and the
// releases pushed to it before the boot (publishReleases: the image with
// oras-go, the chart with `helm push`, as a user publishes them).

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

	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// registryCommand is the distribution registry's binary (Debian's
// docker-registry package, integration/vm/install-deps.sh).
const registryCommand = "docker-registry"

// builtRelease is a clusterRelease built for this run.
type builtRelease struct {
	clusterRelease
	// ImageTar is the release image's OCI layout tar and ImageRef its
	// name in the layout; Digest is its manifest's digest.
	ImageTar, ImageRef, Digest string
	// ChartPackage is the chart packaged for the release (.tgz).
	ChartPackage string
}

// buildReleases writes clusterReleases into workDir/releases: each image
// from binaries, labelled with its appVersion, and the chart directory
// packaged with its version and appVersion.
func (b *builder) buildReleases(ctx context.Context, helm, chart string, binaries ...string) ([]builtRelease, error) {
	dir := filepath.Join(b.workDir, "releases")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("releases: %w", err)
	}
	var out []builtRelease
	for _, r := range clusterReleases {
		img, err := ociimage.Release{Repo: registryImageRepo, Version: r.AppVersion, Binaries: binaries}.Image()
		if err != nil {
			return nil, fmt.Errorf("release %s: %w", r.AppVersion, err)
		}
		tarPath := filepath.Join(dir, "image-"+r.AppVersion+".tar")
		f, err := os.Create(tarPath) //nolint:forbidigo // scratch file in our own work dir
		if err != nil {
			return nil, fmt.Errorf("release %s: %w", r.AppVersion, err)
		}
		werr := ociimage.WriteLayout(f, img)
		if err := errors.Join(werr, f.Close()); err != nil {
			return nil, fmt.Errorf("release %s: %w", r.AppVersion, err)
		}
		store, err := oci.NewFromTar(ctx, tarPath)
		if err != nil {
			return nil, fmt.Errorf("release %s: %w", r.AppVersion, err)
		}
		desc, err := store.Resolve(ctx, img.Name)
		if err != nil {
			return nil, fmt.Errorf("release %s: %s in %s: %w", r.AppVersion, img.Name, tarPath, err)
		}
		if _, err := b.run(ctx, b.repo, helmEnv(dir), helm, "package", chart,
			"--version", r.Chart, "--app-version", r.AppVersion, "--destination", dir); err != nil {
			return nil, fmt.Errorf("release %s: %w", r.AppVersion, err)
		}
		out = append(out, builtRelease{
			clusterRelease: r, ImageTar: tarPath, ImageRef: img.Name, Digest: desc.Digest.String(),
			ChartPackage: filepath.Join(dir, "cgdelegate-"+r.Chart+".tgz"),
		})
	}
	return out, nil
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
// releases (variant.RegistryFile).
func guestRegistry(r registryServer, rels []builtRelease) ([]byte, error) {
	reg := variant.Registry{Host: r.GuestHost(), ImageRepo: registryImageRepo, ChartRepo: registryChartRepo}
	for _, rel := range rels {
		reg.Releases = append(reg.Releases, variant.Release{Chart: rel.Chart, AppVersion: rel.AppVersion, Digest: rel.Digest})
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
func startRegistry(t *testing.T, log *slog.Logger, r registryServer) (*hostProc, error) {
	t.Helper()
	if err := r.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.StorageDir(), 0o755); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if err := os.WriteFile(r.ConfigPath(), []byte(r.Config()), 0o644); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	start := time.Now()
	p, err := startHostProc("registry", filepath.Join(r.Dir, "registry.log"), registryCommand, "serve", r.ConfigPath())
	if err != nil {
		return nil, fmt.Errorf("%w (run integration/vm/install-deps.sh)", err)
	}
	t.Cleanup(func() {
		if err := p.stop(10 * time.Second); err != nil {
			log.Warn("registry stop", "err", err)
		}
	})
	if err := waitHealthy(p, &http.Client{Timeout: 5 * time.Second}, "http://"+r.Addr()+"/v2/", 30*time.Second); err != nil {
		return nil, fmt.Errorf("%w\n--- %s ---\n%s", err, p.log, fileTail(p.log, 30))
	}
	log.Info("registry up", "addr", r.Addr(), "pid", p.cmd.Process.Pid, "took", time.Since(start).Round(100*time.Millisecond))
	return p, nil
}

// publishReleases pushes every release to the registry: the image under
// its appVersion tag (its digest checked against the one the guest was
// told), then the chart with helm push.
func publishReleases(ctx context.Context, log *slog.Logger, r registryServer, helm string, rels []builtRelease) error {
	for _, rel := range rels {
		start := time.Now()
		src, err := oci.NewFromTar(ctx, rel.ImageTar)
		if err != nil {
			return fmt.Errorf("push %s: %w", rel.AppVersion, err)
		}
		dst, err := remote.NewRepository(r.Addr() + "/" + registryImageRepo)
		if err != nil {
			return fmt.Errorf("push %s: %w", rel.AppVersion, err)
		}
		dst.PlainHTTP = true
		desc, err := oras.Copy(ctx, src, rel.ImageRef, dst, rel.AppVersion, oras.DefaultCopyOptions)
		if err != nil {
			return fmt.Errorf("push %s to %s: %w", rel.ImageRef, r.Addr(), err)
		}
		if got := desc.Digest.String(); got != rel.Digest {
			return fmt.Errorf("push %s: the registry has %s, the guest expects %s", rel.ImageRef, got, rel.Digest)
		}
		out, err := runCmd(ctx, helmEnv(r.Dir), helm, "push", rel.ChartPackage, "oci://"+r.Addr()+"/"+registryChartRepo, "--plain-http")
		if err != nil {
			return fmt.Errorf("push chart %s: %w", rel.Chart, err)
		}
		log.Info("release pushed", "image", r.Addr()+"/"+registryImageRepo+":"+rel.AppVersion, "digest", rel.Digest,
			"chart", rel.Chart, "helm", string(out), "took", time.Since(start).Round(100*time.Millisecond))
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
