package vm

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTar writes a tar of the headers (with their content) to a temp file.
func writeTar(t *testing.T, entries []tar.Header, content map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h.Size = int64(len(content[h.Name]))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content[h.Name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCPIOTar(t *testing.T) {
	src := writeTar(t, []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./etc/shadow", Typeflag: tar.TypeReg, Mode: 0o640, Gid: 42},
		{Name: "./etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./usr/bin/su", Typeflag: tar.TypeReg, Mode: 0o4755},
		{Name: "./usr/bin/gzip", Typeflag: tar.TypeReg, Mode: 0o755},
		{Name: "./usr/bin/gunzip", Typeflag: tar.TypeLink, Linkname: "./usr/bin/gzip", Mode: 0o755},
		{Name: "./sbin/init", Typeflag: tar.TypeSymlink, Linkname: "/lib/systemd/systemd"},
		{Name: "./dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
		{Name: "./run/fifo", Typeflag: tar.TypeFifo, Mode: 0o600},
		{Name: "./usr/share/doc/x", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./var/log/journal/", Typeflag: tar.TypeDir, Mode: 0o2755, Uid: 0, Gid: 101},
	}, map[string]string{
		"./etc/shadow": "root:*:1::::::\n", "./etc/hostname": "debian\n", "./usr/bin/gzip": "GZIP", "./usr/share/doc/x": "doc",
	})
	var buf bytes.Buffer
	w := newCPIOWriter(&buf)
	w.Bytes("etc/hostname", 0o644, []byte("cgd-vm\n")) // an override, written first
	w.Tar(src, func(name string) bool { return isUnder(name, "usr/share/doc") })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := map[string]cpioEntry{}
	for _, e := range readCPIO(t, buf.Bytes()) {
		if _, dup := got[e.name]; dup {
			t.Errorf("%s written twice", e.name)
		}
		got[e.name] = e
	}
	for _, tc := range []struct {
		name     string
		mode     uint32
		uid, gid uint32
		data     string
	}{
		{"etc", cpioModeDir | 0o755, 0, 0, ""},
		{"etc/shadow", cpioModeReg | 0o640, 0, 42, "root:*:1::::::\n"},
		{"etc/hostname", cpioModeReg | 0o644, 0, 0, "cgd-vm\n"},
		{"usr/bin/su", cpioModeReg | 0o4755, 0, 0, ""},
		{"usr/bin/gzip", cpioModeReg | 0o755, 0, 0, "GZIP"},
		{"usr/bin/gunzip", cpioModeReg | 0o755, 0, 0, "GZIP"},
		{"sbin/init", cpioModeLink | 0o777, 0, 0, "/lib/systemd/systemd"},
		{"dev/null", cpioModeChr | 0o666, 0, 0, ""},
		{"var/log/journal", cpioModeDir | 0o2755, 0, 101, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := got[tc.name]
			if !ok {
				t.Fatalf("missing")
			}
			if e.mode != tc.mode || e.uid != tc.uid || e.gid != tc.gid || e.data != tc.data {
				t.Errorf("got mode %o owner %d:%d data %q, want mode %o owner %d:%d data %q",
					e.mode, e.uid, e.gid, e.data, tc.mode, tc.uid, tc.gid, tc.data)
			}
		})
	}
	if e := got["dev/null"]; e.major != 1 || e.minor != 3 {
		t.Errorf("dev/null is %d:%d, want 1:3", e.major, e.minor)
	}
	for _, left := range []string{"run/fifo", "usr/share/doc/x", "", "."} {
		if _, ok := got[left]; ok {
			t.Errorf("%q should have been left out", left)
		}
	}
}

func TestCPIOTarErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  func(t *testing.T) string
		want string
	}{
		{"missing archive", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none.tar") }, "no such file"},
		{"dangling hard link", func(t *testing.T) string {
			return writeTar(t, []tar.Header{{Name: "a", Typeflag: tar.TypeLink, Linkname: "b"}}, nil)
		}, "hard link a to b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newCPIOWriter(&bytes.Buffer{})
			w.Tar(tc.src(t), nil)
			err := w.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
