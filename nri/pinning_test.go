package nri

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/podres"
	"github.com/cgdelegate/cgdelegate/internal/policy"
	"github.com/cgdelegate/cgdelegate/internal/topology/topotest"
)

func pinConfig(t *testing.T) config.Config {
	t.Helper()
	c := testConfig(t)
	c.CPUPinning = true
	c.SysfsRoot = t.TempDir()
	if err := topotest.DualSocketHT().Tree().Write(c.SysfsRoot); err != nil {
		t.Fatal(err)
	}
	c.KubeletCPUManagerState = filepath.Join(t.TempDir(), "cpu_manager_state")
	return c
}

func TestConfigureEvents(t *testing.T) {
	// RemovePodSandbox is always subscribed (the pod bounds cache forgets
	// the pod); these come only with active pinning.
	pinEvents := []api.Event{
		api.Event_RUN_POD_SANDBOX, api.Event_STOP_CONTAINER, api.Event_REMOVE_CONTAINER,
	}
	tests := []struct {
		name    string
		mutate  func(*config.Config)
		wantPin bool
	}{
		{"pinning off", func(c *config.Config) { c.CPUPinning = false }, false},
		{"pinning on", func(*config.Config) {}, true},
		{"topology missing", func(c *config.Config) { c.SysfsRoot = "/nonexistent-sysfs" }, false},
		{"kubelet static", func(c *config.Config) {
			if err := os.WriteFile(c.KubeletCPUManagerState, []byte(`{"policyName":"static"}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := pinConfig(t)
			tc.mutate(&cfg)
			p, err := New(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			mask, err := p.Configure(context.Background(), "", "containerd", "v2")
			if err != nil {
				t.Fatal(err)
			}
			if !mask.IsSet(api.Event_CREATE_CONTAINER) || !mask.IsSet(api.Event_REMOVE_POD_SANDBOX) {
				t.Errorf("mask %s lacks CreateContainer or RemovePodSandbox", mask.PrettyString())
			}
			for _, ev := range pinEvents {
				if mask.IsSet(ev) != tc.wantPin {
					t.Errorf("mask %s: %s set = %v, want %v", mask.PrettyString(), ev, mask.IsSet(ev), tc.wantPin)
				}
			}
			r := p.Report()
			switch {
			case !cfg.CPUPinning && r.Pinning != nil:
				t.Errorf("pinning off but status has %+v", r.Pinning)
			case cfg.CPUPinning && (r.Pinning == nil || r.Pinning.Active != tc.wantPin || (r.Pinning.Reason == "") == !tc.wantPin):
				t.Errorf("status pinning = %+v, want active %v with a reason when inactive", r.Pinning, tc.wantPin)
			}
		})
	}
}

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
			pod := &api.PodSandbox{Annotations: map[string]string{LifecycleAnnotationPrefix + "c": tc.value}}
			got, err := lifecycle(pod, "c")
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Fatalf("lifecycle(%q) = %q, %v; want %q, %v", tc.value, got, err, tc.want, tc.wantErr)
			}
		})
	}
	if got, err := lifecycle(&api.PodSandbox{}, "c"); err != nil || got != policy.LifecycleRegular {
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

func TestContainerUpdates(t *testing.T) {
	as := []policy.Assignment{
		{ContainerID: "a", CPUs: cpuset.New(0, 1), Mems: cpuset.New(0)},
		{ContainerID: "b", CPUs: cpuset.New(2), Mems: cpuset.New(0), DisableQuota: true},
		{ContainerID: "a", CPUs: cpuset.New(0, 1, 2), Mems: cpuset.New(0)},
	}
	us := containerUpdates(as)
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
	if containerUpdates(nil) != nil {
		t.Error("no assignments must give no updates")
	}
}

// blockingUpdater stands in for containerd, which holds its NRI lock for a
// whole event: UpdateContainers waits until the event handler returned.
type blockingUpdater struct {
	runtimeLock *sync.Mutex
	mu          sync.Mutex
	batches     [][]*api.ContainerUpdate
}

func (u *blockingUpdater) UpdateContainers(us []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	u.runtimeLock.Lock()
	defer u.runtimeLock.Unlock()
	u.mu.Lock()
	defer u.mu.Unlock()
	u.batches = append(u.batches, us)
	return nil, nil
}

// TestUpdatesFromEventsWithoutReturn: RunPodSandbox and RemovePodSandbox
// change the node shared pool but cannot return updates; they are sent
// after the handler returns, never from inside it.
func TestUpdatesFromEventsWithoutReturn(t *testing.T) {
	p, err := New(pinConfig(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var runtimeLock sync.Mutex
	u := &blockingUpdater{runtimeLock: &runtimeLock}
	p.SetUpdater(u)
	ctx := context.Background()

	plain := &api.PodSandbox{Id: "p0", Name: "plain", Namespace: "default"}
	ctr := &api.Container{Id: "c0", PodSandboxId: "p0", Name: "app", Linux: &api.LinuxContainer{}}
	if err := p.RunPodSandbox(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.CreateContainer(ctx, plain, ctr); err != nil {
		t.Fatal(err)
	}
	budget := &api.PodSandbox{Id: "p1", Name: "budget", Namespace: "default", Linux: &api.LinuxPodSandbox{
		PodResources: &api.LinuxResources{Cpu: &api.LinuxCPU{Quota: api.Int64(400000), Period: api.UInt64(100000), Shares: api.UInt64(4096)}},
	}}

	for _, step := range []struct {
		name  string
		event func() error
		want  int // cpus of c0 afterwards
	}{
		{"RunPodSandbox", func() error { return p.RunPodSandbox(ctx, budget) }, 12},
		{"RemovePodSandbox", func() error { return p.RemovePodSandbox(ctx, budget) }, 16},
	} {
		runtimeLock.Lock() // the runtime is inside the event
		if err := step.event(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		runtimeLock.Unlock()
		p.WaitUpdates()
		u.mu.Lock()
		last := u.batches[len(u.batches)-1]
		u.mu.Unlock()
		got, err := cpuset.Parse(last[0].GetLinux().GetResources().GetCpu().GetCpus())
		if err != nil || len(last) != 1 || last[0].GetContainerId() != "c0" || got.Size() != step.want {
			t.Fatalf("%s: update %v, want c0 on %d cpus", step.name, last, step.want)
		}
	}
}

func TestKubeletConflictMessage(t *testing.T) {
	cfg := pinConfig(t)
	if err := os.WriteFile(cfg.KubeletCPUManagerState, []byte(`{"policyName":"static"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	reason := kubeletConflict(cfg)
	for _, want := range []string{"static", cfg.KubeletCPUManagerState, "allowKubeletStaticCPUManager"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q does not name %q", reason, want)
		}
	}
	cfg.AllowKubeletStaticCPUManager = true
	if reason := kubeletConflict(cfg); reason != "" {
		t.Errorf("allowed: reason %q", reason)
	}
}
