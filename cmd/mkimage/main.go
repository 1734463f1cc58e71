// Command mkimage writes the cgdelegate release image as an OCI image
// layout tar, without a container engine (`make image`):
//
//	mkimage -o bin/cgdelegate-image.tar -version v0.1.0 [-tag dev] bin/cgdelegate bin/cgdelegate-hook bin/cgdelegate-init
//
// The image is scratch-style: the given binaries under /usr/local/bin and
// nothing else. Its entrypoint is the first binary; it is named
// <-repo>:<-tag> (-tag defaults to -version) and labelled with the version,
// source and license.
// `ctr -n k8s.io images import` and `podman load` accept the archive.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cgdelegate/cgdelegate/internal/atomicfile"
	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// Defaults of the image reference and labels.
const (
	defaultRepo   = "ghcr.io/cgdelegate/cgdelegate"
	defaultSource = "https://github.com/cgdelegate/cgdelegate"
	license       = "Apache-2.0"
	binDir        = "usr/local/bin"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "output OCI layout tar (required)")
	spec := spec{}
	fs.StringVar(&spec.repo, "repo", defaultRepo, "image repository; the reference is <repo>:<version>")
	fs.StringVar(&spec.version, "version", "", "image version label, e.g. git describe (required)")
	fs.StringVar(&spec.tag, "tag", "", "image tag (default: the version)")
	fs.StringVar(&spec.source, "source", defaultSource, "org.opencontainers.image.source label")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	spec.binaries = fs.Args()
	if err := write(*out, spec); err != nil {
		fmt.Fprintln(stderr, "mkimage:", err)
		return 1
	}
	return 0
}

// spec is what the image is made of.
type spec struct {
	repo, tag, version, source string
	// binaries are host paths; the first is the entrypoint.
	binaries []string
}

// image describes the release image: every binary under /usr/local/bin,
// the first as the entrypoint.
func (s spec) image() (ociimage.Image, error) {
	var errs []error
	if s.version == "" {
		errs = append(errs, errors.New("-version is required"))
	}
	if s.repo == "" {
		errs = append(errs, errors.New("-repo must not be empty"))
	}
	if len(s.binaries) == 0 {
		errs = append(errs, errors.New("no binaries given"))
	}
	if err := errors.Join(errs...); err != nil {
		return ociimage.Image{}, err
	}
	files := []ociimage.File{
		{Name: "usr", Mode: 0o755, Dir: true},
		{Name: "usr/local", Mode: 0o755, Dir: true},
		{Name: binDir, Mode: 0o755, Dir: true},
	}
	for _, b := range s.binaries {
		files = append(files, ociimage.File{Name: binDir + "/" + filepath.Base(b), Mode: 0o755, HostPath: b})
	}
	tag := s.tag
	if tag == "" {
		tag = s.version
	}
	return ociimage.Image{
		Name:       s.repo + ":" + tag,
		Files:      files,
		Entrypoint: []string{"/" + binDir + "/" + filepath.Base(s.binaries[0])},
		Labels: map[string]string{
			"org.opencontainers.image.version":  s.version,
			"org.opencontainers.image.source":   s.source,
			"org.opencontainers.image.licenses": license,
			"org.opencontainers.image.title":    filepath.Base(s.binaries[0]),
		},
	}, nil
}

// write writes the image to path, atomically.
func write(path string, s spec) error {
	if path == "" {
		return errors.New("-o is required")
	}
	img, err := s.image()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := ociimage.WriteLayout(&buf, img); err != nil {
		return err
	}
	if err := atomicfile.Write(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	return nil
}
