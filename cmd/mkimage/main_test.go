package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// readLayout reads an OCI layout tar into its files by name.
func readLayout(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = b
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	var bins []string
	for _, b := range []string{"cgdelegate", "cgdelegate-hook", "cgdelegate-init"} {
		p := filepath.Join(dir, b)
		if err := os.WriteFile(p, []byte("ELF "+b), 0o755); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, p)
	}
	out := filepath.Join(dir, "image.tar")
	if code := run(append([]string{"-o", out, "-version", "v1.2.3-4-gabc"}, bins...), io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	files := readLayout(t, bytes.NewReader(data))
	// blob returns a blob after checking its digest and size.
	blob := func(d ociimage.Descriptor, mediaType string) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		switch {
		case !ok:
			t.Fatalf("blob %s missing", d.Digest)
		case ociimage.Digest(b) != d.Digest:
			t.Fatalf("blob %s has digest %s", d.Digest, ociimage.Digest(b))
		case int64(len(b)) != d.Size:
			t.Fatalf("blob %s: size %d, descriptor says %d", d.Digest, len(b), d.Size)
		case d.MediaType != mediaType:
			t.Fatalf("blob %s: media type %s, want %s", d.Digest, d.MediaType, mediaType)
		}
		return b
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
	var index struct {
		MediaType string                `json:"mediaType"`
		Manifests []ociimage.Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if index.MediaType != ociimage.MediaIndex {
		t.Errorf("index media type %q", index.MediaType)
	}
	const ref = "ghcr.io/cgdelegate/cgdelegate:v1.2.3-4-gabc"
	if got := index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != ref {
		t.Errorf("ref.name = %q, want %q", got, ref)
	}
	var manifest struct {
		MediaType string                `json:"mediaType"`
		Config    ociimage.Descriptor   `json:"config"`
		Layers    []ociimage.Descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(index.Manifests[0], ociimage.MediaManifest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	if manifest.MediaType != ociimage.MediaManifest {
		t.Errorf("manifest media type %q", manifest.MediaType)
	}
	var config struct {
		OS     string `json:"os"`
		Config struct {
			Entrypoint []string          `json:"Entrypoint"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(manifest.Config, ociimage.MediaConfig), &config); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(config.Config.Entrypoint, []string{"/usr/local/bin/cgdelegate"}) {
		t.Errorf("entrypoint %q", config.Config.Entrypoint)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  "v1.2.3-4-gabc",
		"org.opencontainers.image.source":   ociimage.DefaultSource,
		"org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if got := config.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	layer := blob(manifest.Layers[0], ociimage.MediaLayer)
	if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Errorf("diff_ids %q do not name the layer %s", config.RootFS.DiffIDs, manifest.Layers[0].Digest)
	}
	got := readLayout(t, bytes.NewReader(layer))
	var names []string
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{
		"usr/", "usr/local/", "usr/local/bin/",
		"usr/local/bin/cgdelegate", "usr/local/bin/cgdelegate-hook", "usr/local/bin/cgdelegate-init",
	}
	if !slices.Equal(names, want) {
		t.Errorf("layer entries %q, want %q (binaries and nothing else)", names, want)
	}
	if string(got["usr/local/bin/cgdelegate-hook"]) != "ELF cgdelegate-hook" {
		t.Errorf("hook content %q", got["usr/local/bin/cgdelegate-hook"])
	}
}

// -tag names the image; the version label stays the version.
func TestWriteTag(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cgdelegate")
	if err := os.WriteFile(bin, []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := ociimage.Release{Repo: "r.example/x", Tag: "dev", Version: "v2", Binaries: []string{bin}}.Image()
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != "r.example/x:dev" || img.Labels["org.opencontainers.image.version"] != "v2" {
		t.Errorf("name %q, version label %q; want r.example/x:dev and v2", img.Name, img.Labels["org.opencontainers.image.version"])
	}
}

func TestWriteRefuses(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no output", []string{"-version", "v1", "x"}, "-o is required"},
		{"no version", []string{"-o", filepath.Join(dir, "a.tar"), "x"}, "-version is required"},
		{"no binaries", []string{"-o", filepath.Join(dir, "b.tar"), "-version", "v1"}, "no binaries"},
		{"missing binary", []string{"-o", filepath.Join(dir, "c.tar"), "-version", "v1", filepath.Join(dir, "absent")}, "absent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(tc.args, &stderr); code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.want)
			}
		})
	}
}

// skopeo, when installed, reads the archive as an OCI image, verifying
// every blob's digest as it copies it, and sees the labels.
func TestSkopeoAccepts(t *testing.T) {
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		t.Skip("skopeo not installed (apt-get install skopeo); the archive's structure is checked by TestWrite")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "cgdelegate")
	if err := os.WriteFile(bin, []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "image.tar")
	if code := run([]string{"-o", archive, "-version", "v9", bin}, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if out, err := exec.Command(skopeo, "copy", "oci-archive:"+archive, "dir:"+filepath.Join(dir, "copy")).CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, out)
	}
	out, err := exec.Command(skopeo, "inspect", "oci-archive:"+archive).Output()
	if err != nil {
		t.Fatalf("skopeo inspect: %v", err)
	}
	var info struct {
		Labels map[string]string
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	if got := info.Labels["org.opencontainers.image.version"]; got != "v9" {
		t.Errorf("skopeo sees version label %q, want v9", got)
	}
}
