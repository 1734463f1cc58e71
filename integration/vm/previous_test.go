package vm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo makes a repository with one commit holding file name with
// content, and returns its directory and the commit.
func gitRepo(t *testing.T, name, content string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	git("commit", "-q", "-m", "one")
	return dir, git("rev-parse", "HEAD")
}

// TestPreviousSource: the commit's tree is written out; a commit the
// repository lacks fails naming it and git fetch --unshallow.
func TestPreviousSource(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git not installed: %v", err)
	}
	repo, head := gitRepo(t, "contrib/helm/cgdelegate/Chart.yaml", "name: cgdelegate\n")
	const missing = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name, commit string
		wantErr      []string
	}{
		{"present", head, nil},
		{"missing", missing, []string{missing, "git fetch --unshallow"}},
		{"not a commit", "no-such-ref", []string{"no-such-ref", "git fetch --unshallow"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			err := previousSource(context.Background(), repo, tc.commit, dst)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(dst, "contrib/helm/cgdelegate/Chart.yaml"))
				if err != nil || string(b) != "name: cgdelegate\n" {
					t.Errorf("the tree's Chart.yaml: %q (%v)", b, err)
				}
				if _, err := os.Stat(filepath.Join(dst, ".source.tar")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the archive was left in the tree: %v", err)
				}
				return
			}
			if !errors.Is(err, errPreviousSource) {
				t.Fatalf("err %v, want %v", err, errPreviousSource)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestPreviousRelease: the previous release is a full commit and older
// than every release of this code, so helm upgrades from it.
func TestPreviousRelease(t *testing.T) {
	if len(previousReleaseCommit) != 40 || strings.Trim(previousReleaseCommit, "0123456789abcdef") != "" {
		t.Errorf("previousReleaseCommit %q: want a full commit hash", previousReleaseCommit)
	}
	if "v"+previousRelease.Chart != previousRelease.AppVersion {
		t.Errorf("previous release: chart %s, appVersion %s; want appVersion v<chart> (mkimage chart)", previousRelease.Chart, previousRelease.AppVersion)
	}
	for _, r := range clusterReleases {
		// vX.Y.Z-ci.1 with one-digit parts: the string order is the
		// version order.
		if previousRelease.AppVersion >= r.AppVersion || previousRelease.Chart >= r.Chart {
			t.Errorf("previous release %s is not older than %s", previousRelease.AppVersion, r.AppVersion)
		}
	}
}
