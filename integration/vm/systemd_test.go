package vm

import (
	"regexp"
	"strings"
	"testing"
)

func TestSystemdFiles(t *testing.T) {
	files, err := systemdFiles(systemdUnits, systemdMasked)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]systemdFile{}
	for _, f := range files {
		if _, dup := byName[f.Name]; dup {
			t.Errorf("%s written twice", f.Name)
		}
		if strings.HasPrefix(f.Name, "/") {
			t.Errorf("%s: want a path relative to /", f.Name)
		}
		byName[f.Name] = f
	}
	want := map[string]func(systemdFile) bool{
		"etc/systemd/system/cgd-guest.service": func(f systemdFile) bool {
			return f.Link == "" && strings.Contains(f.Data, "ExecStart=/cgd/guest-run.sh") &&
				strings.Contains(f.Data, "After=dbus.service") && strings.Contains(f.Data, "FailureAction=poweroff-immediate")
		},
		"etc/systemd/system/multi-user.target.wants/cgd-guest.service": func(f systemdFile) bool {
			return f.Link == "/etc/systemd/system/cgd-guest.service"
		},
		"etc/systemd/system/getty.target":              func(f systemdFile) bool { return f.Link == "/dev/null" },
		"etc/systemd/system/systemd-firstboot.service": func(f systemdFile) bool { return f.Link == "/dev/null" },
		"etc/machine-id": func(f systemdFile) bool {
			return regexp.MustCompile(`^[0-9a-f]{32}\n$`).MatchString(f.Data)
		},
		"etc/hostname": func(f systemdFile) bool { return f.Data == "cgd-vm\n" },
	}
	for name, ok := range want {
		t.Run(name, func(t *testing.T) {
			f, found := byName[name]
			if !found {
				t.Fatal("missing")
			}
			if !ok(f) {
				t.Errorf("unexpected %+v", f)
			}
		})
	}
}

func TestSystemdFilesErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		units  []systemdUnit
		masked []string
		want   string
	}{
		{"unit without a type", []systemdUnit{{Name: "kubelet"}}, nil, `"kubelet"`},
		{"unit with a path", []systemdUnit{{Name: "a/kubelet.service"}}, nil, `"a/kubelet.service"`},
		{"own unit masked", []systemdUnit{{Name: "kubelet.service"}}, []string{"kubelet.service"}, "both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := systemdFiles(tc.units, tc.masked)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %s", err, tc.want)
			}
		})
	}
}
