package budget

import "testing"

func TestBubbleCPUs(t *testing.T) {
	const gi = 1 << 30
	tests := []struct {
		name string
		b    Budget
		want int
	}{
		{"guaranteed whole cpus", Budget{CPURequest: 4000, CPULimit: 4000, MemoryLimit: gi}, 4},
		{"guaranteed, memory request stated equal", Budget{CPURequest: 2000, CPULimit: 2000, MemoryRequest: gi, MemoryLimit: gi}, 2},
		{"guaranteed fractional", Budget{CPURequest: 2500, CPULimit: 2500, MemoryLimit: gi}, 0},
		{"burstable cpu request below limit", Budget{CPURequest: 2000, CPULimit: 4000, MemoryLimit: gi}, 0},
		{"burstable without memory limit", Budget{CPURequest: 2000, CPULimit: 2000}, 0},
		{"burstable memory request below limit", Budget{CPURequest: 2000, CPULimit: 2000, MemoryRequest: gi / 2, MemoryLimit: gi}, 0},
		{"request only", Budget{CPURequest: 2000}, 0},
		{"nothing", Budget{}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.BubbleCPUs(); got != tc.want {
				t.Errorf("BubbleCPUs(%s) = %d, want %d", tc.b, got, tc.want)
			}
		})
	}
}

func TestPodQoSFromOOMScoreAdj(t *testing.T) {
	v := func(n int64) *int64 { return &n }
	tests := []struct {
		name string
		adj  *int64
		want QoSClass
	}{
		{"none", nil, ""},
		{"guaranteed or node-critical", v(-997), ""},
		{"besteffort", v(1000), QoSBestEffort},
		{"burstable floor", v(3), QoSBurstable},
		{"burstable", v(500), QoSBurstable},
		{"burstable ceiling", v(999), QoSBurstable},
		{"not the kubelet's", v(0), ""},
		{"kubelet itself", v(-999), ""},
		{"below the burstable floor", v(2), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodQoSFromOOMScoreAdj(tc.adj); got != tc.want {
				t.Errorf("PodQoSFromOOMScoreAdj = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPodQoSFromCgroupParent(t *testing.T) {
	tests := []struct {
		parent string
		want   QoSClass
	}{
		{"/kubepods/burstable/pod8f2c9a4e-1111-2222-3333-444455556666", QoSBurstable},
		{"/kubepods/besteffort/pod8f2c9a4e-1111-2222-3333-444455556666", QoSBestEffort},
		{"/kubepods/pod8f2c9a4e-1111-2222-3333-444455556666", QoSGuaranteed},
		{"kubepods/burstable/podabc/", QoSBurstable},
		{"kubepods-burstable-pod8f2c9a4e_1111_2222_3333_444455556666.slice", QoSBurstable},
		{"kubepods-besteffort-pod8f2c9a4e_1111.slice", QoSBestEffort},
		{"kubepods-pod8f2c9a4e_1111.slice", QoSGuaranteed},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podabc.slice", QoSBurstable},
		{"", ""},
		{"/system.slice", ""},
		{"/kubepods/burstable", ""},
		{"/kubepods/burstable/pod", ""},
		{"/other/pod123", ""},
		{"machine.slice", ""},
	}
	for _, tc := range tests {
		if got := PodQoSFromCgroupParent(tc.parent); got != tc.want {
			t.Errorf("PodQoSFromCgroupParent(%q) = %q, want %q", tc.parent, got, tc.want)
		}
	}
}
