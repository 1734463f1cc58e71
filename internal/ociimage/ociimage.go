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

// Image describes a single-layer image for linux/amd64.
type Image struct {
	// Name is the full reference containerd records, e.g. cgd.local/busybox:1.
	Name  string
	Files []File
	// LayerTar, if set, is the host path of an uncompressed tar used as
	// the layer as it is (a root filesystem mmdebstrap wrote), instead of
	// Files; giving both is an error.
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

// layer is the image's layer: LayerTar's content, or Files rendered.
func (img Image) layer() ([]byte, error) {
	if img.LayerTar == "" {
		return layerTar(img.Files)
	}
	if len(img.Files) > 0 {
		return nil, fmt.Errorf("layer: both LayerTar %s and %d Files given; give one", img.LayerTar, len(img.Files))
	}
	b, err := os.ReadFile(img.LayerTar)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return b, nil
}

// Digest is the sha256 digest of b, as a descriptor names it.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// WriteLayout writes img as an OCI image-layout tar to w, in the form that
// `ctr images import` accepts; the manifest carries the image name in the
// io.containerd.image.name annotation so no --base-name is needed.
func WriteLayout(w io.Writer, img Image) error {
	layer, err := img.layer()
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
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
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{Digest(layer)}},
	})
	if err != nil {
		return fmt.Errorf("image %s: config: %w", img.Name, err)
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaManifest,
		"config":        Descriptor{MediaType: MediaConfig, Digest: Digest(config), Size: int64(len(config))},
		"layers":        []Descriptor{{MediaType: MediaLayer, Digest: Digest(layer), Size: int64(len(layer))}},
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
	for _, b := range [][]byte{layer, config, manifest} {
		entries = append(entries, entry{"blobs/sha256/" + Digest(b)[len("sha256:"):], b})
	}
	entries = append(entries,
		entry{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		entry{"index.json", index},
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
