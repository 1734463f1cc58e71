package cri

import (
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/cgroupfs"
)

func TestPodCgroupParent(t *testing.T) {
	const uid = "podbounds-1763900000"
	tests := []struct {
		name    string
		systemd bool
		qos     string
		want    string
		// wantPath is where internal/cgroupfs (the plugin and the hook)
		// finds that pod cgroup below the cgroup root.
		wantPath string
	}{
		{"cgroupfs burstable", false, "burstable", "/kubepods/burstable/pod" + uid, "/kubepods/burstable/pod" + uid},
		{"cgroupfs guaranteed", false, "", "/kubepods/pod" + uid, "/kubepods/pod" + uid},
		{
			"systemd burstable", true, "burstable", "kubepods-burstable-podpodbounds_1763900000.slice",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podpodbounds_1763900000.slice",
		},
		{
			"systemd guaranteed", true, "", "kubepods-podpodbounds_1763900000.slice",
			"/kubepods.slice/kubepods-podpodbounds_1763900000.slice",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PodCgroupParent(tc.systemd, tc.qos, uid)
			if got != tc.want {
				t.Errorf("PodCgroupParent = %q, want %q", got, tc.want)
			}
			p, err := cgroupfs.PodPath(got)
			if err != nil {
				t.Fatalf("cgroupfs.PodPath(%q): %v", got, err)
			}
			if p != tc.wantPath {
				t.Errorf("cgroupfs.PodPath(%q) = %q, want %q", got, p, tc.wantPath)
			}
		})
	}
}

func TestPodSpecDefaults(t *testing.T) {
	for _, tc := range []struct {
		systemd bool
		want    string
	}{{false, "/kubepods/burstable/podu-1"}, {true, "kubepods-burstable-podu_1.slice"}} {
		s := PodSpec{Name: "p", UID: "u-1", SystemdCgroup: tc.systemd}
		s.defaults()
		if s.CgroupParent != tc.want {
			t.Errorf("SystemdCgroup %v: CgroupParent %q, want %q", tc.systemd, s.CgroupParent, tc.want)
		}
	}
}
