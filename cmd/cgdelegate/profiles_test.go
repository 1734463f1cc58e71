package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/lsmprofile"
)

// fakeNode is a host root with AppArmor enabled and a parser in /sbin, or
// without what missing names: "apparmor" (the module's enabled file reads
// N) or "parser".
func fakeNode(t *testing.T, missing string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"sys/module/apparmor/parameters/enabled": "Y\n",
		"sys/kernel/security/apparmor/profiles":  "",
		"sbin/apparmor_parser":                   "#!/bin/false\n",
		"etc/apparmor.d/abi/3.0":                 "",
	}
	switch missing {
	case "apparmor":
		files["sys/module/apparmor/parameters/enabled"] = "N\n"
	case "parser":
		delete(files, "sbin/apparmor_parser")
	}
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// loader is a fake apparmor_parser: it records its commands and lists the
// profile as loaded under root, or fails with fail.
type loader struct {
	root  string
	fail  error
	calls []lsmprofile.Command
}

func (l *loader) run(_ context.Context, c lsmprofile.Command) ([]byte, error) {
	l.calls = append(l.calls, c)
	if l.fail != nil {
		return []byte("AppArmor parser error for /etc/apparmor.d/cgdelegate-engines: syntax error\n"), l.fail
	}
	return nil, os.WriteFile(filepath.Join(l.root, "sys/kernel/security/apparmor/profiles"), []byte(lsmprofile.AppArmorName+" (enforce)\n"), 0o644)
}

func TestInstallProfiles(t *testing.T) {
	tests := []struct {
		name    string
		args    func(root, seccomp string) []string
		missing string
		goarch  string
		fail    error
		// wantCode is the exit code; want and dontWant lines of the log.
		wantCode       int
		want, dontWant []string
		wantSeccomp    bool
		wantChroot     bool
		wantCalls      int
	}{
		{
			name:     "seccomp only",
			args:     func(_, s string) []string { return []string{"-seccomp-dir", s, "-log-format", "json"} },
			want:     []string{`"msg":"seccomp profile installed"`, `"localhostProfile":"cgdelegate/engines.json"`, `"arch":"amd64"`},
			dontWant: []string{"AppArmor"}, wantSeccomp: true,
		},
		{
			name:      "both",
			args:      func(r, s string) []string { return []string{"-seccomp-dir", s, "-apparmor", "-host-root", r} },
			want:      []string{"seccomp profile installed", "AppArmor profile loaded", "abi3=true", "/sbin/apparmor_parser -r -W /etc/apparmor.d/cgdelegate-engines"},
			wantCalls: 1, wantSeccomp: true, wantChroot: true,
		},
		{
			name:      "AppArmor only",
			args:      func(r, _ string) []string { return []string{"-apparmor", "-host-root", r} },
			want:      []string{"AppArmor profile loaded", "written=true", `command="chroot `},
			dontWant:  []string{"seccomp"},
			wantCalls: 1, wantChroot: true,
		},
		{
			name:     "AppArmor off: explicit failure, seccomp still installed",
			args:     func(r, s string) []string { return []string{"-seccomp-dir", s, "-apparmor", "-host-root", r} },
			missing:  "apparmor",
			wantCode: 1, wantSeccomp: true,
			want: []string{"seccomp profile installed", "cannot install the AppArmor profile", "AppArmor is not enabled on the node", `reads \"N\", want Y`},
		},
		{
			name:     "no parser on the node",
			args:     func(r, _ string) []string { return []string{"-apparmor", "-host-root", r} },
			missing:  "parser",
			wantCode: 1,
			want:     []string{"cannot install the AppArmor profile", "no apparmor_parser on the node", "sbin/apparmor_parser or"},
		},
		{
			name:      "parser fails",
			args:      func(r, _ string) []string { return []string{"-apparmor", "-host-root", r} },
			fail:      errors.New("exit status 1"),
			wantCode:  1,
			wantCalls: 1, wantChroot: true,
			want: []string{"apparmor_parser said", "syntax error", "apparmor_parser failed", "exit status 1"},
		},
		{
			name:     "no profile for the architecture",
			args:     func(_, s string) []string { return []string{"-seccomp-dir", s} },
			goarch:   "ppc64le",
			wantCode: 1,
			want:     []string{"cannot install the seccomp profile", `GOARCH \"ppc64le\"`},
		},
		{
			name:     "host root missing",
			args:     func(r, _ string) []string { return []string{"-apparmor", "-host-root", filepath.Join(r, "absent")} },
			wantCode: 1,
			want:     []string{"cannot install the AppArmor profile", "host root", "absent"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeNode(t, tc.missing)
			seccompDir := filepath.Join(t.TempDir(), "seccomp", "cgdelegate")
			goarch := tc.goarch
			if goarch == "" {
				goarch = "amd64"
			}
			l := &loader{root: root, fail: tc.fail}
			for run := range 2 {
				var errOut bytes.Buffer
				code := runInstallProfiles(tc.args(root, seccompDir), &errOut, goarch, l.run)
				if code != tc.wantCode {
					t.Fatalf("run %d: exit %d, want %d; log:\n%s", run, code, tc.wantCode, errOut.String())
				}
				log := errOut.String()
				for _, w := range tc.want {
					if run == 1 && strings.Contains(w, "seccomp profile installed") {
						w = strings.Replace(w, "installed", "already installed", 1)
					}
					if run == 1 && w == "written=true" {
						w = "written=false"
					}
					if !strings.Contains(log, w) {
						t.Errorf("run %d: log lacks %s:\n%s", run, w, log)
					}
				}
				for _, w := range tc.dontWant {
					if strings.Contains(log, w) {
						t.Errorf("run %d: log has %s:\n%s", run, w, log)
					}
				}
			}
			data, err := os.ReadFile(filepath.Join(seccompDir, "engines.json"))
			want, _ := lsmprofile.Seccomp(goarch)
			if got := err == nil && bytes.Equal(data, want); got != tc.wantSeccomp {
				t.Errorf("seccomp profile installed %v (%v), want %v", got, err, tc.wantSeccomp)
			}
			if len(l.calls) != 2*tc.wantCalls {
				t.Fatalf("parser ran %d times in two runs, want %d: %v", len(l.calls), 2*tc.wantCalls, l.calls)
			}
			for _, c := range l.calls {
				if (c.Chroot == root) != tc.wantChroot || c.Path != "/sbin/apparmor_parser" {
					t.Errorf("parser command %s, want /sbin/apparmor_parser chrooted into %s: %v", c, root, tc.wantChroot)
				}
			}
		})
	}
}

