package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of an image layer.
type File struct {
	Name     string // path inside the image, without a leading slash
	Mode     int64  // permission bits
	Dir      bool
	Linkname string // symlink target, if a symlink
	// Hardlink is the path (in the same layer) this entry is a hard link
	// to; hard links come after every other entry, so that their targets
	// exist when they are extracted, and carry their target's mode
	// (extractors such as containerd's chmod the shared inode to the
	// link's mode). Mode is ignored.
	Hardlink string
	Data     []byte
	HostPath string // regular file content from the host, if Data is nil
}

// Image describes a Linux image of one or two layers.
type Image struct {
	// Name is the full reference containerd records, e.g. cgd.local/busybox:1.
	Name string
	// Arch is the GOARCH the image runs on (the config's architecture);
	// empty means amd64.
	Arch string
	// Files are rendered as a layer: the only one, or the one above
	// LayerTar.
	Files []File
	// LayerTar, if set, is the host path of an uncompressed tar used as
	// the bottom layer as it is (a root filesystem mmdebstrap wrote);
	// Files, if any, are a second layer above it.
	LayerTar string
	// Env is the image config's environment, after PATH.
	Env []string
	// Entrypoint and Cmd for the image config.
	Entrypoint, Cmd []string
	// User is the image config's user (uid, name, uid:gid or name:gid);
	// empty runs as root.
	User string
	// Labels are the image config's labels (org.opencontainers.image.*).
	Labels map[string]string
	// Gzip stores the layers gzip-compressed (a third of the size to pull
	// from a registry), as the release image does; the VM's images stay
	// uncompressed (no compression time for a root filesystem).
	Gzip bool
}

// epoch is every timestamp of an image: the same input gives the same
// digests.
var epoch = time.Unix(0, 0).UTC()

// defaultPath is the PATH of every image's environment.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// arch is the image's architecture, amd64 when unset.
func (img Image) arch() string {
	if img.Arch == "" {
		return "amd64"
	}
	return img.Arch
}

// layerTar renders the files as an uncompressed tar, deterministically.
func layerTar(files []File) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if hi, hj := sorted[i].Hardlink != "", sorted[j].Hardlink != ""; hi != hj {
			return hj
		}
		return sorted[i].Name < sorted[j].Name
	})
	modes := map[string]int64{}
	for _, f := range sorted {
		if f.Hardlink == "" && !f.Dir && f.Linkname == "" {
			modes[f.Name] = f.Mode
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range sorted {
		hdr := &tar.Header{Name: f.Name, Mode: f.Mode, ModTime: epoch, Format: tar.FormatPAX}
		if f.Hardlink != "" {
			m, ok := modes[f.Hardlink]
			if !ok {
				return nil, fmt.Errorf("layer %s: hard link to %s, which is not a regular file of the layer", f.Name, f.Hardlink)
			}
			hdr.Mode = m
		}
		var data []byte
		switch {
		case f.Dir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case f.Linkname != "":
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = f.Linkname
		case f.Hardlink != "":
			hdr.Typeflag = tar.TypeLink
			hdr.Linkname = f.Hardlink
		default:
			hdr.Typeflag = tar.TypeReg
			data = f.Data
			if data == nil && f.HostPath != "" {
				b, err := os.ReadFile(f.HostPath)
				if err != nil {
					return nil, fmt.Errorf("layer %s: %w", f.Name, err)
				}
				data = b
			}
			hdr.Size = int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer %s: %w", f.Name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("layer %s: %w", f.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// layers are the image's layers, bottom first: LayerTar's content, then
// Files rendered (always when there is no LayerTar).
func (img Image) layers() ([][]byte, error) {
	var layers [][]byte
	if img.LayerTar != "" {
		b, err := os.ReadFile(img.LayerTar)
		if err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
		layers = append(layers, b)
	}
	if img.LayerTar == "" || len(img.Files) > 0 {
		b, err := layerTar(img.Files)
		if err != nil {
			return nil, err
		}
		layers = append(layers, b)
	}
	return layers, nil
}

// build makes the OCI image: its config (linux/Arch, the run settings,
// every timestamp at the epoch) and its uncompressed layers.
func (img Image) build() (v1.Image, error) {
	layers, err := img.layers()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Name, err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	base, err = mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: img.arch(),
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		Config: v1.Config{
			Entrypoint: img.Entrypoint,
			Cmd:        img.Cmd,
			User:       img.User,
			Env:        append([]string{defaultPath}, img.Env...),
			WorkingDir: "/",
			Labels:     img.Labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", img.Name, err)
	}
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		layer := static.NewLayer(l, types.OCIUncompressedLayer)
		if img.Gzip {
			layer, err = tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(l)), nil },
				tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", img.Name, err)
			}
		}
		adds = append(adds, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "cgdelegate ociimage"},
		})
	}
	out, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Name, err)
	}
	return out, nil
}

// WriteLayout writes img as an OCI image-layout tar to w, in the form that
// `ctr images import` and `podman load` accept: index.json names the
// image's manifest, with the image name in the io.containerd.image.name
// annotation so no --base-name is needed. The tar also has the
// manifest.json of `docker save`, naming the same blobs, so that `docker
// load` of Docker before 25 (which reads no OCI layout) takes it too.
func WriteLayout(w io.Writer, img Image) error {
	built, err := img.build()
	if err != nil {
		return err
	}
	if err := writeArchive(w, img.Name, built); err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	return nil
}
