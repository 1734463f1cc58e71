package lsmprofile

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTree writes files (path under root: content) into root; a content
// of "<dir>" makes a directory.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, name)
		if data == "<dir>" {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if filepath.Base(p) == parserName {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// node is a host tree with AppArmor on, securityfs mounted, a parser in
// /usr/sbin (as on a merged-/usr Debian node whose /sbin link the tree
// does not have) and policy ABI 3.0.
func node() map[string]string {
	return map[string]string{
		appArmorEnabled:                  "Y\n",
		loadedProfiles:                   "cri-containerd.apparmor.d (enforce)\n",
		"/usr/sbin/" + parserName:        "#!/bin/false\n",
		abi3:                             "abi rules\n",
		profileDir + "/tunables/global":  "",
		profileDir + "/cgdelegate-other": "not ours\n",
	}
}

// fakeParser is a Runner standing in for the node's apparmor_parser: it
// records each command and, unless it fails, adds the profile to the
// kernel's list under root in mode.
type fakeParser struct {
	root  string
	mode  string
	out   string
	fail  error
	calls []Command
}

func (f *fakeParser) run(_ context.Context, c Command) ([]byte, error) {
	f.calls = append(f.calls, c)
	if f.fail != nil {
		return []byte(f.out), f.fail
	}
	list := filepath.Join(f.root, loadedProfiles)
	old, _ := os.ReadFile(list)
	if !strings.Contains(string(old), AppArmorName+" (") {
		if err := os.WriteFile(list, append(old, []byte(AppArmorName+" ("+f.mode+")\n")...), 0o644); err != nil {
			return nil, err
		}
	}
	return []byte(f.out), nil
}

func TestInstallAppArmor(t *testing.T) {
	tests := []struct {
		name string
		// edit changes the node tree, in order: a path set to "" is
		// removed.
		edit      [][2]string
		mode      string
		out       string
		fail      error
		wantErr   error
		wantText  []string // in the error
		wantABI   bool
		wantPath  string // the parser's path
		wantCalls int
	}{
		{name: "installed and loaded", wantABI: true, wantPath: "/usr/sbin/" + parserName, wantCalls: 1},
		{
			name: "parser in /sbin first", edit: [][2]string{{"/sbin/" + parserName, "#!/bin/false\n"}},
			wantABI: true, wantPath: "/sbin/" + parserName, wantCalls: 1,
		},
		{name: "AppArmor 2: no abi line", edit: [][2]string{{abi3, ""}}, wantPath: "/usr/sbin/" + parserName, wantCalls: 1},
		{
			name: "parser warnings are kept", out: "Warning: something\n", wantABI: true, wantPath: "/usr/sbin/" + parserName, wantCalls: 1,
		},
		{
			name: "no AppArmor in the kernel", edit: [][2]string{{appArmorEnabled, ""}},
			wantErr: ErrAppArmorDisabled, wantText: []string{"sys/module/apparmor/parameters/enabled does not exist"},
		},
		{
			name: "AppArmor off", edit: [][2]string{{appArmorEnabled, "N\n"}},
			wantErr: ErrAppArmorDisabled, wantText: []string{`reads "N", want Y`, "apparmor=0"},
		},
		{
			name: "no securityfs", edit: [][2]string{{loadedProfiles, ""}},
			wantErr: ErrAppArmorDisabled, wantText: []string{"sys/kernel/security/apparmor", "securityfs is not mounted"},
		},
		{
			name: "no parser", edit: [][2]string{{"/usr/sbin/" + parserName, ""}},
			wantErr: ErrNoParser, wantText: []string{"sbin/apparmor_parser or ", "usr/sbin/apparmor_parser", "apparmor package"},
		},
		{
			name: "parser is a directory", edit: [][2]string{{"/usr/sbin/" + parserName, ""}, {"/usr/sbin/" + parserName, "<dir>"}},
			wantErr: ErrNoParser,
		},
		{
			name: "parser refuses", fail: errors.New("exit status 1"), out: "AppArmor parser error at line 3\n",
			wantErr: ErrParser, wantText: []string{"-r -W /etc/apparmor.d/cgdelegate-engines", "exit status 1", "parser error at line 3"}, wantCalls: 1,
		},
		{
			name: "loaded in complain mode", mode: "complain",
			wantErr: ErrNotLoaded, wantText: []string{"cgdelegate-engines (complain)"}, wantCalls: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, node())
			for _, e := range tc.edit {
				p, data := e[0], e[1]
				if data == "" {
					if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
						t.Fatal(err)
					}
					if p == loadedProfiles { // securityfs: its directory goes too
						_ = os.RemoveAll(filepath.Join(root, appArmorFS))
					}
					continue
				}
				writeTree(t, root, map[string]string{p: data})
			}
			mode := tc.mode
			if mode == "" {
				mode = "enforce"
			}
			p := &fakeParser{root: root, mode: mode, out: tc.out, fail: tc.fail}
			res, err := InstallAppArmor(t.Context(), root, p.run)
			if len(p.calls) != tc.wantCalls {
				t.Errorf("parser ran %d times (%v), want %d", len(p.calls), p.calls, tc.wantCalls)
			}
			file := filepath.Join(root, profileDir, AppArmorName)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				for _, w := range tc.wantText {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				if tc.wantCalls == 0 {
					if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("the profile was written before the node was checked: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Command{Chroot: root, Path: tc.wantPath, Args: []string{"-r", "-W", "/etc/apparmor.d/" + AppArmorName}}
			if c := p.calls[0]; c.Chroot != want.Chroot || c.Path != want.Path || !slices.Equal(c.Args, want.Args) {
				t.Errorf("parser command %v, want %v", c, want)
			}
			if res.ABI3 != tc.wantABI || res.Path != file || !res.Changed || res.Output != strings.TrimSpace(tc.out) {
				t.Errorf("result %+v, want ABI3 %v, path %s, changed", res, tc.wantABI, file)
			}
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(AppArmor(tc.wantABI)) {
				t.Errorf("%s holds\n%s\nwant the profile with abi line %v", file, got, tc.wantABI)
			}
			if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o644 {
				t.Errorf("%s: mode %v (%v), want 0644", file, st.Mode(), err)
			}
			if other, _ := os.ReadFile(filepath.Join(root, profileDir, "cgdelegate-other")); string(other) != "not ours\n" {
				t.Error("another profile was changed")
			}
			// Again: the file is left alone, the parser replaces the profile.
			res, err = InstallAppArmor(t.Context(), root, p.run)
			if err != nil || res.Changed || len(p.calls) != 2 {
				t.Errorf("second run: %+v, %v, %d parser runs; want unchanged, nil, 2", res, err, len(p.calls))
			}
		})
	}
}

// With host root / the parser runs without chroot; a file with other
// content or mode is rewritten.
func TestInstallAppArmorRootAndRewrite(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, node())
	file := filepath.Join(root, profileDir, AppArmorName)
	writeTree(t, root, map[string]string{profileDir + "/" + AppArmorName: "old\n"})
	p := &fakeParser{root: root, mode: "enforce"}
	res, err := InstallAppArmor(t.Context(), root, p.run)
	if err != nil || !res.Changed {
		t.Fatalf("%+v, %v: want the old file replaced", res, err)
	}
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := InstallAppArmor(t.Context(), root, p.run); err != nil || !res.Changed {
		t.Errorf("%+v, %v: want the file rewritten with mode 0644", res, err)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode())
	}
	if c := (Command{Path: "/sbin/apparmor_parser", Args: []string{"-r"}}); c.String() != "/sbin/apparmor_parser -r" {
		t.Errorf("String() = %q", c.String())
	}
	if c := (Command{Chroot: "/host", Path: "/sbin/apparmor_parser"}); c.String() != "chroot /host /sbin/apparmor_parser" {
		t.Errorf("String() = %q", c.String())
	}
}

