package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// errChart is wrapped when the packaged chart is not what was asked for.
var errChart = errors.New("chart package")

// chart packages the chart of a release with helm (`go tool helm package`,
// helm being a tool of this module): chart version VERSION without its v,
// appVersion VERSION, so the chart's default image tag (empty: the
// appVersion) is the release's image. It then reads the package back and
// checks both.
func chart(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("mkimage chart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "", "the release version, vMAJOR.MINOR.PATCH (required)")
	out := fs.String("o", "", "the directory to write <chart>-<version>.tgz to (required)")
	helm := fs.String("helm", "go tool helm", "the helm command, split at spaces")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mkimage chart -version vX.Y.Z -o DIR CHARTDIR")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	if *out == "" {
		return errors.New("-o is required")
	}
	if err := ociimage.CheckVersion(*version); err != nil {
		return err
	}
	tgz, err := packageChart(ctx, strings.Fields(*helm), fs.Arg(0), *version, *out)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, "chart:", tgz)
	return nil
}

// packageChart runs helm package and checks the package it wrote; it
// returns the package's path.
func packageChart(ctx context.Context, helm []string, dir, version, out string) (string, error) {
	chartVersion := strings.TrimPrefix(version, "v")
	args := append(helm[1:], "package", dir, "--version", chartVersion, "--app-version", version, "--destination", out)
	cmd := exec.CommandContext(ctx, helm[0], args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", strings.Join(append(helm[:1], args...), " "), err, stderr.Bytes())
	}
	name, err := chartName(dir)
	if err != nil {
		return "", err
	}
	tgz := filepath.Join(out, name+"-"+chartVersion+".tgz")
	meta, err := packagedChart(tgz)
	if err != nil {
		return "", err
	}
	if meta.Version != chartVersion || meta.AppVersion != version {
		return "", fmt.Errorf("%w: %s has version %q and appVersion %q, want %q and %q",
			errChart, tgz, meta.Version, meta.AppVersion, chartVersion, version)
	}
	return tgz, nil
}

// chartMeta are the fields of Chart.yaml a release sets.
type chartMeta struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

func chartName(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	var m chartMeta
	if err := yaml.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("%w: %s/Chart.yaml: %w", errChart, dir, err)
	}
	if m.Name == "" {
		return "", fmt.Errorf("%w: %s/Chart.yaml has no name", errChart, dir)
	}
	return m.Name, nil
}

// packagedChart reads <name>/Chart.yaml from a chart package.
func packagedChart(tgz string) (chartMeta, error) {
	f, err := os.Open(tgz)
	if err != nil {
		return chartMeta{}, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return chartMeta{}, fmt.Errorf("%w: %s: %w", errChart, tgz, err)
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return chartMeta{}, fmt.Errorf("%w: %s has no Chart.yaml", errChart, tgz)
		}
		if err != nil {
			return chartMeta{}, fmt.Errorf("%w: %s: %w", errChart, tgz, err)
		}
		if dir, file := path.Split(hdr.Name); file != "Chart.yaml" || strings.Count(dir, "/") != 1 {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return chartMeta{}, fmt.Errorf("%w: %s: %w", errChart, tgz, err)
		}
		var m chartMeta
		if err := yaml.Unmarshal(b, &m); err != nil {
			return chartMeta{}, fmt.Errorf("%w: %s: Chart.yaml: %w", errChart, tgz, err)
		}
		return m, nil
	}
}
