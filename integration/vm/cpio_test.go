package vm

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

type cpioEntry struct {
	name  string
	mode  uint32
	data  string
	major uint32
	minor uint32
	uid   uint32
	gid   uint32
}

// readCPIO parses a newc archive (enough of it for the tests).
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	align := func(n int) int { return (n + 3) &^ 3 }
	off := 0
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d", off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(v)
		}
		mode, uid, gid, size, rmaj, rmin, nsize := field(1), field(2), field(3), int(field(6)), field(9), field(10), int(field(11))
		name := string(b[off+110 : off+110+nsize-1])
		dataOff := align(off + 110 + nsize)
		data := string(b[dataOff : dataOff+size])
		off = align(dataOff + size)
		if name == "TRAILER!!!" {
			return out
		}
		out = append(out, cpioEntry{name: name, mode: mode, data: data, major: rmaj, minor: rmin, uid: uid, gid: gid})
	}
}

func TestCPIOWriter(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host")
	if err := os.WriteFile(host, []byte("from the host"), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := newCPIOWriter(&buf)
	w.Bytes("/init", 0o755, []byte("#!/bin/sh\n"))
	w.HostFile("usr/local/bin/x", 0o755, host)
	w.Symlink("bin/sh", "busybox")
	w.CharDev("dev/console", 0o600, 5, 1)
	w.Bytes("init", 0o644, []byte("ignored: first entry wins"))
	w.Dir("tmp", 0o1777)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	want := []cpioEntry{
		{name: "init", mode: cpioModeReg | 0o755, data: "#!/bin/sh\n"},
		{name: "usr", mode: cpioModeDir | 0o755},
		{name: "usr/local", mode: cpioModeDir | 0o755},
		{name: "usr/local/bin", mode: cpioModeDir | 0o755},
		{name: "usr/local/bin/x", mode: cpioModeReg | 0o755, data: "from the host"},
		{name: "bin", mode: cpioModeDir | 0o755},
		{name: "bin/sh", mode: cpioModeLink | 0o777, data: "busybox"},
		{name: "dev", mode: cpioModeDir | 0o755},
		{name: "dev/console", mode: cpioModeChr | 0o600, major: 5, minor: 1},
		{name: "tmp", mode: cpioModeDir | 0o1777},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestCPIOWriterMissingHostFile(t *testing.T) {
	var buf bytes.Buffer
	w := newCPIOWriter(&buf)
	w.HostFile("x", 0o644, filepath.Join(t.TempDir(), "missing"))
	w.Bytes("y", 0o644, nil)
	if err := w.Close(); err == nil {
		t.Fatal("Close succeeded after a missing host file")
	}
}
