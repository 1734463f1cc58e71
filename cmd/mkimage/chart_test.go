package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const chartDir = "../../contrib/helm/cgdelegate"

// needGo skips when there is no Go toolchain to run `go tool helm` with.
func needGo(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go on PATH to run go tool helm: %v", err)
	}
}

// The chart of a release has the release's version (without v) and
// appVersion, and renders the release's image tag by default.
func TestChart(t *testing.T) {
	needGo(t)
	out := t.TempDir()
	if code, stderr := mkimage(t, "chart", "-version", "v1.2.3-rc.1", "-o", out, chartDir); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	tgz := filepath.Join(out, "cgdelegate-1.2.3-rc.1.tgz")
	meta, err := packagedChart(tgz)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Version != "1.2.3-rc.1" || meta.AppVersion != "v1.2.3-rc.1" {
		t.Errorf("Chart.yaml version %q appVersion %q, want 1.2.3-rc.1 and v1.2.3-rc.1", meta.Version, meta.AppVersion)
	}
	cmd := exec.Command("go", "tool", "helm", "template", "cgdelegate", tgz, "--namespace", "kube-system")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // the helm build make chart made
	rendered, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", tgz, err, rendered)
	}
	if want := "image: ghcr.io/cgdelegate/cgdelegate:v1.2.3-rc.1\n"; !strings.Contains(string(rendered), want) {
		t.Errorf("the packaged chart does not render %q by default", strings.TrimSpace(want))
	}
	if strings.Contains(string(rendered), "cgdelegate:dev") {
		t.Error("the packaged chart still renders the dev tag")
	}
}

func TestChartRefuses(t *testing.T) {
	dir := t.TempDir()
	// A helm that packages a chart whose Chart.yaml kept the repository's
	// appVersion: mkimage chart must notice.
	fakeHelm := filepath.Join(dir, "helm")
	script := `#!/bin/sh
set -e
while [ $# -gt 0 ]; do
	case "$1" in --destination) dest=$2; shift;; esac
	shift
done
mkdir -p "$dest/src/cgdelegate"
printf 'name: cgdelegate\nversion: 1.2.3\nappVersion: dev\n' > "$dest/src/cgdelegate/Chart.yaml"
tar -C "$dest/src" -czf "$dest/cgdelegate-1.2.3.tgz" cgdelegate
`
	if err := os.WriteFile(fakeHelm, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad version", []string{"chart", "-version", "1.2.3", "-o", dir, chartDir}, 1, `VERSION "1.2.3"`},
		{"no output", []string{"chart", "-version", "v1.2.3", chartDir}, 1, "-o is required"},
		{"no chart", []string{"chart", "-version", "v1.2.3", "-o", dir}, 2, "usage: mkimage chart"},
		{
			"appVersion not set",
			[]string{"chart", "-helm", fakeHelm, "-version", "v1.2.3", "-o", dir, chartDir},
			1,
			`has version "1.2.3" and appVersion "dev", want "1.2.3" and "v1.2.3"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := mkimage(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

func TestCheckVersionCommand(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"check-version", "v0.3.0"}, 0, ""},
		{[]string{"check-version", "0.3.0"}, 1, `mkimage: not a release version: VERSION "0.3.0": want vMAJOR.MINOR.PATCH`},
		{[]string{"check-version", ""}, 1, `VERSION ""`},
		{[]string{"check-version"}, 1, "check-version takes one VERSION, got 0 arguments"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stderr := mkimage(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}
