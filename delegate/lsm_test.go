package delegate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// procStatus is /proc/self/status with the seccomp mode and CapEff given.
func procStatus(seccomp, capEff string) string {
	s := "Name:\tsh\nUmask:\t0022\nState:\tR (running)\nCapInh:\t0000000000000000\nCapPrm:\t" + capEff + "\nCapEff:\t" + capEff + "\nNoNewPrivs:\t0\n"
	if seccomp != "" {
		s += "Seccomp:\t" + seccomp + "\nSeccomp_filters:\t1\n"
	}
	return s + "Speculation_Store_Bypass:\tthread force mitigated\n"
}

const (
	// capDefault is containerd's default capability set.
	capDefault = "00000000a80425fb"
	// capAdmin adds CAP_SYS_ADMIN and CAP_NET_ADMIN.
	capAdmin = "00000000a82435fb"
)

func TestConfinement(t *testing.T) {
	tests := []struct {
		name string
		// files under /proc/self; a value "<dir>" makes a directory (a
		// file that reads with an error).
		files       map[string]string
		want        Confinement
		wantString  string
		wantDenied  bool
		wantErrText string
	}{
		{
			name:       "containerd's default profile, SYS_ADMIN",
			files:      map[string]string{"attr/apparmor/current": "cri-containerd.apparmor.d (enforce)\n", "status": procStatus("2", capAdmin)},
			want:       Confinement{AppArmor: "cri-containerd.apparmor.d", AppArmorMode: "enforce", Seccomp: 2, SysAdmin: true},
			wantString: "AppArmor: cri-containerd.apparmor.d (enforce); seccomp: filter", wantDenied: true,
		},
		{
			name:       "Docker's default profile, SYS_ADMIN",
			files:      map[string]string{"attr/apparmor/current": "docker-default (enforce)", "status": procStatus("2", capAdmin)},
			want:       Confinement{AppArmor: "docker-default", AppArmorMode: "enforce", Seccomp: 2, SysAdmin: true},
			wantDenied: true,
		},
		{
			name:       "containerd's default profile without SYS_ADMIN: no mounts tried",
			files:      map[string]string{"attr/apparmor/current": "cri-containerd.apparmor.d (enforce)\n", "status": procStatus("2", capDefault)},
			want:       Confinement{AppArmor: "cri-containerd.apparmor.d", AppArmorMode: "enforce", Seccomp: 2},
			wantString: "AppArmor: cri-containerd.apparmor.d (enforce); seccomp: filter",
		},
		{
			name:       "complain mode denies nothing",
			files:      map[string]string{"attr/apparmor/current": "cri-containerd.apparmor.d (complain)\n", "status": procStatus("2", capAdmin)},
			want:       Confinement{AppArmor: "cri-containerd.apparmor.d", AppArmorMode: "complain", Seccomp: 2, SysAdmin: true},
			wantString: "AppArmor: cri-containerd.apparmor.d (complain); seccomp: filter",
		},
		{
			name:       "the engines' profile",
			files:      map[string]string{"attr/apparmor/current": "cgdelegate-engines (enforce)\n", "status": procStatus("2", capAdmin)},
			want:       Confinement{AppArmor: "cgdelegate-engines", AppArmorMode: "enforce", Seccomp: 2, SysAdmin: true},
			wantString: "AppArmor: cgdelegate-engines (enforce); seccomp: filter",
		},
		{
			name:       "unconfined, no seccomp",
			files:      map[string]string{"attr/apparmor/current": "unconfined\n", "status": procStatus("0", capAdmin)},
			want:       Confinement{AppArmor: "unconfined", Seccomp: 0, SysAdmin: true},
			wantString: "AppArmor: unconfined; seccomp: disabled",
		},
		{
			name:       "old kernel: attr/current",
			files:      map[string]string{"attr/current": "cri-containerd.apparmor.d (enforce)\n", "status": procStatus("2", capAdmin)},
			want:       Confinement{AppArmor: "cri-containerd.apparmor.d", AppArmorMode: "enforce", Seccomp: 2, SysAdmin: true},
			wantDenied: true,
		},
		{
			name:       "SELinux: attr/current is not AppArmor's",
			files:      map[string]string{"attr/current": "system_u:system_r:container_t:s0:c1,c2\x00", "status": procStatus("2", capAdmin)},
			want:       Confinement{Label: "system_u:system_r:container_t:s0:c1,c2", Seccomp: 2, SysAdmin: true},
			wantString: "AppArmor: off (security label system_u:system_r:container_t:s0:c1,c2); seccomp: filter",
		},
		{
			name:  "AppArmor built in but off: the label cannot be read",
			files: map[string]string{"attr/apparmor/current": "<dir>", "attr/current": "system_u:system_r:container_t:s0\n", "status": procStatus("2", capAdmin)},
			want:  Confinement{Seccomp: 2, SysAdmin: true}, wantString: "AppArmor: off; seccomp: filter",
		},
		{
			name:  "no LSM, no seccomp line",
			files: map[string]string{"status": procStatus("", capDefault)},
			want:  Confinement{Seccomp: -1}, wantString: "AppArmor: off; seccomp: unknown",
		},
		{
			name:  "no status",
			files: map[string]string{"attr/apparmor/current": "unconfined\n"},
			want:  Confinement{AppArmor: "unconfined", Seccomp: -1}, wantErrText: "read the seccomp mode",
		},
		{
			name:  "bad CapEff",
			files: map[string]string{"status": "Seccomp:\t2\nCapEff:\tzz\n"},
			want:  Confinement{Seccomp: -1}, wantErrText: `CapEff "zz"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proc := t.TempDir()
			for name, data := range tc.files {
				p := filepath.Join(proc, "self", name)
				if data == "<dir>" {
					if err := os.MkdirAll(p, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				writeFiles(t, filepath.Dir(p), map[string]string{filepath.Base(p): data})
			}
			r := New(Options{CgroupRoot: t.TempDir(), Proc: proc})
			got, err := r.Confinement()
			if tc.wantErrText != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrText) {
					t.Errorf("err %v, want one naming %q", err, tc.wantErrText)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if err == nil && got != tc.want {
				t.Errorf("Confinement = %+v, want %+v", got, tc.want)
			}
			if tc.wantString != "" && got.String() != tc.wantString {
				t.Errorf("String() = %q, want %q", got.String(), tc.wantString)
			}
			if got.MountsDenied() != tc.wantDenied {
				t.Errorf("MountsDenied() = %v, want %v", got.MountsDenied(), tc.wantDenied)
			}
			if tc.wantDenied {
				hint := got.MountsDeniedHint()
				for _, w := range []string{"mounts are denied by AppArmor profile " + got.AppArmor, "localhostProfile: cgdelegate-engines", "docs/engine-profiles.md"} {
					if !strings.Contains(hint, w) {
						t.Errorf("hint %q lacks %q", hint, w)
					}
				}
			}
		})
	}
}

func TestParseAppArmorLabel(t *testing.T) {
	for _, tc := range []struct {
		label, name, mode string
		ok                bool
	}{
		{"cri-containerd.apparmor.d (enforce)", "cri-containerd.apparmor.d", "enforce", true},
		{"cgdelegate-engines (complain)\n", "cgdelegate-engines", "complain", true},
		{"unconfined", "unconfined", "", true},
		{"system_u:system_r:container_t:s0", "", "", false},
		{"name (enforce", "", "", false},
		{" (enforce)", "", "", false},
		{"", "", "", false},
	} {
		t.Run(tc.label, func(t *testing.T) {
			name, mode, ok := parseAppArmorLabel(tc.label)
			if name != tc.name || mode != tc.mode || ok != tc.ok {
				t.Errorf("parseAppArmorLabel(%q) = %q, %q, %v; want %q, %q, %v", tc.label, name, mode, ok, tc.name, tc.mode, tc.ok)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		seccomp      int
		capEff       uint64
		err          bool
	}{
		{"filter with SYS_ADMIN", procStatus("2", capAdmin), 2, 0xa82435fb, false},
		{"no seccomp line", procStatus("", capDefault), -1, 0xa80425fb, false},
		{"strict", "Seccomp: 1\nCapEff: 0\n", 1, 0, false},
		{"bad seccomp", "Seccomp:\tx\n", -1, 0, true},
		{"empty", "", -1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seccomp, capEff, err := parseStatus(strings.NewReader(tc.status))
			if (err != nil) != tc.err || seccomp != tc.seccomp || capEff != tc.capEff {
				t.Errorf("parseStatus = %d, %#x, %v; want %d, %#x, error %v", seccomp, capEff, err, tc.seccomp, tc.capEff, tc.err)
			}
		})
	}
}
