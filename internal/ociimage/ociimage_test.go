package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// digest is the sha256 digest of b as a descriptor names it, computed
// here rather than by the library that wrote the layout.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// descriptor is an OCI content descriptor as the tests read it.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
	} `json:"platform,omitempty"`
}

func TestWriteOCILayout(t *testing.T) {
	var buf bytes.Buffer
	img := Image{
		Name: "cgd.local/test:1",
		Files: []File{
			{Name: "bin", Mode: 0o755, Dir: true},
			{Name: "bin/sh", Linkname: "busybox"},
			{Name: "bin/busybox", Mode: 0o755, Data: []byte("ELF")},
		},
		Cmd:  []string{"sh"},
		User: "www-data:1004",
	}
	if err := WriteLayout(&buf, img); err != nil {
		t.Fatal(err)
	}
	files := tarFiles(t, buf.Bytes())
	blob := func(d string) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")]
		if !ok {
			t.Fatalf("blob %s missing", d)
		}
		if digest(b) != d {
			t.Fatalf("blob %s has digest %s", d, digest(b))
		}
		return b
	}
	var ociLayout struct{ ImageLayoutVersion string }
	if err := json.Unmarshal(files["oci-layout"], &ociLayout); err != nil || ociLayout.ImageLayoutVersion != "1.0.0" {
		t.Errorf("oci-layout = %q (%v)", files["oci-layout"], err)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != img.Name {
		t.Errorf("image name annotation = %q", got)
	}
	if p := index.Manifests[0].Platform; p == nil || p.Architecture != "amd64" || p.OS != "linux" {
		t.Errorf("index.json platform %+v, want linux/amd64", p)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var config struct {
		Architecture string `json:"architecture"`
		Config       struct {
			User string `json:"User"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	if config.Architecture != "amd64" || len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Errorf("config %+v does not match layer %s", config, manifest.Layers[0].Digest)
	}
	if config.Config.User != img.User {
		t.Errorf("config user = %q, want %q", config.Config.User, img.User)
	}
	layer := tar.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest)))
	var names []string
	for {
		hdr, err := layer.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	if got := strings.Join(names, " "); got != "bin/ bin/busybox bin/sh" {
		t.Errorf("layer entries = %q", got)
	}
	// docker load (before Docker 25) reads manifest.json, not the layout.
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil || len(docker) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	if d := docker[0]; d.Config != "blobs/sha256/"+strings.TrimPrefix(manifest.Config.Digest, "sha256:") ||
		len(d.RepoTags) != 1 || d.RepoTags[0] != img.Name ||
		len(d.Layers) != 1 || d.Layers[0] != "blobs/sha256/"+strings.TrimPrefix(manifest.Layers[0].Digest, "sha256:") {
		t.Errorf("manifest.json %s does not name the config %s and the layer %s", files["manifest.json"], manifest.Config.Digest, manifest.Layers[0].Digest)
	}
}

// tarFiles returns the regular files of a tar by name.
func tarFiles(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = data
	}
}

// layoutLayers reads a layout tar and returns the diff IDs of its config
// and the entry names of each layer, bottom first, checking that the
// manifest, the config and manifest.json agree.
func layoutLayers(t *testing.T, layout []byte) [][]string {
	t.Helper()
	files := tarFiles(t, layout)
	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(index.Manifests[0].Digest, "sha256:")], &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(manifest.Config.Digest, "sha256:")], &config); err != nil {
		t.Fatal(err)
	}
	var docker []struct{ Layers []string }
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil || len(docker) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	if len(config.RootFS.DiffIDs) != len(manifest.Layers) || len(docker[0].Layers) != len(manifest.Layers) {
		t.Fatalf("%d diff IDs and %d manifest.json layers for %d layers", len(config.RootFS.DiffIDs), len(docker[0].Layers), len(manifest.Layers))
	}
	var layers [][]string
	for i, l := range manifest.Layers {
		path := "blobs/sha256/" + strings.TrimPrefix(l.Digest, "sha256:")
		if config.RootFS.DiffIDs[i] != l.Digest || docker[0].Layers[i] != path {
			t.Errorf("layer %d: manifest %s, config %s, manifest.json %s", i, l.Digest, config.RootFS.DiffIDs[i], docker[0].Layers[i])
		}
		b, ok := files[path]
		if !ok || digest(b) != l.Digest {
			t.Fatalf("layer %d: blob %s missing or wrong", i, l.Digest)
		}
		var names []string
		lr := tar.NewReader(bytes.NewReader(b))
		for {
			hdr, err := lr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, hdr.Name)
		}
		layers = append(layers, names)
	}
	return layers
}

func TestLayerTar(t *testing.T) {
	var src bytes.Buffer
	tw := tar.NewWriter(&src)
	if err := tw.WriteHeader(&tar.Header{Name: "./sbin/init", Mode: 0o755, Size: 3, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("ELF")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/rootfs.tar"
	if err := os.WriteFile(path, src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		img        Image
		wantLayers string
		wantErr    string
	}{
		{"as it is", Image{Name: "cgd.local/systemd:1", LayerTar: path, Env: []string{"container=containerd"}}, "[./sbin/init]", ""},
		{
			"files above it",
			Image{Name: "cgd.local/engines:1", LayerTar: path, Env: []string{"container=containerd"}, Files: []File{{Name: "usr/local/bin/x", Data: []byte("x")}}},
			"[./sbin/init] [usr/local/bin/x]", "",
		},
		{"missing", Image{Name: "x:1", LayerTar: path + ".missing"}, "", "rootfs.tar.missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := WriteLayout(&out, tc.img)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("WriteLayout = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(out.Bytes(), src.Bytes()) || !bytes.Contains(out.Bytes(), []byte(digest(src.Bytes())[len("sha256:"):])) {
				t.Error("the layout does not hold the tar as its layer blob")
			}
			if !bytes.Contains(out.Bytes(), []byte(`"container=containerd"`)) {
				t.Error("the config lacks Env")
			}
			var got []string
			for _, l := range layoutLayers(t, out.Bytes()) {
				got = append(got, fmt.Sprint(l))
			}
			if strings.Join(got, " ") != tc.wantLayers {
				t.Errorf("layers %q, want %q", got, tc.wantLayers)
			}
		})
	}
}

// TestHardlinks: a hard link comes after its target whatever the names,
// as a tar extractor needs (bin/ash sorts before bin/busybox).
func TestHardlinks(t *testing.T) {
	b, err := layerTar([]File{
		{Name: "bin/ash", Hardlink: "bin/busybox"},
		{Name: "bin/busybox", Mode: 0o755, Data: []byte("ELF")},
		{Name: "bin", Mode: 0o755, Dir: true},
		{Name: "bin/zcat", Hardlink: "bin/busybox"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := tar.NewReader(bytes.NewReader(b))
	var got []string
	for {
		hdr, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		e := hdr.Name
		if hdr.Typeflag == tar.TypeLink {
			e += "=>" + hdr.Linkname
			if hdr.Mode != 0o755 {
				t.Errorf("hard link %s has mode %o, want its target's 755", hdr.Name, hdr.Mode)
			}
		}
		got = append(got, e)
	}
	if want := "bin/ bin/busybox bin/ash=>bin/busybox bin/zcat=>bin/busybox"; strings.Join(got, " ") != want {
		t.Fatalf("entries %q, want %q", strings.Join(got, " "), want)
	}
	if _, err := layerTar([]File{{Name: "bin/sh", Hardlink: "bin/busybox"}}); err == nil {
		t.Error("a hard link to a file the layer lacks was written")
	}
}
