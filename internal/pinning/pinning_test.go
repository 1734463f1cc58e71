package pinning

import (
	"errors"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/podres"
	"github.com/cgdelegate/cgdelegate/internal/policy"
)

func TestLifecycleAnnotation(t *testing.T) {
	tests := []struct {
		value   string
		want    policy.Lifecycle
		wantErr error
	}{
		{"init", policy.LifecycleInit, nil},
		{" Sidecar ", policy.LifecycleSidecar, nil},
		{"regular", policy.LifecycleRegular, nil},
		{"", policy.LifecycleRegular, nil},
		{"daemon", "", ErrLifecycle},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			pod := &api.PodSandbox{Annotations: map[string]string{"lifecycle.cgdelegate.io/container.c": tc.value}}
			got, err := lifecycle(pod, &api.Container{Name: "c"})
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Fatalf("lifecycle(%q) = %q, %v; want %q, %v", tc.value, got, err, tc.want, tc.wantErr)
			}
		})
	}
	if got, err := lifecycle(&api.PodSandbox{}, &api.Container{Name: "c"}); err != nil || got != policy.LifecycleRegular {
		t.Fatalf("no annotation: %q, %v", got, err)
	}
}

func TestRestoreExclusive(t *testing.T) {
	// A Guaranteed 2-CPU container after cgdelegate set its quota to -1:
	// request 2000m from shares, no limit.
	unlimited := podres.NewContainer(podres.Budget{CPURequest: 2000, MemoryLimit: 1 << 30})
	excl := policy.Assignment{Pool: policy.PoolExclusive, CPUs: cpuset.New(1, 9), Mems: cpuset.New(0), Bubble: cpuset.New(0, 1, 8, 9)}.Stamp()
	shared := policy.Assignment{Pool: policy.PoolPodShared, CPUs: cpuset.New(0, 8), Mems: cpuset.New(0)}.Stamp()
	tests := []struct {
		name  string
		stamp string
		quota *api.OptionalInt64
		want  int
	}{
		{"exclusive stamp restores the limit", excl, api.Int64(-1), 2},
		{"exclusive stamp, quota unknown", excl, nil, 2},
		{"shared stamp leaves it", shared, nil, 0},
		{"shared stamp leaves it, even with quota -1", shared, api.Int64(-1), 0},
		{"no stamp leaves it", "", nil, 0},
		{"no stamp, quota 0 leaves it", "", api.Int64(0), 0},
		// Pinned by a Synchronize after it was created without the plugin:
		// the quota is -1, but there is no stamp.
		{"no stamp, quota -1 restores the limit", "", api.Int64(-1), 2},
		{"bad stamp leaves it", "v=9", nil, 0},
		{"bad stamp, quota -1 restores the limit", "v=9", api.Int64(-1), 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := restoreExclusive(policy.ContainerSpec{Resources: unlimited}, tc.stamp, tc.quota)
			if got.Resources.ExclusiveCPUs() != tc.want {
				t.Fatalf("ExclusiveCPUs = %d, want %d (%+v)", got.Resources.ExclusiveCPUs(), tc.want, got.Resources)
			}
		})
	}
}

func TestUpdates(t *testing.T) {
	as := []policy.Assignment{
		{ContainerID: "a", CPUs: cpuset.New(0, 1), Mems: cpuset.New(0)},
		{ContainerID: "b", CPUs: cpuset.New(2), Mems: cpuset.New(0), DisableQuota: true},
		{ContainerID: "a", CPUs: cpuset.New(0, 1, 2), Mems: cpuset.New(0)},
	}
	us := Updates(as)
	if len(us) != 2 {
		t.Fatalf("got %d updates, want 2 (later assignment wins)", len(us))
	}
	for _, tc := range []struct {
		id, cpus string
		quota    bool
	}{{"a", "0-2", false}, {"b", "2", true}} {
		var u *api.ContainerUpdate
		for _, x := range us {
			if x.GetContainerId() == tc.id {
				u = x
			}
		}
		cpu := u.GetLinux().GetResources().GetCpu()
		if cpu.GetCpus() != tc.cpus || cpu.GetMems() != "0" || (cpu.GetQuota().GetValue() == -1) != tc.quota {
			t.Errorf("update %s = %v", tc.id, cpu)
		}
	}
	if Updates(nil) != nil {
		t.Error("no assignments must give no updates")
	}
}
