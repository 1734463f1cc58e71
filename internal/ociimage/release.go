package ociimage

import (
	"errors"
	"path/filepath"
)

// Defaults of the release image's reference and labels (`make image`).
const (
	DefaultRepo   = "ghcr.io/cgdelegate/cgdelegate"
	DefaultSource = "https://github.com/cgdelegate/cgdelegate"
	license       = "Apache-2.0"
	releaseBinDir = "usr/local/bin"
)

// Release is what the release image is made of: cmd/mkimage (`make image`)
// and the VM suite (integration/vm) describe it with the same function.
type Release struct {
	// Repo is the image repository; the reference is Repo:Tag.
	Repo string
	// Tag defaults to Version.
	Tag string
	// Version is the org.opencontainers.image.version label (git describe).
	Version string
	// Source is the org.opencontainers.image.source label.
	Source string
	// Binaries are host paths, each put under /usr/local/bin; the first
	// is the entrypoint.
	Binaries []string
}

// Image describes the release image: scratch-style, every binary under
// /usr/local/bin and nothing else, the first as the entrypoint. Every
// missing field is named in the error.
func (r Release) Image() (Image, error) {
	var errs []error
	if r.Version == "" {
		errs = append(errs, errors.New("-version is required"))
	}
	if r.Repo == "" {
		errs = append(errs, errors.New("-repo must not be empty"))
	}
	if len(r.Binaries) == 0 {
		errs = append(errs, errors.New("no binaries given"))
	}
	if err := errors.Join(errs...); err != nil {
		return Image{}, err
	}
	files := []File{
		{Name: "usr", Mode: 0o755, Dir: true},
		{Name: "usr/local", Mode: 0o755, Dir: true},
		{Name: releaseBinDir, Mode: 0o755, Dir: true},
	}
	for _, b := range r.Binaries {
		files = append(files, File{Name: releaseBinDir + "/" + filepath.Base(b), Mode: 0o755, HostPath: b})
	}
	tag := r.Tag
	if tag == "" {
		tag = r.Version
	}
	source := r.Source
	if source == "" {
		source = DefaultSource
	}
	return Image{
		Name:       r.Repo + ":" + tag,
		Files:      files,
		Entrypoint: []string{"/" + releaseBinDir + "/" + filepath.Base(r.Binaries[0])},
		Labels: map[string]string{
			"org.opencontainers.image.version":  r.Version,
			"org.opencontainers.image.source":   source,
			"org.opencontainers.image.licenses": license,
			"org.opencontainers.image.title":    filepath.Base(r.Binaries[0]),
		},
	}, nil
}
