package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

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

var releaseBins = []string{"cgdelegate", "cgdelegate-hook", "cgdelegate-init"}

// fakeRelease is a release of the three binaries, faked for each
// architecture of arches, under dir.
func fakeRelease(t *testing.T, dir string, arches ...string) Release {
	t.Helper()
	r := Release{Repo: "r.example/cgdelegate", Version: "v1.2.3", Binaries: map[string][]string{}}
	for _, arch := range arches {
		d := filepath.Join(dir, "linux-"+arch)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range releaseBins {
			p := filepath.Join(d, b)
			if err := os.WriteFile(p, fakeELF(t, machines[arch], arch+" "+b), 0o755); err != nil {
				t.Fatal(err)
			}
			r.Binaries[arch] = append(r.Binaries[arch], p)
		}
	}
	return r
}

// layout is an archive read with nothing but the standard library: blobs
// are checked against their digests and sizes as they are read.
type testLayout struct {
	t     *testing.T
	files map[string][]byte
}

func (l testLayout) blob(d descriptor, mediaType string) []byte {
	l.t.Helper()
	b, ok := l.files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	switch {
	case !ok:
		l.t.Fatalf("blob %s missing", d.Digest)
	case digest(b) != d.Digest || int64(len(b)) != d.Size:
		l.t.Fatalf("blob %s: digest %s, size %d (descriptor %d)", d.Digest, digest(b), len(b), d.Size)
	case d.MediaType != mediaType:
		l.t.Fatalf("blob %s: media type %s, want %s", d.Digest, d.MediaType, mediaType)
	}
	return b
}

func TestReleaseIndex(t *testing.T) {
	dir := t.TempDir()
	r := fakeRelease(t, dir, "arm64", "amd64")
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	l := testLayout{t, tarFiles(t, out.Bytes())}
	if _, ok := l.files["manifest.json"]; ok {
		t.Error("an index archive has docker save's manifest.json, which can name one platform only")
	}
	var top struct{ Manifests []descriptor }
	if err := json.Unmarshal(l.files["index.json"], &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, l.files["index.json"])
	}
	if got := top.Manifests[0].Annotations["io.containerd.image.name"]; got != "r.example/cgdelegate:v1.2.3" {
		t.Errorf("image name annotation %q", got)
	}
	var index struct {
		MediaType string
		Manifests []descriptor
	}
	if err := json.Unmarshal(l.blob(top.Manifests[0], "application/vnd.oci.image.index.v1+json"), &index); err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range index.Manifests {
		if m.Platform == nil {
			t.Fatalf("manifest %s has no platform", m.Digest)
		}
		arch := m.Platform.Architecture
		platforms = append(platforms, m.Platform.OS+"/"+arch)
		t.Run(arch, func(t *testing.T) {
			var manifest struct {
				Config descriptor
				Layers []descriptor
			}
			if err := json.Unmarshal(l.blob(m, "application/vnd.oci.image.manifest.v1+json"), &manifest); err != nil || len(manifest.Layers) != 1 {
				t.Fatalf("manifest: %v, %d layers", err, len(manifest.Layers))
			}
			var config struct {
				Architecture, OS string
				Config           struct{ Labels map[string]string }
				RootFS           struct {
					DiffIDs []string `json:"diff_ids"`
				} `json:"rootfs"`
			}
			if err := json.Unmarshal(l.blob(manifest.Config, "application/vnd.oci.image.config.v1+json"), &config); err != nil {
				t.Fatal(err)
			}
			if config.OS != "linux" || config.Architecture != arch {
				t.Errorf("config says %s/%s, the index linux/%s", config.OS, config.Architecture, arch)
			}
			if v := config.Config.Labels["org.opencontainers.image.version"]; v != "v1.2.3" {
				t.Errorf("version label %q", v)
			}
			zr, err := gzip.NewReader(bytes.NewReader(l.blob(manifest.Layers[0], "application/vnd.oci.image.layer.v1.tar+gzip")))
			if err != nil {
				t.Fatal(err)
			}
			uncompressed, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != digest(uncompressed) {
				t.Errorf("diff_ids %q do not name the uncompressed layer %s", config.RootFS.DiffIDs, digest(uncompressed))
			}
			layer := tarFiles(t, uncompressed)
			for _, b := range releaseBins {
				data, ok := layer["usr/local/bin/"+b]
				if !ok {
					t.Fatalf("layer lacks usr/local/bin/%s", b)
				}
				f, err := elf.NewFile(bytes.NewReader(data))
				if err != nil {
					t.Fatalf("%s: %v", b, err)
				}
				if f.Machine != machines[arch] {
					t.Errorf("%s in the %s image is built for %s", b, arch, f.Machine)
				}
			}
		})
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("index platforms %q, want linux/amd64 and linux/arm64", platforms)
	}

	// The same input gives the same archive, byte for byte.
	var again bytes.Buffer
	if err := r.Write(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Error("two writes of the same release differ")
	}
}

