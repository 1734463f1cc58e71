package cri

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/internal/host"
)

func TestPodCgroupParent(t *testing.T) {
	const uid = "podbounds-1763900000"
	tests := []struct {
		name    string
		systemd bool
		qos     string
		want    string
		// wantPath is where internal/host (the plugin and the hook)
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
			p, err := host.PodPath(got)
			if err != nil {
				t.Fatalf("host.PodPath(%q): %v", got, err)
			}
			if p != tc.wantPath {
				t.Errorf("host.PodPath(%q) = %q, want %q", got, p, tc.wantPath)
			}
		})
	}
}

func TestPodSpecDefaults(t *testing.T) {
	guaranteedRes := &runtimeapi.LinuxContainerResources{CpuShares: 2048, CpuPeriod: 100000, CpuQuota: 200000, MemoryLimitInBytes: 1 << 30}
	burstableRes := &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 200000, MemoryLimitInBytes: 1 << 30}
	for _, tc := range []struct {
		name string
		spec PodSpec
		want string
	}{
		{"cgroupfs", PodSpec{}, "/kubepods/burstable/podu-1"},
		{"systemd", PodSpec{SystemdCgroup: true}, "kubepods-burstable-podu_1.slice"},
		{"guaranteed resources", PodSpec{Resources: guaranteedRes}, "/kubepods/podu-1"},
		{"burstable resources", PodSpec{Resources: burstableRes}, "/kubepods/burstable/podu-1"},
		{"no memory limit", PodSpec{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 100000}}, "/kubepods/burstable/podu-1"},
		{"guaranteed, systemd", PodSpec{Guaranteed: true, SystemdCgroup: true}, "kubepods-podu_1.slice"},
	} {
		s := tc.spec
		s.Name, s.UID = "p", "u-1"
		s.defaults()
		if s.CgroupParent != tc.want {
			t.Errorf("%s: CgroupParent %q, want %q", tc.name, s.CgroupParent, tc.want)
		}
	}
}
