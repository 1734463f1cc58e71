package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ErrVerify is wrapped by every way a written release differs from what
// it should be.
var ErrVerify = errors.New("release image check")

// Verify reads the release back from an archive Write wrote: its name,
// one image per architecture of the release (an image index when there
// are several, each manifest with its platform), each image's config for
// linux and that architecture, and every file under /usr/local/bin an ELF
// executable for it.
func (r Release) Verify(a Archived) error {
	if a.Name != r.Name() {
		return fmt.Errorf("%w: the archive names %q, want %q", ErrVerify, a.Name, r.Name())
	}
	arches := r.Arches()
	if a.Index == nil {
		if len(arches) != 1 || a.Image == nil {
			return fmt.Errorf("%w: one image in the archive, want an index of %q", ErrVerify, arches)
		}
		return verifyImage(a.Image, arches[0])
	}
	im, err := a.Index.IndexManifest()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrVerify, err)
	}
	var got []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			return fmt.Errorf("%w: manifest %s has no platform", ErrVerify, d.Digest)
		}
		got = append(got, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := a.Index.Image(d.Digest)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrVerify, d.Platform, err)
		}
		if err := verifyImage(img, d.Platform.Architecture); err != nil {
			return err
		}
	}
	want := make([]string, 0, len(arches))
	for _, arch := range arches {
		want = append(want, "linux/"+arch)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("%w: the index lists %q, want %q", ErrVerify, got, want)
	}
	return nil
}

// verifyImage checks one architecture's image.
func verifyImage(img v1.Image, arch string) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrVerify, arch, err)
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		return fmt.Errorf("%w: the %s image's config says %s/%s", ErrVerify, arch, cf.OS, cf.Architecture)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrVerify, arch, err)
	}
	found := 0
	for _, l := range layers {
		n, err := verifyLayer(l, arch)
		if err != nil {
			return err
		}
		found += n
	}
	if found == 0 {
		return fmt.Errorf("%w: the %s image has no binaries under /%s", ErrVerify, arch, releaseBinDir)
	}
	return nil
}

// verifyLayer checks the binaries of one layer and returns their count.
func verifyLayer(l v1.Layer, arch string) (int, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrVerify, arch, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	n := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("%w: %s: %w", ErrVerify, arch, err)
		}
		if hdr.Typeflag != tar.TypeReg || !strings.HasPrefix(hdr.Name, releaseBinDir+"/") {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return n, fmt.Errorf("%w: %s: %w", ErrVerify, arch, err)
		}
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return n, fmt.Errorf("%w: /%s in the %s image: %w", ErrVerify, hdr.Name, arch, err)
		}
		if f.Machine != machines[arch] {
			return n, fmt.Errorf("%w: /%s in the %s image is built for %s", ErrVerify, hdr.Name, arch, f.Machine)
		}
		n++
	}
}
