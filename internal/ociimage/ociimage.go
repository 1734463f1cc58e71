package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// File is one entry of an image layer.
type File struct {
	Name     string // path inside the image, without a leading slash
	Mode     int64  // permission bits
	Dir      bool
	Linkname string // symlink target, if a symlink
	Data     []byte
	HostPath string // regular file content from the host, if Data is nil
}

// Image describes a linux/amd64 image of one or two layers.
type Image struct {
	// Name is the full reference containerd records, e.g. cgd.local/busybox:1.
	Name string
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
	// Labels are the image config's labels (org.opencontainers.image.*).
	Labels map[string]string
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is a descriptor's platform.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Media types of the layout's blobs.
const (
	MediaIndex    = "application/vnd.oci.image.index.v1+json"
	MediaManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaConfig   = "application/vnd.oci.image.config.v1+json"
	MediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

var epoch = time.Unix(0, 0).UTC()

// layerTar renders the files as an uncompressed tar, deterministically.
func layerTar(files []File) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range sorted {
		hdr := &tar.Header{Name: f.Name, Mode: f.Mode, ModTime: epoch, Format: tar.FormatPAX}
		var data []byte
		switch {
		case f.Dir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case f.Linkname != "":
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = f.Linkname
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

// blobPath is where the layout holds b.
func blobPath(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(Digest(b), "sha256:") }

// Digest is the sha256 digest of b, as a descriptor names it.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// WriteLayout writes img as an OCI image-layout tar to w, in the form that
// `ctr images import` and `podman load` accept; the manifest carries the
// image name in the io.containerd.image.name annotation so no --base-name
// is needed. The tar also has the manifest.json of `docker save`, naming
// the same blobs, so that `docker load` of Docker before 25 (which reads
// no OCI layout) takes it too.
func WriteLayout(w io.Writer, img Image) error {
	layers, err := img.layers()
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	var diffIDs, layerPaths []string
	var layerDescs []Descriptor
	for _, l := range layers {
		diffIDs = append(diffIDs, Digest(l))
		layerPaths = append(layerPaths, blobPath(l))
		layerDescs = append(layerDescs, Descriptor{MediaType: MediaLayer, Digest: Digest(l), Size: int64(len(l))})
	}
	run := map[string]any{
		"Entrypoint": img.Entrypoint,
		"Cmd":        img.Cmd,
		"Env":        append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, img.Env...),
		"WorkingDir": "/",
	}
	if len(img.Labels) > 0 {
		run["Labels"] = img.Labels
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       run,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return fmt.Errorf("image %s: config: %w", img.Name, err)
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaManifest,
		"config":        Descriptor{MediaType: MediaConfig, Digest: Digest(config), Size: int64(len(config))},
		"layers":        layerDescs,
	})
	if err != nil {
		return fmt.Errorf("image %s: manifest: %w", img.Name, err)
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaIndex,
		"manifests": []Descriptor{{
			MediaType: MediaManifest, Digest: Digest(manifest), Size: int64(len(manifest)),
			Platform: &Platform{Architecture: "amd64", OS: "linux"},
			Annotations: map[string]string{
				"io.containerd.image.name":          img.Name,
				"org.opencontainers.image.ref.name": img.Name,
			},
		}},
	})
	if err != nil {
		return fmt.Errorf("image %s: index: %w", img.Name, err)
	}
	dockerManifest, err := json.Marshal([]map[string]any{{
		"Config": blobPath(config), "RepoTags": []string{img.Name}, "Layers": layerPaths,
	}})
	if err != nil {
		return fmt.Errorf("image %s: manifest.json: %w", img.Name, err)
	}

	tw := tar.NewWriter(w)
	add := func(name string, data []byte) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("image %s: %s: %w", img.Name, name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("image %s: %s: %w", img.Name, name, err)
		}
		return nil
	}
	type entry struct {
		name string
		data []byte
	}
	var entries []entry
	for _, b := range append(layers, config, manifest) {
		entries = append(entries, entry{blobPath(b), b})
	}
	entries = append(entries,
		entry{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		entry{"index.json", index},
		entry{"manifest.json", dockerManifest},
	)
	for _, e := range entries {
		if err := add(e.name, e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	return nil
}