func TestInstallAppArmorHostRootSlash(t *testing.T) {
	// Host root "/" on this machine: whatever it has, the parser (faked)
	// never runs chrooted. Skip where the test machine has AppArmor on and
	// a parser: the fake would report success without loading anything.
	if _, err := os.Stat("/sys/module/apparmor"); err == nil {
		t.Skip("this machine has AppArmor: the host root / check needs a machine without")
	}
	p := &fakeParser{root: t.TempDir(), mode: "enforce"}
	_, err := InstallAppArmor(t.Context(), "/", p.run)
	if !errors.Is(err, ErrAppArmorDisabled) || len(p.calls) != 0 {
		t.Errorf("host root / without AppArmor: %v, %d parser runs; want ErrAppArmorDisabled before any", err, len(p.calls))
	}
}

func TestInstallSeccomp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "seccomp", SeccompDir)
	want, err := Seccomp("arm64")
	if err != nil {
		t.Fatal(err)
	}
	for i, wantChanged := range []bool{true, false} {
		res, err := InstallSeccomp(dir, "arm64")
		if err != nil {
			t.Fatal(err)
		}
		if res.Path != filepath.Join(dir, SeccompFile) || res.Changed != wantChanged {
			t.Errorf("run %d: %+v, want %s changed %v", i, res, filepath.Join(dir, SeccompFile), wantChanged)
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, SeccompFile))
	if err != nil || string(got) != string(want) {
		t.Errorf("engines.json: %v, want the arm64 profile", err)
	}
	st, err := os.Stat(filepath.Join(dir, SeccompFile))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("engines.json mode %v (%v), want 0644", st.Mode(), err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("the directory holds %v (%v), want engines.json alone (no temp file left)", entries, err)
	}
	if _, err := InstallSeccomp(dir, "s390x"); err == nil || !strings.Contains(err.Error(), "s390x") {
		t.Errorf("s390x: %v, want an error naming it", err)
	}
	// A directory that cannot be made: the error names it.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := InstallSeccomp(filepath.Join(file, "cgdelegate"), "amd64"); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("under a file: %v, want an error naming %s", err, file)
	}
}

