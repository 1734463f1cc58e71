package nri

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology/topologytest"
)

func pinConfig(t testing.TB) config.Config {
	t.Helper()
	c := testConfig(t)
	c.CPUPinning = true
	c.SysfsRoot = t.TempDir()
	if err := topologytest.DualSocketHT().Tree().Write(c.SysfsRoot); err != nil {
		t.Fatal(err)
	}
	c.KubeletCPUManagerState = filepath.Join(t.TempDir(), "cpu_manager_state")
	return c
}

func TestConfigureEvents(t *testing.T) {
	// RemovePodSandbox is always subscribed (the pod bounds cache forgets
	// the pod); these come only with active pinning.
	pinEvents := []api.Event{
		api.Event_RUN_POD_SANDBOX, api.Event_STOP_POD_SANDBOX, api.Event_STOP_CONTAINER, api.Event_REMOVE_CONTAINER,
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
			r := advert.New(p, nil).Report()
			switch {
			case !cfg.CPUPinning && r.Pinning != nil:
				t.Errorf("pinning off but status has %+v", r.Pinning)
			case cfg.CPUPinning && (r.Pinning == nil || r.Pinning.Active != tc.wantPin || (r.Pinning.Reason == "") == !tc.wantPin):
				t.Errorf("status pinning = %+v, want active %v with a reason when inactive", r.Pinning, tc.wantPin)
			}
		})
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