// The archive goes to a registry (in process) and comes back with the
// same digests, the index and each platform's image; the image of one
// architecture goes up as an image.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	ctx := context.Background()

	tests := []struct {
		name      string
		arches    []string
		plainHTTP bool
	}{
		{"index", []string{"amd64", "arm64"}, true},
		{"one architecture", []string{"amd64"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := fakeRelease(t, filepath.Join(dir, tc.name), tc.arches...)
			archive := filepath.Join(dir, tc.name+".tar")
			var buf bytes.Buffer
			if err := r.Write(&buf); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			a, cleanup, err := ReadArchive(bytes.NewReader(buf.Bytes()), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer cleanup()
			want, err := a.Digest()
			if err != nil {
				t.Fatal(err)
			}
			ref := host + "/cgdelegate:v1.2.3-" + strings.ReplaceAll(tc.name, " ", "-")
			got, err := PushArchive(ctx, archive, ref, PushOptions{PlainHTTP: tc.plainHTTP})
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("pushed %s, the archive holds %s", got, want)
			}
			pulled, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			desc, err := remote.Get(pulled, remote.WithContext(ctx))
			if err != nil {
				t.Fatal(err)
			}
			if desc.Digest != want {
				t.Errorf("the registry's %s is %s, want %s", ref, desc.Digest, want)
			}
			if len(tc.arches) == 1 {
				if !desc.MediaType.IsImage() {
					t.Errorf("one architecture pushed as %s, want an image", desc.MediaType)
				}
				return
			}
			idx, err := desc.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			local, err := a.Index.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(im.Manifests) != len(tc.arches) {
				t.Fatalf("the registry's index has %d manifests, want %d", len(im.Manifests), len(tc.arches))
			}
			for i, m := range im.Manifests {
				img, err := idx.Image(m.Digest)
				if err != nil {
					t.Fatal(err)
				}
				// Every layer is in the registry, and the same.
				layers, err := img.Layers()
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range layers {
					d, err := l.Digest()
					if err != nil {
						t.Fatal(err)
					}
					rl, err := remote.Layer(pulled.Context().Digest(d.String()), remote.WithContext(ctx))
					if err != nil {
						t.Fatalf("layer %s of %s: %v", d, m.Platform, err)
					}
					if rd, err := rl.Digest(); err != nil || rd != d {
						t.Errorf("layer %s came back as %s (%v)", d, rd, err)
					}
				}
				if m.Digest != local.Manifests[i].Digest || m.Platform.Architecture != tc.arches[i] {
					t.Errorf("manifest %d: %s %s, want %s %s", i, m.Digest, m.Platform, local.Manifests[i].Digest, tc.arches[i])
				}
			}
		})
	}
}

func TestPushRefuses(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := fakeRelease(t, dir, "amd64").Write(&buf); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "a.tar")
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := PushArchive(context.Background(), archive, "Not A Reference", PushOptions{})
	if !errors.Is(err, ErrReference) || !strings.Contains(err.Error(), `"Not A Reference"`) {
		t.Errorf("PushArchive to a bad reference = %v, want ErrReference naming it", err)
	}
	_, err = PushArchive(context.Background(), filepath.Join(dir, "absent.tar"), "r.example/x:1", PushOptions{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PushArchive of a missing archive = %v, want ErrNotExist", err)
	}
}