func TestProfileMode(t *testing.T) {
	for _, tc := range []struct{ list, want string }{
		{"cgdelegate-engines (enforce)\n", "enforce"},
		{"a (enforce)\ncgdelegate-engines (complain)\n", "complain"},
		{"cgdelegate-engines-2 (enforce)\n", ""},
		{"xcgdelegate-engines (enforce)\n", ""},
		{"", ""},
	} {
		t.Run(tc.list, func(t *testing.T) {
			got, err := profileMode(strings.NewReader(tc.list), AppArmorName)
			if err != nil || got != tc.want {
				t.Errorf("profileMode = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// Exec runs a real program, chrooted or not (chroot needs root: skipped
// otherwise).
func TestExec(t *testing.T) {
	out, err := Exec(t.Context(), Command{Path: "/bin/sh", Args: []string{"-c", "echo $PATH; pwd; echo oops >&2; exit 3"}})
	if err == nil || !strings.Contains(string(out), "/usr/sbin:/usr/bin:/sbin:/bin\n/\noops") {
		t.Errorf("Exec = %q, %v; want the fixed PATH, /, stderr and exit status 3", out, err)
	}
	if _, err := Exec(t.Context(), Command{Path: "sh"}); err == nil {
		t.Error("a relative path ran")
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	_, err = Exec(t.Context(), Command{Chroot: t.TempDir(), Path: "/bin/sh", Args: []string{"-c", "true"}})
	if err == nil {
		t.Error("/bin/sh ran in an empty chroot: the path was resolved outside it")
	}
}

func TestInstallAppArmorBadHostRoot(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{filepath.Join(t.TempDir(), "absent"), file} {
		p := &fakeParser{root: root}
		if _, err := InstallAppArmor(t.Context(), root, p.run); err == nil || !strings.Contains(err.Error(), root) || errors.Is(err, ErrAppArmorDisabled) {
			t.Errorf("host root %s: %v, want an error naming it (not ErrAppArmorDisabled)", root, err)
		}
	}
}

func TestParserCommand(t *testing.T) {
	for _, tc := range []struct{ root, want string }{
		{"/", "/sbin/apparmor_parser -r -W /etc/apparmor.d/cgdelegate-engines"},
		{"//", "/sbin/apparmor_parser -r -W /etc/apparmor.d/cgdelegate-engines"},
		{"/host", "chroot /host /sbin/apparmor_parser -r -W /etc/apparmor.d/cgdelegate-engines"},
	} {
		t.Run(tc.root, func(t *testing.T) {
			if got := parserCommand(tc.root, "/sbin/apparmor_parser", "/etc/apparmor.d/cgdelegate-engines").String(); got != tc.want {
				t.Errorf("parserCommand(%s) = %q, want %q", tc.root, got, tc.want)
			}
		})
	}
}
