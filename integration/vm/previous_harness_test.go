package vm

// The previous release, the pure part: which commit it is, the release it
// is pushed as, and its source taken from the repository's history
// (previousSource). previous_run_test.go builds its binaries (cached by
// commit), its image with today's release code and its chart as it was;
// the extended cluster boot's registry holds it beside clusterReleases
// (variant.Registry.Previous) and ClusterUpgradeFromPrevious upgrades
// from it.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// previousReleaseCommit is the previous release: the commit whose chart
// and binaries ClusterUpgradeFromPrevious installs and upgrades from to
// this code's first release. Nothing was tagged yet, so it is the last
// main that landed through CI (stop 41 of the project's rounds, issue
// 44): the newest code users can have installed. Move it to the last
// release's tag once there is one (docs/releasing.md, "Upgrade path").
const previousReleaseCommit = "42230be9613b3d8c6e5121a08e53749afc3d0c11"

// previousRelease is the previous release as the registry holds it: older
// than both clusterReleases, so helm sees an upgrade.
var previousRelease = clusterRelease{Chart: "0.0.0-ci.1", AppVersion: "v0.0.0-ci.1"}

// previousBinaries are the release image's binaries, built from the
// commit's tree with its own go.mod, the entrypoint first (as `make
// image` orders them).
var previousBinaries = []string{"cgdelegate", "cgdelegate-hook", "cgdelegate-init"}

// previousChartDir is the chart's directory in the commit's tree.
const previousChartDir = "contrib/helm/cgdelegate"

// errPreviousSource is wrapped by every failure to take the previous
// release's source from the repository.
var errPreviousSource = errors.New("previous release's source")

// previousSource writes the tree of commit in repo (a git repository)
// into dst, an existing directory, with git archive. A commit the
// repository lacks (a shallow clone) fails naming it and the command
// that fetches it.
func previousSource(ctx context.Context, repo, commit, dst string) error {
	if out, err := exec.CommandContext(ctx, "git", "-C", repo, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: commit %s is not in %s (a shallow clone? run git fetch --unshallow): %w: %s",
			errPreviousSource, commit, repo, err, strings.TrimSpace(string(out)))
	}
	tarball := filepath.Join(dst, ".source.tar")
	if out, err := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", "-o", tarball, commit).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: git archive %s: %w: %s", errPreviousSource, commit, err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.CommandContext(ctx, "tar", "-x", "-f", tarball, "-C", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: unpacking %s: %w: %s", errPreviousSource, commit, err, strings.TrimSpace(string(out)))
	}
	return os.Remove(tarball)
}
