//go:build integration_vm

package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// podmanVersion is the version `make image` is given, so the label and the
// binaries' -version are known.
const podmanVersion = "v0.0.0-podman-test"

// TestPodmanLoad: `podman load` accepts the archive `make image` writes,
// podman sees its name, version label and entrypoint, and the entrypoint
// runs. Podman comes from install-deps.sh (Debian's podman); without it the
// test skips, except under CI=true, where the missing package is a failure.
func TestPodmanLoad(t *testing.T) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("podman not installed under CI=true: integration/vm/install-deps.sh installs it")
		}
		t.Skip("podman not installed (bash integration/vm/install-deps.sh installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Short paths: conmon's attach socket lives under the run root, and
	// Unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cgd-podman-")
	if err != nil {
		t.Fatal(err)
	}
	b := &builder{log: slog.New(slog.NewTextHandler(os.Stderr, nil)), repo: repoRoot(t), cacheDir: defaultCacheDir(), workDir: dir}
	p := podmanStore{bin: podman, root: filepath.Join(dir, "root"), runRoot: filepath.Join(dir, "run")}
	t.Cleanup(func() {
		// Containers are --rm; this drops the image and its vfs layers.
		if out, err := p.run(context.Background(), "rmi", "--all", "--force"); err != nil {
			t.Logf("podman rmi: %v: %s", err, out)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("podman storage not removed: %v", err)
		}
	})

	bin := filepath.Join(dir, "bin")
	const tag = "podman-test"
	if _, err := b.run(ctx, b.repo, []string{"GOFLAGS=-buildvcs=false"}, "make", "image",
		"BINDIR="+bin, "IMAGE_TAG="+tag, "VERSION="+podmanVersion); err != nil {
		t.Fatalf("make image: %v", err)
	}
	archive := filepath.Join(bin, "cgdelegate-image.tar")
	ref := ociimage.DefaultRepo + ":" + tag

	out, err := p.run(ctx, "load", "--input", archive)
	if err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Loaded image: "+ref) {
		t.Errorf("podman load did not report %s:\n%s", ref, out)
	}

	out, err = p.run(ctx, "image", "inspect", ref)
	if err != nil {
		t.Fatalf("podman image inspect %s: %v\n%s", ref, err, out)
	}
	var inspect []struct {
		RepoTags []string
		Config   struct {
			Entrypoint []string
			Labels     map[string]string
		}
	}
	if err := json.Unmarshal(out, &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v (%d images)\n%s", err, len(inspect), out)
	}
	img := inspect[0]
	if !slices.Contains(img.RepoTags, ref) {
		t.Errorf("RepoTags %q, want %s", img.RepoTags, ref)
	}
	if got := img.Config.Labels["org.opencontainers.image.version"]; got != podmanVersion {
		t.Errorf("version label %q, want %q", got, podmanVersion)
	}
	if want := []string{"/usr/local/bin/cgdelegate"}; !slices.Equal(img.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", img.Config.Entrypoint, want)
	}

	t.Run("EntrypointRuns", func(t *testing.T) {
		// The image's entrypoint with -version: the plugin binary from the
		// image, linked with the version make image was given.
		want := "cgdelegate " + podmanVersion
		out, err := p.runImage(ctx, "", ref)
		if err == nil {
			if got := strings.TrimSpace(string(out)); got != want {
				t.Errorf("podman run %s -version printed %q, want %q", ref, got, want)
			}
			return
		}
		// Podman's default runtime may not run on this host (crun refuses
		// a hybrid cgroup v1/v2 host): retry with the suite's own runc.
		t.Logf("podman run with the default runtime: %v\n%s", err, out)
		runc, rerr := b.runc(ctx)
		if rerr != nil {
			t.Fatalf("podman's runtime failed and runc did not build: %v", rerr)
		}
		out, err = p.runImage(ctx, runc, ref)
		if err != nil {
			t.Fatalf("podman --runtime %s run %s -version: %v\n%s", runc, ref, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("podman run %s -version printed %q, want %q", ref, got, want)
		}
	})
}

// podmanStore runs podman on a private vfs store, so the test leaves the
// host's images alone and needs no overlay or fuse.
type podmanStore struct {
	bin, root, runRoot string
}

func (p podmanStore) run(ctx context.Context, args ...string) ([]byte, error) {
	return p.runWith(ctx, "", args...)
}

// runWith runs podman with runtime as its OCI runtime ("" for its default)
// and returns its stdout; the error carries its stderr.
func (p podmanStore) runWith(ctx context.Context, runtime string, args ...string) ([]byte, error) {
	global := []string{
		"--root", p.root, "--runroot", p.runRoot, "--storage-driver", "vfs",
		"--cgroup-manager", "cgroupfs", "--events-backend", "file",
	}
	if runtime != "" {
		global = append(global, "--runtime", runtime)
	}
	cmd := exec.CommandContext(ctx, p.bin, append(global, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("podman %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// runImage runs the image's entrypoint with -version, with no network and
// low rlimits: podman's defaults (nofile 1048576) need CAP_SYS_RESOURCE
// to raise, which a CI container may lack.
func (p podmanStore) runImage(ctx context.Context, runtime, ref string) ([]byte, error) {
	return p.runWith(ctx, runtime, "run", "--rm", "--network", "none",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", ref, "-version")
}
