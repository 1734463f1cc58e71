package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
		err  error
	}{
		{name: "nonewprivs", want: "Effective uid: "},
		{name: "/usr/local/bin/nonewprivs", want: "Effective uid: "},
		{name: "ipcmk", args: []string{"-M"}, err: errUsage},
		{name: "ipcmk", args: []string{"-M", "zero"}, err: errUsage},
		{name: "ipcmk", args: []string{"-M", "-4"}, err: errUsage},
		{name: "ipcmk", args: []string{"-Q", "4096"}, err: errUsage},
		{name: "ipcs", args: []string{"-q"}, err: errUsage},
		{name: "pgrep", err: errUsage},
		{name: "pgrep", args: []string{"("}, err: errUsage},
		{name: "sh", err: errUsage},
	} {
		t.Run(tc.name+strings.Join(tc.args, ""), func(t *testing.T) {
			var out bytes.Buffer
			err := run(tc.name, tc.args, &out)
			if !errors.Is(err, tc.err) {
				t.Fatalf("run(%s %q) = %v, want %v", tc.name, tc.args, err, tc.err)
			}
			if !strings.HasPrefix(out.String(), tc.want) {
				t.Fatalf("run(%s %q) printed %q, want prefix %q", tc.name, tc.args, out.String(), tc.want)
			}
		})
	}
}

// TestListShm: a line of /proc/sysvipc/shm (Linux 6.12) becomes a line
// with the segment's id, as critest looks for it.
func TestListShm(t *testing.T) {
	proc := "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n" +
		"         0         7   644               1048576   312     0      0     0     0     0     0          0          0 1764320000                     0                     0\n"
	var out bytes.Buffer
	if err := listShm(strings.NewReader(proc), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || strings.Fields(lines[2])[1] != "7" || strings.Fields(lines[2])[4] != "1048576" {
		t.Fatalf("ipcs -m printed %q", out.String())
	}
}

func TestPgrep(t *testing.T) {
	proc := t.TempDir()
	for pid, comm := range map[string]string{"1": "sh", "42": "sleep", "43": "sleeper", "self": "x"} {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := pgrep(proc, "^sleep$", &out); err != nil || out.String() != "42\n" {
		t.Fatalf("pgrep ^sleep$ = %q, %v", out.String(), err)
	}
	out.Reset()
	var code exitCode
	if err := pgrep(proc, "top", &out); !errors.As(err, &code) || code != 1 || out.Len() != 0 {
		t.Fatalf("pgrep top = %q, %v; want nothing and exit status 1", out.String(), err)
	}
}
