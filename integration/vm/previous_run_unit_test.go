//go:build integration_vm

package vm

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// TestGuestRegistry: the registry file names the releases, oldest first,
// and the previous release only when the boot installs it.
func TestGuestRegistry(t *testing.T) {
	r := registryServer{IP: "10.213.0.1", Port: 5000, Dir: "/r"}
	rels := []builtRelease{
		{clusterRelease: clusterReleases[0], Digest: "sha256:aa"},
		{clusterRelease: clusterReleases[1], Digest: "sha256:bb"},
	}
	prev := &builtRelease{clusterRelease: previousRelease, Digest: "sha256:00"}
	for _, tc := range []struct {
		name     string
		prev     *builtRelease
		wantPrev *variant.Release
	}{
		{"without the previous release", nil, nil},
		{"with it", prev, &variant.Release{Chart: previousRelease.Chart, AppVersion: previousRelease.AppVersion, Digest: "sha256:00"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := guestRegistry(r, rels, tc.prev)
			if err != nil {
				t.Fatal(err)
			}
			var got variant.Registry
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.Host != "10.213.0.1:5000" || len(got.Releases) != 2 || got.Releases[0].Digest != "sha256:aa" || got.Releases[1].Chart != clusterReleases[1].Chart {
				t.Errorf("registry %+v: want the host and both releases, oldest first", got)
			}
			switch {
			case tc.wantPrev == nil && (got.Previous != nil || strings.Contains(string(b), "previous")):
				t.Errorf("registry names a previous release the boot does not install:\n%s", b)
			case tc.wantPrev != nil && (got.Previous == nil || *got.Previous != *tc.wantPrev):
				t.Errorf("previous %+v, want %+v", got.Previous, tc.wantPrev)
			}
		})
	}
}

// TestPreviousBuild: the previous release builds from the repository's
// history (its three binaries, its image and its chart packaged with its
// version), and a second build takes the binaries from the cache. Only
// where the boots selected install it (the extended cluster boot): CI's
// suite neither builds it nor needs the repository's history.
func TestPreviousBuild(t *testing.T) {
	suite, err := suiteOf(os.Getenv("CGD_SUITE"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(selectVariants(suite), variant.Variant.NeedsPrevious) {
		t.Skip("no selected boot installs the previous release (CGD_SUITE=extended with the cluster boot does)")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b := &builder{log: log, repo: repoRoot(t), cacheDir: defaultCacheDir(), workDir: t.TempDir()}
	helm, err := b.helm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := b.buildPrevious(ctx, helm)
	if err != nil {
		t.Fatal(err)
	}
	if rel.clusterRelease != previousRelease || !strings.HasPrefix(rel.Digest, "sha256:") {
		t.Errorf("previous release %+v: want %+v with a digest", rel, previousRelease)
	}
	if filepath.Base(rel.ChartPackage) != "cgdelegate-"+previousRelease.Chart+".tgz" {
		t.Errorf("chart package %s", rel.ChartPackage)
	}
	dir, err := b.previousDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(filepath.Join(dir, ".complete"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range previousBinaries {
		if _, err := os.Stat(filepath.Join(dir, "bin", name)); err != nil {
			t.Errorf("cached binary: %v", err)
		}
	}
	// Warm: nothing rebuilt.
	if _, err := b.buildPrevious(ctx, helm); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(filepath.Join(dir, ".complete"))
	if err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the cached build changed (%v): built again", err)
	}
}
