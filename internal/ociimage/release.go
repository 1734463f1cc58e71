package ociimage

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Defaults of the release image's reference and labels (`make image`).
const (
	DefaultRepo   = "ghcr.io/cgdelegate/cgdelegate"
	DefaultSource = "https://github.com/cgdelegate/cgdelegate"
	license       = "Apache-2.0"
	releaseBinDir = "usr/local/bin"
)

// Errors of a release's description, each wrapped with the field and the
// value.
var (
	ErrVersion = errors.New("not a release version")
	ErrRelease = errors.New("release image")
)

// machines are the ELF machine of each architecture an image can be made
// for: a binary must be built for the image's architecture.
var machines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// releaseVersion is semver 2.0.0 with a leading v: vMAJOR.MINOR.PATCH,
// an optional -pre-release and +build.
var releaseVersion = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
	`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

// CheckVersion accepts a release version: semver with a leading v
// (v1.2.3, v1.2.3-rc.1); the image tag is the version and the chart's
// version is the version without its v.
func CheckVersion(v string) error {
	if !releaseVersion.MatchString(v) {
		return fmt.Errorf("%w: VERSION %q: want vMAJOR.MINOR.PATCH (semver with a leading v), e.g. v0.2.0 or v0.2.0-rc.1", ErrVersion, v)
	}
	return nil
}

// Release is what the release image is made of: cmd/mkimage (`make
// image`, `make release`) and the VM suite (integration/vm) describe it
// with the same type.
type Release struct {
	// Repo is the image repository; the reference is Repo:Tag.
	Repo string
	// Tag defaults to Version.
	Tag string
	// Version is the org.opencontainers.image.version label (git
	// describe, or the release version).
	Version string
	// Source is the org.opencontainers.image.source label.
	Source string
	// Binaries are host paths by architecture (GOARCH: amd64, arm64),
	// each put under /usr/local/bin; the first is the entrypoint. Every
	// architecture has the same file names in the same order, and each
	// binary is an ELF executable for its architecture.
	Binaries map[string][]string
}

// Name is the image's reference, Repo:Tag.
func (r Release) Name() string {
	tag := r.Tag
	if tag == "" {
		tag = r.Version
	}
	return r.Repo + ":" + tag
}

// Arches are the release's architectures, sorted.
func (r Release) Arches() []string {
	arches := make([]string, 0, len(r.Binaries))
	for a := range r.Binaries {
		arches = append(arches, a)
	}
	slices.Sort(arches)
	return arches
}

// Validate names every missing or inconsistent field.
func (r Release) Validate() error {
	var errs []error
	if r.Version == "" {
		errs = append(errs, fmt.Errorf("%w: -version is required", ErrRelease))
	}
	if r.Repo == "" {
		errs = append(errs, fmt.Errorf("%w: -repo must not be empty", ErrRelease))
	}
	if len(r.Binaries) == 0 {
		errs = append(errs, fmt.Errorf("%w: no binaries given", ErrRelease))
	}
	var first []string
	for i, arch := range r.Arches() {
		if _, ok := machines[arch]; !ok {
			errs = append(errs, fmt.Errorf("%w: architecture %q: want one of %q", ErrRelease, arch, sortedArches()))
		}
		names := baseNames(r.Binaries[arch])
		if len(names) == 0 {
			errs = append(errs, fmt.Errorf("%w: architecture %s: no binaries given", ErrRelease, arch))
		}
		if i == 0 {
			first = names
		} else if !slices.Equal(names, first) {
			errs = append(errs, fmt.Errorf("%w: architecture %s has binaries %q, %s has %q: want the same on every architecture",
				ErrRelease, arch, names, r.Arches()[0], first))
		}
	}
	return errors.Join(errs...)
}

func sortedArches() []string {
	arches := make([]string, 0, len(machines))
	for a := range machines {
		arches = append(arches, a)
	}
	slices.Sort(arches)
	return arches
}

func baseNames(paths []string) []string {
	names := make([]string, 0, len(paths))
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	return names
}

// checkMachine refuses a binary that is not an ELF executable for arch:
// an image for one architecture with another's binaries fails at start
// with "exec format error".
func checkMachine(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%w: binary %s for %s: %w", ErrRelease, path, arch, err)
	}
	defer f.Close()
	if want := machines[arch]; f.Machine != want {
		return fmt.Errorf("%w: binary %s is built for %s, the %s image needs %s", ErrRelease, path, f.Machine, arch, want)
	}
	return nil
}

// Image describes the release image of one architecture: scratch-style,
// one gzip-compressed layer with every binary under /usr/local/bin and
// nothing else, the first as the entrypoint.
func (r Release) Image(arch string) (Image, error) {
	if err := r.Validate(); err != nil {
		return Image{}, err
	}
	bins, ok := r.Binaries[arch]
	if !ok {
		return Image{}, fmt.Errorf("%w: no binaries for architecture %q", ErrRelease, arch)
	}
	files := []File{
		{Name: "usr", Mode: 0o755, Dir: true},
		{Name: "usr/local", Mode: 0o755, Dir: true},
		{Name: releaseBinDir, Mode: 0o755, Dir: true},
	}
	for _, b := range bins {
		if err := checkMachine(b, arch); err != nil {
			return Image{}, err
		}
		files = append(files, File{Name: releaseBinDir + "/" + filepath.Base(b), Mode: 0o755, HostPath: b})
	}
	source := r.Source
	if source == "" {
		source = DefaultSource
	}
	return Image{
		Name:       r.Name(),
		Arch:       arch,
		Gzip:       true,
		Files:      files,
		Entrypoint: []string{"/" + releaseBinDir + "/" + filepath.Base(bins[0])},
		Labels: map[string]string{
			"org.opencontainers.image.version":  r.Version,
			"org.opencontainers.image.source":   source,
			"org.opencontainers.image.licenses": license,
			"org.opencontainers.image.title":    filepath.Base(bins[0]),
		},
	}, nil
}

// Write writes the release as an OCI layout archive named Name(). With
// one architecture it is that image itself, as WriteLayout writes it (for
// `ctr images import`, `podman load`, `docker load`); with several it is
// an OCI image index of one image per architecture, each manifest
// descriptor with its platform (for `ctr images import` and PushArchive).
func (r Release) Write(w io.Writer) error {
	if err := r.Validate(); err != nil {
		return err
	}
	arches := r.Arches()
	if len(arches) == 1 {
		img, err := r.Image(arches[0])
		if err != nil {
			return err
		}
		return WriteLayout(w, img)
	}
	idx, err := r.index()
	if err != nil {
		return err
	}
	if err := writeArchive(w, r.Name(), idx); err != nil {
		return fmt.Errorf("image %s: %w", r.Name(), err)
	}
	return nil
}

// index is the image index of every architecture's image, in Arches order.
func (r Release) index() (v1.ImageIndex, error) {
	adds := make([]mutate.IndexAddendum, 0, len(r.Binaries))
	for _, arch := range r.Arches() {
		desc, err := r.Image(arch)
		if err != nil {
			return nil, err
		}
		img, err := desc.build()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return mutate.AppendManifests(empty.Index, adds...), nil
}
