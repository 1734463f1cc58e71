package vm

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

// layerFile is one entry of an image layer.
type layerFile struct {
	Name     string // path inside the image, without a leading slash
	Mode     int64  // permission bits
	Dir      bool
	Linkname string // symlink target, if a symlink
	Data     []byte
	HostPath string // regular file content from the host, if Data is nil
}

// ociImage describes a single-layer image for linux/amd64.
type ociImage struct {
	// Name is the full reference containerd records, e.g. cgd.local/busybox:1.
	Name  string
	Files []layerFile
	// Entrypoint and Cmd for the image config.
	Entrypoint, Cmd []string
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *ociPlatform      `json:"platform,omitempty"`
}

type ociPlatform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

var epoch = time.Unix(0, 0).UTC()

// layerTar renders the files as an uncompressed tar, deterministically.
func layerTar(files []layerFile) ([]byte, error) {
	sorted := append([]layerFile(nil), files...)
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

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// writeOCILayout writes img as an OCI image-layout tar to w, in the form that
// `ctr images import` accepts; the manifest carries the image name in the
// io.containerd.image.name annotation so no --base-name is needed.
func writeOCILayout(w io.Writer, img ociImage) error {
	layer, err := layerTar(img.Files)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": img.Entrypoint,
			"Cmd":        img.Cmd,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digestOf(layer)}},
	})
	if err != nil {
		return fmt.Errorf("image %s: config: %w", img.Name, err)
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        ociDescriptor{MediaType: mediaConfig, Digest: digestOf(config), Size: int64(len(config))},
		"layers":        []ociDescriptor{{MediaType: mediaLayer, Digest: digestOf(layer), Size: int64(len(layer))}},
	})
	if err != nil {
		return fmt.Errorf("image %s: manifest: %w", img.Name, err)
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaIndex,
		"manifests": []ociDescriptor{{
			MediaType: mediaManifest, Digest: digestOf(manifest), Size: int64(len(manifest)),
			Platform: &ociPlatform{Architecture: "amd64", OS: "linux"},
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
		entries = append(entries, entry{"blobs/sha256/" + digestOf(b)[len("sha256:"):], b})
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