// Every flag is checked, each error naming the flag and its value, all of
// them at once, with exit code 2.
func TestParseProfilesFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want profilesFlags
		errs []string
	}{
		{name: "seccomp", args: []string{"-seccomp-dir", "/var/lib/kubelet/seccomp/cgdelegate"}, want: profilesFlags{seccompDir: "/var/lib/kubelet/seccomp/cgdelegate", hostRoot: "/", timeout: defaultProfilesTimeout}},
		{name: "apparmor at /", args: []string{"-apparmor"}, want: profilesFlags{appArmor: true, hostRoot: "/", timeout: defaultProfilesTimeout}},
		{name: "apparmor at /host", args: []string{"-apparmor", "-host-root", "/host", "-timeout", "30s"}, want: profilesFlags{appArmor: true, hostRoot: "/host", timeout: 30e9}},
		{name: "nothing", args: nil, errs: []string{"nothing to install: give -seccomp-dir DIR, -apparmor, or both"}},
		{name: "relative seccomp dir", args: []string{"-seccomp-dir", "seccomp/cgdelegate"}, errs: []string{`-seccomp-dir "seccomp/cgdelegate": want an absolute path`}},
		{name: "relative host root", args: []string{"-apparmor", "-host-root", "host"}, errs: []string{`-host-root "host": want an absolute path`}},
		{name: "empty host root", args: []string{"-apparmor", "-host-root", ""}, errs: []string{`-host-root "": want an absolute path`}},
		{name: "host root without apparmor", args: []string{"-seccomp-dir", "/s", "-host-root", "/host"}, errs: []string{`-host-root "/host": only -apparmor uses it`}},
		{name: "zero timeout", args: []string{"-apparmor", "-timeout", "0s"}, errs: []string{`-timeout "0s": must be more than 0`}},
		{name: "bad log level", args: []string{"-apparmor", "-log-level", "loud"}, errs: []string{`-log-level "loud"`}},
		{name: "bad log format", args: []string{"-apparmor", "-log-format", "xml"}, errs: []string{`-log-format "xml"`}},
		{name: "extra word", args: []string{"-apparmor", "now"}, errs: []string{`unexpected argument "now": install-profiles takes only flags`}},
		{name: "every problem at once", args: []string{"-seccomp-dir", "x", "-host-root", "y", "-timeout", "-1s"}, errs: []string{`-seccomp-dir "x"`, `-host-root "y"`, `-timeout "-1s"`}},
		{name: "unknown flag", args: []string{"-selinux"}, errs: []string{"flag provided but not defined: -selinux"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var errOut bytes.Buffer
			got, err := parseProfilesFlags(tc.args, &errOut)
			if len(tc.errs) == 0 {
				if err != nil || got != tc.want {
					t.Fatalf("parseProfilesFlags = %+v, %v; want %+v; stderr=%s", got, err, tc.want, errOut.String())
				}
				return
			}
			if err == nil {
				t.Fatalf("parseProfilesFlags = %+v, want an error", got)
			}
			if code := runInstallProfiles(tc.args, &bytes.Buffer{}, "amd64", nil); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			line := strings.TrimSpace(errOut.String())
			if !strings.HasPrefix(line, "cgdelegate install-profiles: ") && !strings.Contains(line, "flag provided") {
				t.Errorf("stderr %q does not start with the command's name", line)
			}
			for _, w := range tc.errs {
				if !strings.Contains(line, w) {
					t.Errorf("stderr lacks %s:\n%s", w, line)
				}
			}
		})
	}
}

func TestInstallProfilesHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"install-profiles", "-h"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	for _, w := range []string{"usage: cgdelegate install-profiles", "-seccomp-dir", "-apparmor", "-host-root", "chroot <host-root> /sbin/apparmor_parser -r -W", "it never skips"} {
		if !strings.Contains(errOut.String(), w) {
			t.Errorf("usage lacks %s:\n%s", w, errOut.String())
		}
	}
	errOut.Reset()
	if code := run([]string{"-log-level", "debug", "install-profiles"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `"install-profiles" must come first`) {
		t.Errorf("install-profiles after flags: exit %d, %s", code, errOut.String())
	}
}