func TestReadArchiveRefuses(t *testing.T) {
	archive := func(files map[string]string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(tw, files[n]); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	layoutFile := `{"imageLayoutVersion":"1.0.0"}`
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"outside", map[string]string{"../escape": "x"}, `entry "../escape" is outside the archive`},
		{"absolute", map[string]string{"/etc/x": "x"}, `entry "/etc/x" is outside the archive`},
		{"no image", map[string]string{"oci-layout": layoutFile, "index.json": `{"schemaVersion":2,"manifests":[]}`}, "index.json names 0 images, want 1"},
		{
			"two images",
			map[string]string{"oci-layout": layoutFile, "index.json": `{"schemaVersion":2,"manifests":[` +
				`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + strings.Repeat("a", 64) + `","size":1},` +
				`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + strings.Repeat("b", 64) + `","size":1}]}`},
			"index.json names 2 images, want 1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			_, cleanup, err := ReadArchive(bytes.NewReader(archive(tc.files)), parent)
			cleanup()
			if !errors.Is(err, ErrArchive) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadArchive = %v, want ErrArchive saying %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("a refused archive left %d entries in its directory", len(entries))
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(parent), "escape")); err == nil {
				t.Error("an entry was written outside the archive's directory")
			}
		})
	}
}

func TestCheckVersion(t *testing.T) {
	tests := []struct {
		version string
		ok      bool
	}{
		{"v0.1.0", true},
		{"v1.22.333", true},
		{"v1.2.3-rc.1", true},
		{"v1.2.3-rc.1+build.5", true},
		{"1.2.3", false},
		{"v1.2", false},
		{"v01.2.3", false},
		{"v1.2.3-", false},
		{"v1.2.3-01", false},
		{"", false},
		{"dev", false},
		{"v1.2.3-4-gabcdef0-dirty", true},
		{"98a83cf", false},
	}
	for _, tc := range tests {
		t.Run(tc.version, func(t *testing.T) {
			err := CheckVersion(tc.version)
			if tc.ok {
				if err != nil {
					t.Errorf("CheckVersion(%q) = %v", tc.version, err)
				}
				return
			}
			if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), `VERSION "`+tc.version+`"`) {
				t.Errorf("CheckVersion(%q) = %v, want ErrVersion naming the value", tc.version, err)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	both := fakeRelease(t, filepath.Join(dir, "both"), "amd64", "arm64")
	one := fakeRelease(t, filepath.Join(dir, "one"), "amd64")
	read := func(r Release) Archived {
		t.Helper()
		var buf bytes.Buffer
		if err := r.Write(&buf); err != nil {
			t.Fatal(err)
		}
		a, cleanup, err := ReadArchive(&buf, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cleanup)
		return a
	}
	// An amd64 image whose binary is built for arm64, as a broken
	// cross-build would make it.
	wrong, err := Image{
		Name: one.Name(), Arch: "amd64",
		Files: []File{{Name: "usr/local/bin/cgdelegate", Mode: 0o755, Data: fakeELF(t, elf.EM_AARCH64, "x")}},
	}.build()
	if err != nil {
		t.Fatal(err)
	}
	renamed := read(one)
	renamed.Name = "r.example/other:v1"
	tests := []struct {
		name string
		r    Release
		a    Archived
		want string
	}{
		{"index", both, read(both), ""},
		{"one image", one, read(one), ""},
		{"index for one", one, read(both), `the index lists ["linux/amd64" "linux/arm64"], want ["linux/amd64"]`},
		{"one for an index", both, read(one), `one image in the archive, want an index of ["amd64" "arm64"]`},
		{"wrong machine", one, Archived{Name: one.Name(), Image: wrong}, "/usr/local/bin/cgdelegate in the amd64 image is built for EM_AARCH64"},
		{"name", one, renamed, `the archive names "r.example/other:v1", want "r.example/cgdelegate:v1.2.3"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Verify(tc.a)
			if tc.want == "" {
				if err != nil {
					t.Errorf("Verify = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify = %v, want ErrVerify saying %q", err, tc.want)
			}
		})
	}
}
