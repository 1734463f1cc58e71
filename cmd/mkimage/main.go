// Command mkimage writes the cgdelegate release image as an OCI image
// layout tar, without a container engine (`make image`):
//
//	mkimage -o bin/cgdelegate-image.tar -version v0.1.0 [-tag dev] bin/cgdelegate bin/cgdelegate-hook bin/cgdelegate-init
//
// The image is scratch-style: the given binaries under /usr/local/bin and
// nothing else. Its entrypoint is the first binary; it is named
// <-repo>:<-tag> (-tag defaults to -version) and labelled with the version,
// source and license. internal/ociimage.Release describes it, for the VM
// suite too.
// `ctr -n k8s.io images import` and `podman load` accept the archive.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "output OCI layout tar (required)")
	spec := ociimage.Release{}
	fs.StringVar(&spec.Repo, "repo", ociimage.DefaultRepo, "image repository; the reference is <repo>:<version>")
	fs.StringVar(&spec.Version, "version", "", "image version label, e.g. git describe (required)")
	fs.StringVar(&spec.Tag, "tag", "", "image tag (default: the version)")
	fs.StringVar(&spec.Source, "source", ociimage.DefaultSource, "org.opencontainers.image.source label")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	spec.Binaries = fs.Args()
	if err := write(*out, spec); err != nil {
		fmt.Fprintln(stderr, "mkimage:", err)
		return 1
	}
	return 0
}

// write writes the image to path, atomically.
func write(path string, s ociimage.Release) error {
	if path == "" {
		return errors.New("-o is required")
	}
	img, err := s.Image()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := ociimage.WriteLayout(&buf, img); err != nil {
		return err
	}
	if err := host.WriteFileAtomic(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	return nil
}