// TestUpdatesFromEventsWithoutReturn: RunPodSandbox, StopPodSandbox and
// RemovePodSandbox change the node shared pool but cannot return updates;
// they are sent after the handler returns, never from inside it. The
// container's cgroup has its new cpuset before the handler returns, while
// the runtime has applied nothing yet.
func TestUpdatesFromEventsWithoutReturn(t *testing.T) {
	cfg := pinConfig(t)
	p, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var runtimeLock sync.Mutex
	u := &blockingUpdater{runtimeLock: &runtimeLock}
	p.SetUpdater(u)
	ctx := context.Background()

	cgroup := filepath.Join(cfg.CgroupRoot, "kubepods/besteffort/podp0/c0")
	if err := os.MkdirAll(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	cgroupCPUs := func() int {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(cgroup, "cpuset.cpus"))
		if err != nil {
			t.Fatal(err)
		}
		set, err := cpuset.Parse(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		return set.Size()
	}
	budget := nodeSharedAndBudget(ctx, t, p)

	for _, step := range []struct {
		name  string
		event func() error
		want  int // cpus of c0 afterwards
	}{
		{"RunPodSandbox", func() error { return p.RunPodSandbox(ctx, budget) }, 12},
		{"RemovePodSandbox", func() error { return p.RemovePodSandbox(ctx, budget) }, 16},
		{"RunPodSandbox again", func() error { return p.RunPodSandbox(ctx, budget) }, 12},
		// The bubble is back at the stop, not at the removal.
		{"StopPodSandbox", func() error { return p.StopPodSandbox(ctx, budget) }, 16},
	} {
		runtimeLock.Lock() // the runtime is inside the event
		if err := step.event(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := cgroupCPUs(); got != step.want {
			t.Errorf("%s: c0's cgroup has %d cpus when the handler returned, want %d", step.name, got, step.want)
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

// TestStopUpdates: after StopUpdates an event that changes the node shared
// pool sends nothing, and WaitUpdates returns at once.
func TestStopUpdates(t *testing.T) {
	tests := []struct {
		name    string
		stop    bool
		batches int
	}{
		{name: "running", stop: false, batches: 1},
		{name: "stopped", stop: true, batches: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(pinConfig(t), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			u := &blockingUpdater{runtimeLock: &sync.Mutex{}}
			p.SetUpdater(u)
			ctx := context.Background()
			plain := &api.PodSandbox{Id: "p0", Name: "plain", Namespace: "default"}
			ctr := &api.Container{Id: "c0", PodSandboxId: "p0", Name: "app", Linux: &api.LinuxContainer{}}
			if _, _, err := p.CreateContainer(ctx, plain, ctr); err != nil {
				t.Fatal(err)
			}
			if tc.stop {
				if err := p.StopUpdates(ctx); err != nil {
					t.Fatal(err)
				}
			}
			budget := &api.PodSandbox{Id: "p1", Name: "budget", Namespace: "default", Linux: &api.LinuxPodSandbox{
				PodResources: &api.LinuxResources{
					Cpu:    &api.LinuxCPU{Quota: api.Int64(400000), Period: api.UInt64(100000), Shares: api.UInt64(4096)},
					Memory: &api.LinuxMemory{Limit: api.Int64(1 << 30)},
				},
			}}
			if err := p.RunPodSandbox(ctx, budget); err != nil {
				t.Fatal(err)
			}
			p.WaitUpdates()
			u.mu.Lock()
			defer u.mu.Unlock()
			if len(u.batches) != tc.batches {
				t.Fatalf("%d batches sent, want %d: %v", len(u.batches), tc.batches, u.batches)
			}
		})
	}
}

// TestSynchronizeRepairsAsync: a container whose cpuset disagrees with its
// assignment is repaired in its cgroup before Synchronize returns, and in
// the runtime's record by UpdateContainers afterwards; Synchronize's
// answer carries no update (the runtime would apply those under its NRI
// lock, one at a time, before any pod could start).
func TestSynchronizeRepairsAsync(t *testing.T) {
	cfg := pinConfig(t)
	p, err := New(cfg, slog.New(slog.DiscardHandler), WithUpdateHold(0))
	if err != nil {
		t.Fatal(err)
	}
	u := &blockingUpdater{runtimeLock: &sync.Mutex{}}
	p.SetUpdater(u)
	cgroup := filepath.Join(cfg.CgroupRoot, "kubepods/besteffort/podp0/c0")
	if err := os.MkdirAll(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "p0", Name: "plain", Namespace: "default", Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/besteffort/podp0"}}
	ctr := &api.Container{
		Id: "c0", PodSandboxId: "p0", Name: "app", State: api.ContainerState_CONTAINER_RUNNING,
		Linux: &api.LinuxContainer{
			CgroupsPath: "/kubepods/besteffort/podp0/c0",
			Resources:   &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: "0-1", Mems: "0"}},
		},
	}
	upd, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, []*api.Container{ctr})
	if err != nil {
		t.Fatal(err)
	}
	if len(upd) != 0 {
		t.Errorf("Synchronize answered %d updates, want none", len(upd))
	}
	data, err := os.ReadFile(filepath.Join(cgroup, "cpuset.cpus"))
	if err != nil {
		t.Fatalf("the cgroup was not repaired before Synchronize returned: %v", err)
	}
	want, ok := p.pin.Load().Assignment("c0")
	if !ok || strings.TrimSpace(string(data)) != want.CPUs.String() || want.CPUs.Size() <= 2 {
		t.Fatalf("cgroup cpuset.cpus %q, want the node shared pool %s", data, want.CPUs)
	}
	p.WaitUpdates()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.batches) != 1 || len(u.batches[0]) != 1 || u.batches[0][0].GetContainerId() != "c0" ||
		u.batches[0][0].GetLinux().GetResources().GetCpu().GetCpus() != want.CPUs.String() {
		t.Fatalf("UpdateContainers calls %v, want one repairing c0 to %s", u.batches, want.CPUs)
	}
}

// TestUpdatesHeldByTheRuntime: a node-shared container narrowed by a new
// pod's bubble and widened again before its update went out gets no
// update (the runtime still holds its creation cpuset); one narrowed for
// good gets one.
func TestUpdatesHeldByTheRuntime(t *testing.T) {
	cfg := pinConfig(t)
	p, err := New(cfg, slog.New(slog.DiscardHandler), WithUpdateHold(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	budget := nodeSharedAndBudget(ctx, t, p)
	// Narrowed and widened while no runtime connection sends anything.
	if err := p.RunPodSandbox(ctx, budget); err != nil {
		t.Fatal(err)
	}
	if err := p.StopPodSandbox(ctx, budget); err != nil {
		t.Fatal(err)
	}
	u := &blockingUpdater{runtimeLock: &sync.Mutex{}}
	p.SetUpdater(u)
	p.WaitUpdates()
	u.mu.Lock()
	if len(u.batches) != 0 {
		t.Errorf("UpdateContainers calls %v, want none: c0 is back on its creation cpuset", u.batches)
	}
	u.mu.Unlock()

	budget.Id = "p2"
	if err := p.RunPodSandbox(ctx, budget); err != nil {
		t.Fatal(err)
	}
	p.WaitUpdates()
	u.mu.Lock()
	defer u.mu.Unlock()
	want, _ := p.pin.Load().Assignment("c0")
	if len(u.batches) != 1 || u.batches[0][0].GetContainerId() != "c0" || u.batches[0][0].GetLinux().GetResources().GetCpu().GetCpus() != want.CPUs.String() {
		t.Fatalf("UpdateContainers calls %v, want one narrowing c0 to %s", u.batches, want.CPUs)
	}
}

// nodeSharedAndBudget runs pod p0 with node-shared container c0 (cgroup
// /kubepods/besteffort/podp0/c0) through p, and returns pod p1, with a
// 4-CPU budget, not yet run.
func nodeSharedAndBudget(ctx context.Context, t *testing.T, p *Plugin) *api.PodSandbox {
	t.Helper()
	plain := &api.PodSandbox{Id: "p0", Name: "plain", Namespace: "default"}
	ctr := &api.Container{Id: "c0", PodSandboxId: "p0", Name: "app", Linux: &api.LinuxContainer{CgroupsPath: "/kubepods/besteffort/podp0/c0"}}
	if err := p.RunPodSandbox(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.CreateContainer(ctx, plain, ctr); err != nil {
		t.Fatal(err)
	}
	return &api.PodSandbox{Id: "p1", Name: "budget", Namespace: "default", Linux: &api.LinuxPodSandbox{
		PodResources: &api.LinuxResources{
			Cpu:    &api.LinuxCPU{Quota: api.Int64(400000), Period: api.UInt64(100000), Shares: api.UInt64(4096)},
			Memory: &api.LinuxMemory{Limit: api.Int64(1 << 30)},
		},
	}}
}
