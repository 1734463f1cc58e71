package ociimage

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations of the archive's index.json entry: the name containerd
// gives the image at import, and the OCI reference name podman reads.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// ErrArchive is wrapped by every problem with the content of an archive
// being read (not its I/O): a path outside it, no or several images.
var ErrArchive = errors.New("OCI layout archive")

// writeArchive lays out one image or index, named name, with
// go-containerregistry's layout in a temporary directory and writes that
// directory to w as a tar, entries sorted and dated at the epoch. A single
// image also gets the manifest.json of `docker save`.
func writeArchive(w io.Writer, name string, content any) error {
	dir, err := os.MkdirTemp("", "cgd-oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	named := layout.WithAnnotations(map[string]string{annotationContainerdName: name, annotationRefName: name})
	var extra map[string][]byte
	switch c := content.(type) {
	case v1.Image:
		cf, err := c.ConfigFile()
		if err != nil {
			return err
		}
		if err := p.AppendImage(c, named, layout.WithPlatform(v1.Platform{OS: cf.OS, Architecture: cf.Architecture})); err != nil {
			return err
		}
		dm, err := dockerManifest(name, c)
		if err != nil {
			return err
		}
		extra = map[string][]byte{"manifest.json": dm}
	case v1.ImageIndex:
		if err := p.AppendIndex(c, named); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: cannot write a %T", ErrArchive, content)
	}
	return tarDir(w, dir, extra)
}

// blobPath is where a layout holds the blob of digest h.
func blobPath(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }

// dockerManifest is the manifest.json of `docker save` for img: its
// config and layers by their paths in the layout.
func dockerManifest(name string, img v1.Image) ([]byte, error) {
	cfg, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	layers := make([]string, 0, len(m.Layers))
	for _, l := range m.Layers {
		layers = append(layers, blobPath(l.Digest))
	}
	return json.Marshal([]struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: blobPath(cfg), RepoTags: []string{name}, Layers: layers}})
}

// tarDir writes the regular files under dir to w as a tar, in lexical
// order, then the extra files; every entry is 0644 and dated at the epoch.
func tarDir(w io.Writer, dir string, extra map[string][]byte) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: info.Size(), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	for _, name := range sortedKeys(extra) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(extra[name])), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(extra[name]); err != nil {
			return err
		}
	}
	return tw.Close()
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// extract unpacks the archive r into dir, refusing entries that would
// land outside it; only regular files and directories are taken.
func extract(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(hdr.Name)
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%w: entry %q is outside the archive", ErrArchive, hdr.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := writeFrom(dst, tr); err != nil {
				return err
			}
		}
	}
}

// writeFrom writes r to a new file at p.
func writeFrom(p string, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, werr := io.Copy(f, r)
	return errors.Join(werr, f.Close())
}

// Archived is the one image or image index an archive holds, with its
// name (the io.containerd.image.name annotation); exactly one of Image
// and Index is set.
type Archived struct {
	Name  string
	Image v1.Image
	Index v1.ImageIndex
}

// Digest is the digest of the archived image or index.
func (a Archived) Digest() (v1.Hash, error) {
	if a.Index != nil {
		return a.Index.Digest()
	}
	return a.Image.Digest()
}

// ReadArchive reads an archive WriteLayout or Release.Write wrote (any OCI
// layout tar whose index.json names one image or index). It unpacks the
// archive into a directory under tmp (os.TempDir() when empty); the
// returned cleanup removes it, and the Archived is usable until then.
func ReadArchive(r io.Reader, tmp string) (Archived, func(), error) {
	dir, err := os.MkdirTemp(tmp, "cgd-oci-read-")
	if err != nil {
		return Archived{}, func() {}, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	a, err := readLayout(r, dir)
	if err != nil {
		cleanup()
		return Archived{}, func() {}, err
	}
	return a, cleanup, nil
}

func readLayout(r io.Reader, dir string) (Archived, error) {
	if err := extract(r, dir); err != nil {
		return Archived{}, err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return Archived{}, fmt.Errorf("%w: %w", ErrArchive, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return Archived{}, fmt.Errorf("%w: %w", ErrArchive, err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		return Archived{}, fmt.Errorf("%w: index.json: %w", ErrArchive, err)
	}
	if len(im.Manifests) != 1 {
		return Archived{}, fmt.Errorf("%w: index.json names %d images, want 1", ErrArchive, len(im.Manifests))
	}
	d := im.Manifests[0]
	a := Archived{Name: d.Annotations[annotationContainerdName]}
	switch {
	case d.MediaType.IsIndex():
		a.Index, err = top.ImageIndex(d.Digest)
	case d.MediaType.IsImage():
		a.Image, err = top.Image(d.Digest)
	default:
		return Archived{}, fmt.Errorf("%w: index.json names a %s, want an image or an image index", ErrArchive, d.MediaType)
	}
	if err != nil {
		return Archived{}, fmt.Errorf("%w: %w", ErrArchive, err)
	}
	return a, nil
}
