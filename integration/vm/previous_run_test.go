//go:build integration_vm

package vm

// The previous release, the building part: its binaries built from
// previousReleaseCommit's tree with that tree's go.mod and cached by
// commit (a warm run rebuilds nothing), its image written by today's
// release code (ociimage.Release, as buildReleases does) and its chart
// directory, as the commit had it, packaged by today's mkimage chart.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// previousDir is the cached build of the previous release: bin/ holds
// previousBinaries, chart/ the commit's chart directory.
func (b *builder) previousDir(ctx context.Context) (string, error) {
	return b.cached("previous/"+previousReleaseCommit+"-"+previousRelease.AppVersion, func(tmp string) error {
		src := filepath.Join(tmp, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := previousSource(ctx, b.repo, previousReleaseCommit, src); err != nil {
			return err
		}
		// As that commit's Makefile links them (LDFLAGS), with the
		// release's version; modules from the proxy or the cache.
		env := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=-buildvcs=false"}
		for _, name := range previousBinaries {
			if _, err := b.run(ctx, src, env, "go", "build", "-trimpath",
				"-ldflags", "-X github.com/cgdelegate/cgdelegate/internal/version.linked="+previousRelease.AppVersion,
				"-o", filepath.Join(tmp, "bin", name), "./cmd/"+name); err != nil {
				return fmt.Errorf("%s at %s: %w", name, previousReleaseCommit, err)
			}
		}
		if err := os.Rename(filepath.Join(src, previousChartDir), filepath.Join(tmp, "chart")); err != nil {
			return fmt.Errorf("chart at %s: %w", previousReleaseCommit, err)
		}
		return os.RemoveAll(src)
	})
}

// buildPrevious writes the previous release into workDir/releases beside
// buildReleases' (previousRelease's version and appVersion).
func (b *builder) buildPrevious(ctx context.Context, helm string) (*builtRelease, error) {
	cached, err := b.previousDir(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.workDir, "releases")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("previous release: %w", err)
	}
	mkimage, err := b.goBuild(ctx, "mkimage", "./cmd/mkimage", false, "")
	if err != nil {
		return nil, fmt.Errorf("previous release: %w", err)
	}
	var bins []string
	for _, name := range previousBinaries {
		bins = append(bins, filepath.Join(cached, "bin", name))
	}
	rel, err := b.buildRelease(ctx, dir, mkimage, helm, filepath.Join(cached, "chart"), previousRelease, bins)
	if err != nil {
		return nil, fmt.Errorf("previous release (%s): %w", previousReleaseCommit, err)
	}
	return &rel, nil
}
