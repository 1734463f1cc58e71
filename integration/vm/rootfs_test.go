package vm

import (
	"archive/tar"
	"errors"
	"slices"
	"strings"
	"testing"
)

// simulation is what mmdebstrap --simulate --verbose prints (trimmed).
const simulation = `I: running apt-get update...
Inst gcc-12-base (12.2.0-14+deb12u1 Debian:12.15/oldstable [amd64])
Conf gcc-12-base (12.2.0-14+deb12u1 Debian:12.15/oldstable [amd64])
Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64]) []
Inst systemd (252.39-1~deb12u1 Debian-Security:12/oldstable-security [amd64])
Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64]) []
Inst mawk [1.3.4.20200120-3.1] (1.3.4.20200120-3.1 Debian:12.15/oldstable [amd64])
I: success in 15.7183 seconds
`

func TestResolvedPackages(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    []string
		wantErr string
	}{
		{"simulation", simulation, []string{
			"gcc-12-base=12.2.0-14+deb12u1", "libc6=2.36-9+deb12u14", "mawk=1.3.4.20200120-3.1", "systemd=252.39-1~deb12u1",
		}, ""},
		{"nothing resolved", "I: success\n", nil, "no package resolved"},
		{"malformed line", "Inst systemd 252\n", nil, `"Inst systemd 252"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolvedPackages(tc.out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := resolvedPackages(""); !errors.Is(err, errNoPackages) {
		t.Errorf("empty simulation: err = %v, want errNoPackages", err)
	}
}

func TestRootfsKey(t *testing.T) {
	pkgs := []string{"systemd", "dbus"}
	resolved := []string{"dbus=1.14.10-1~deb12u1", "systemd=252.39-1~deb12u1"}
	base, err := rootfsKey(rootfsSpec{Name: "systemd", Packages: pkgs}, resolved)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base, "systemd-") || len(base) != len("systemd-")+16 {
		t.Errorf("key %q, want systemd-<16 hex digits>", base)
	}
	again, _ := rootfsKey(rootfsSpec{Name: "systemd", Packages: slices.Clone(pkgs)}, slices.Clone(resolved))
	if again != base {
		t.Errorf("key not stable: %q then %q", base, again)
	}
	for _, tc := range []struct {
		name     string
		spec     rootfsSpec
		resolved []string
	}{
		{"security update", rootfsSpec{Name: "systemd", Packages: pkgs}, []string{"dbus=1.14.10-1~deb12u1", "systemd=252.39-1~deb12u2"}},
		{"one more package", rootfsSpec{Name: "systemd", Packages: append(slices.Clone(pkgs), "kmod")}, resolved},
		{"other name", rootfsSpec{Name: "inpod", Packages: pkgs}, resolved},
		{"a path excluded", rootfsSpec{Name: "systemd", Packages: pkgs, Exclude: []string{"/usr/bin/ctr"}}, resolved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := rootfsKey(tc.spec, tc.resolved)
			if err != nil {
				t.Fatal(err)
			}
			if k == base {
				t.Errorf("key %q did not change", k)
			}
		})
	}
	for _, bad := range []string{"", "a/b", "..", "a b"} {
		t.Run("bad name "+bad, func(t *testing.T) {
			if k, err := rootfsKey(rootfsSpec{Name: bad, Packages: pkgs}, resolved); err == nil {
				t.Errorf("rootfsKey(%q) = %q, want an error", bad, k)
			}
		})
	}
}

func TestMmdebstrapArgs(t *testing.T) {
	spec := rootfsSpec{Name: "systemd", Packages: []string{"systemd", "dbus"}}
	build := mmdebstrapArgs(spec, "/c/rootfs.tar", false)
	sim := mmdebstrapArgs(spec, "/c/rootfs.tar", true)
	spec.Exclude = []string{"/usr/bin/ctr"}
	excluded := mmdebstrapArgs(spec, "/c/rootfs.tar", false)
	for _, tc := range []struct {
		name     string
		args     []string
		want     []string
		wantNone []string
	}{
		{"build", build, []string{"--variant=minbase", "--include=systemd,dbus", "bookworm", "/c/rootfs.tar", debianSources[0]}, []string{"--simulate"}},
		{"simulate", sim, []string{"--simulate", "--verbose", "--include=systemd,dbus"}, nil},
		{"excluded", excluded, []string{"--dpkgopt=path-exclude=/usr/bin/ctr", "--include=systemd,dbus"}, []string{"--simulate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range tc.want {
				if !slices.Contains(tc.args, w) {
					t.Errorf("%q has no %q", tc.args, w)
				}
			}
			for _, w := range tc.wantNone {
				if slices.Contains(tc.args, w) {
					t.Errorf("%q has %q", tc.args, w)
				}
			}
		})
	}
	// The suite, the target and the sources follow every option.
	if i, j := slices.Index(build, "bookworm"), slices.Index(build, "--include=systemd,dbus"); i < j {
		t.Errorf("suite before the options: %q", build)
	}
}

func TestInstalledPackages(t *testing.T) {
	status := `Package: systemd
Status: install ok installed
Priority: important
Version: 252.39-1~deb12u1
Description: system and service manager
 a continuation line

Package: usrmerge
Status: deinstall ok config-files
Version: 37~deb12u1

Package: dbus
Version: 1.14.10-1~deb12u1
Status: install ok installed`
	got, err := installedPackages(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dbus=1.14.10-1~deb12u1", "systemd=252.39-1~deb12u1"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := installedPackages(strings.NewReader("Package: x\nStatus: purge ok not-installed\n")); !errors.Is(err, errNoPackages) {
		t.Errorf("nothing installed: err = %v, want errNoPackages", err)
	}
}

func TestRootfsPackages(t *testing.T) {
	with := writeTar(t, []tar.Header{
		{Name: "./var/lib/dpkg/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./var/lib/dpkg/status", Typeflag: tar.TypeReg, Mode: 0o644},
	}, map[string]string{"./var/lib/dpkg/status": "Package: kmod\nStatus: install ok installed\nVersion: 30+20221128-1\n"})
	got, err := rootfsPackages(with)
	if err != nil || !slices.Equal(got, []string{"kmod=30+20221128-1"}) {
		t.Errorf("rootfsPackages = %q, %v; want [kmod=30+20221128-1]", got, err)
	}
	without := writeTar(t, []tar.Header{{Name: "./etc/", Typeflag: tar.TypeDir, Mode: 0o755}}, nil)
	if _, err := rootfsPackages(without); err == nil || !strings.Contains(err.Error(), "no var/lib/dpkg/status") {
		t.Errorf("rootfsPackages without a status file: err = %v", err)
	}
}
