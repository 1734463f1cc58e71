package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
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

// OCI media types, as the tests expect them (not the library's constants).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

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

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fakeELF is an ELF header for machine m followed by payload: enough for
// debug/elf, and a different file for each payload.
func fakeELF(t *testing.T, m elf.Machine, payload string) []byte {
	t.Helper()
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT), Ehsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	buf.WriteString(payload)
	return buf.Bytes()
}

// fakeBinaries writes the three binaries for machine m into dir.
func fakeBinaries(t *testing.T, dir string, m elf.Machine) []string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var bins []string
	for _, b := range []string{"cgdelegate", "cgdelegate-hook", "cgdelegate-init"} {
		p := filepath.Join(dir, b)
		if err := os.WriteFile(p, fakeELF(t, m, b), 0o755); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, p)
	}
	return bins
}

// gunzip is the content of a gzip stream.
func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mkimage runs the command with args and returns its exit code and
// standard error.
func mkimage(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	code := run(context.Background(), args, io.Discard, &stderr)
	return code, stderr.String()
}

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
	bins := fakeBinaries(t, dir, elf.EM_X86_64)
	out := filepath.Join(dir, "image.tar")
	if code, stderr := mkimage(t, append([]string{"-o", out, "-arch", "amd64", "-version", "v1.2.3-4-gabc"}, bins...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	files := readLayout(t, bytes.NewReader(data))
	// blob returns a blob after checking its digest and size.
	blob := func(d descriptor, mediaType string) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		switch {
		case !ok:
			t.Fatalf("blob %s missing", d.Digest)
		case digest(b) != d.Digest:
			t.Fatalf("blob %s has digest %s", d.Digest, digest(b))
		case int64(len(b)) != d.Size:
			t.Fatalf("blob %s: size %d, descriptor says %d", d.Digest, len(b), d.Size)
		case d.MediaType != mediaType:
			t.Fatalf("blob %s: media type %s, want %s", d.Digest, d.MediaType, mediaType)
		}
		return b
	}
	var ociLayout struct{ ImageLayoutVersion string }
	if err := json.Unmarshal(files["oci-layout"], &ociLayout); err != nil || ociLayout.ImageLayoutVersion != "1.0.0" {
		t.Errorf("oci-layout = %q (%v)", files["oci-layout"], err)
	}
	var index struct {
		MediaType string       `json:"mediaType"`
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if index.MediaType != mediaIndex {
		t.Errorf("index media type %q", index.MediaType)
	}
	const ref = "ghcr.io/cgdelegate/cgdelegate:v1.2.3-4-gabc"
	if got := index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != ref {
		t.Errorf("ref.name = %q, want %q", got, ref)
	}
	var manifest struct {
		MediaType string       `json:"mediaType"`
		Config    descriptor   `json:"config"`
		Layers    []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(index.Manifests[0], mediaManifest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	if manifest.MediaType != mediaManifest {
		t.Errorf("manifest media type %q", manifest.MediaType)
	}
	var config struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Config       struct {
			Entrypoint []string          `json:"Entrypoint"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(manifest.Config, mediaConfig), &config); err != nil {
		t.Fatal(err)
	}
	if config.OS != "linux" || config.Architecture != "amd64" {
		t.Errorf("config platform %s/%s, want linux/amd64", config.OS, config.Architecture)
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
	layer := gunzip(t, blob(manifest.Layers[0], mediaLayer))
	if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != digest(layer) {
		t.Errorf("diff_ids %q do not name the uncompressed layer %s", config.RootFS.DiffIDs, digest(layer))
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
	if want := fakeELF(t, elf.EM_X86_64, "cgdelegate-hook"); !bytes.Equal(got["usr/local/bin/cgdelegate-hook"], want) {
		t.Errorf("hook content %q", got["usr/local/bin/cgdelegate-hook"])
	}
}

// -tag names the image; the version label stays the version.
func TestWriteTag(t *testing.T) {
	bins := fakeBinaries(t, t.TempDir(), elf.EM_X86_64)
	img, err := ociimage.Release{Repo: "r.example/x", Tag: "dev", Version: "v2", Binaries: map[string][]string{"amd64": bins}}.Image("amd64")
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != "r.example/x:dev" || img.Labels["org.opencontainers.image.version"] != "v2" {
		t.Errorf("name %q, version label %q; want r.example/x:dev and v2", img.Name, img.Labels["org.opencontainers.image.version"])
	}
}

func TestWriteRefuses(t *testing.T) {
	dir := t.TempDir()
	amd64 := fakeBinaries(t, filepath.Join(dir, "amd64"), elf.EM_X86_64)
	arm64 := fakeBinaries(t, filepath.Join(dir, "arm64"), elf.EM_AARCH64)
	text := filepath.Join(dir, "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no output", []string{"-version", "v1", "x"}, "-o is required"},
		{"no version", []string{"-o", filepath.Join(dir, "a.tar"), "x"}, "-version is required"},
		{"no binaries", []string{"-o", filepath.Join(dir, "b.tar"), "-version", "v1"}, "no binaries"},
		{"missing binary", []string{"-o", filepath.Join(dir, "c.tar"), "-version", "v1", filepath.Join(dir, "absent")}, "absent"},
		{
			"arm64 binary in the amd64 image",
			[]string{"-o", filepath.Join(dir, "d.tar"), "-version", "v1", "amd64=" + arm64[0]},
			"arm64/cgdelegate is built for EM_AARCH64, the amd64 image needs EM_X86_64",
		},
		{
			"amd64 binary in the arm64 image",
			[]string{"-o", filepath.Join(dir, "e.tar"), "-version", "v1", "-arch", "arm64", amd64[0]},
			"amd64/cgdelegate is built for EM_X86_64, the arm64 image needs EM_AARCH64",
		},
		{"not an ELF binary", []string{"-o", filepath.Join(dir, "f.tar"), "-version", "v1", "-arch", "amd64", text}, "binary " + text + " for amd64"},
		{"unknown architecture", []string{"-o", filepath.Join(dir, "g.tar"), "-version", "v1", "mips=" + amd64[0]}, `architecture "mips"`},
		{
			"different binaries per architecture",
			[]string{"-o", filepath.Join(dir, "h.tar"), "-version", "v1", "amd64=" + amd64[0], "arm64=" + arm64[1]},
			`architecture arm64 has binaries ["cgdelegate-hook"], amd64 has ["cgdelegate"]`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := mkimage(t, tc.args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1: %s", code, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not say %q", stderr, tc.want)
			}
			if entries, _ := filepath.Glob(filepath.Join(dir, "*.tar")); len(entries) > 0 {
				t.Errorf("a refused image left %q", entries)
			}
			if entries, _ := filepath.Glob(filepath.Join(dir, ".mkimage-*")); len(entries) > 0 {
				t.Errorf("a refused image left %q", entries)
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
	bin := fakeBinaries(t, dir, elf.EM_X86_64)[0]
	archive := filepath.Join(dir, "image.tar")
	if code, stderr := mkimage(t, "-o", archive, "-arch", "amd64", "-version", "v9", bin); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
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
