package cpumanager

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology/topologytest"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
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

// TestSnapshotLivePods: a pod whose containers all exited (a stopped
// sandbox the runtime still lists) or that has none yet is left out of the
// rebuild, so it holds no bubble; a pod with a created or running
// container is kept.
func TestSnapshotLivePods(t *testing.T) {
	budget := &api.LinuxPodSandbox{PodResources: &api.LinuxResources{
		Cpu:    &api.LinuxCPU{Quota: api.Int64(200000), Period: api.UInt64(100000), Shares: api.UInt64(2048)},
		Memory: &api.LinuxMemory{Limit: api.Int64(1 << 30)},
	}}
	pods := []*api.PodSandbox{
		{Id: "running", Name: "running", Namespace: "default", Linux: budget},
		{Id: "created", Name: "created", Namespace: "default", Linux: budget},
		{Id: "stopped", Name: "stopped", Namespace: "default", Linux: budget},
		{Id: "empty", Name: "empty", Namespace: "default", Linux: budget},
	}
	ctr := func(id, pod string, st api.ContainerState) *api.Container {
		return &api.Container{Id: id, PodSandboxId: pod, Name: id, State: st, Linux: &api.LinuxContainer{}}
	}
	ctrs := []*api.Container{
		ctr("r", "running", api.ContainerState_CONTAINER_RUNNING),
		ctr("c", "created", api.ContainerState_CONTAINER_CREATED),
		ctr("s", "stopped", api.ContainerState_CONTAINER_STOPPED),
	}
	specs, states := snapshot(slog.New(slog.DiscardHandler), pods, ctrs)
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.ID)
	}
	if len(ids) != 2 || ids[0] != "running" || ids[1] != "created" {
		t.Errorf("pods kept %v, want [running created]", ids)
	}
	if len(states) != 2 {
		t.Errorf("containers kept %d, want 2 (the stopped one holds nothing)", len(states))
	}
}

// TestSnapshotStampFromPod: a stamp on a container whose pod carries the
// stamp key may be the pod author's, copied by the runtime (as CRI-O
// copies every pod annotation): it is ignored, and said so.
func TestSnapshotStampFromPod(t *testing.T) {
	const genuine = "v=1;pool=exclusive;bubble=;cpus=2;mems=0"
	tests := []struct {
		name   string
		podAnn map[string]string
		want   string
	}{
		{name: "cgdelegate's stamp", want: genuine},
		{name: "pod carries the stamp", podAnn: map[string]string{policy.StampAnnotation: genuine}, want: ""},
		{name: "pod carries an empty stamp", podAnn: map[string]string{policy.StampAnnotation: ""}, want: ""},
		{name: "pod carries other annotations", podAnn: map[string]string{"lifecycle.cgdelegate.io/container.c": "init"}, want: genuine},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &api.PodSandbox{Id: "p", Name: "p", Namespace: "default", Annotations: tc.podAnn}
			ctr := &api.Container{
				Id: "c", PodSandboxId: "p", Name: "c", State: api.ContainerState_CONTAINER_RUNNING,
				Annotations: map[string]string{policy.StampAnnotation: genuine}, Linux: &api.LinuxContainer{},
			}
			var logged bytes.Buffer
			_, states := snapshot(slog.New(slog.NewTextHandler(&logged, nil)), []*api.PodSandbox{pod}, []*api.Container{ctr})
			if len(states) != 1 || states[0].Stamp != tc.want {
				t.Fatalf("states %+v, want the stamp %q", states, tc.want)
			}
			if said := strings.Contains(logged.String(), "its stamp is ignored"); said != (tc.want == "") {
				t.Errorf("log %q: said the stamp was ignored %v, want %v", logged.String(), said, tc.want == "")
			}
		})
	}
}

func TestUpdates(t *testing.T) {
	as := []policy.Assignment{
		{ContainerID: "a", CPUs: cpuset.New(0, 1), Mems: cpuset.New(0)},
		{ContainerID: "b", Pool: policy.PoolExclusive, CPUs: cpuset.New(2), Mems: cpuset.New(0)},
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
	// A repair out of an exclusive slice puts the quota back.
	r := Updates([]policy.Assignment{{ContainerID: "c", Pool: policy.PoolPodShared, CPUs: cpuset.New(3), Mems: cpuset.New(0), RestoreQuota: 150000}})
	if cpu := r[0].GetLinux().GetResources().GetCpu(); cpu.GetQuota().GetValue() != 150000 || cpu.GetPeriod().GetValue() != 100000 {
		t.Errorf("restored update = %v, want quota 150000 period 100000", cpu)
	}
}

// TestContainerSpecPodLimits: the exact CRI values the kubelet sends for a
// container without resources in a pod with spec.resources cpu 2, memory
// 256Mi (see internal/cpumanager/budget) give a spec without a CPU request that is not
// exclusive, so the policy puts it in the pod shared pool.
func TestContainerSpecPodLimits(t *testing.T) {
	vals := func(shares uint64, quota, mem int64) *api.LinuxResources {
		return &api.LinuxResources{
			Cpu:    &api.LinuxCPU{Shares: api.UInt64(shares), Quota: api.Int64(quota), Period: api.UInt64(100000)},
			Memory: &api.LinuxMemory{Limit: api.Int64(mem)},
		}
	}
	pod := &api.PodSandbox{Id: "p", Linux: &api.LinuxPodSandbox{PodResources: vals(2048, 200000, 256<<20)}}
	ctr := func(name string, r *api.LinuxResources) *api.Container {
		return &api.Container{Id: name, PodSandboxId: "p", Name: name, Linux: &api.LinuxContainer{Resources: r, OomScoreAdj: api.Int(-997)}}
	}
	tests := []struct {
		name      string
		r         *api.LinuxResources
		podLimits bool
		request   int64
		exclusive int
	}{
		{"no resources of its own", vals(2048, 200000, 256<<20), true, 0, 0},
		{"guaranteed 1 cpu", vals(1024, 100000, 64<<20), false, 1000, 1},
		{"request 500m", vals(512, 200000, 256<<20), false, 500, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := containerSpec(pod, ctr("c", tc.r))
			if err != nil {
				t.Fatal(err)
			}
			res := spec.Resources
			if res.PodLimits != tc.podLimits || res.CPURequest != tc.request || res.ExclusiveCPUs() != tc.exclusive {
				t.Errorf("resources %+v; want podLimits=%v request=%dm exclusive=%d", res, tc.podLimits, tc.request, tc.exclusive)
			}
		})
	}
}

// TestRecheckKubelet: the kubelet state is read again only when its file
// changed; static stops pinning, an unreadable file changes nothing and is
// read again, allowKubeletStaticCPUManager ignores the file.
func TestRecheckKubelet(t *testing.T) {
	host := fakehost.New(t)
	if err := host.InstallSysfs(topologytest.DualSocketHT().Tree().FS()); err != nil {
		t.Fatal(err)
	}
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	const (
		none   = `{"policyName":"none"}`
		static = `{"policyName":"static","defaultCpuSet":"0-15"}`
	)
	// step is one content of the file ("" removes it), whether the status
	// changes and whether pinning is active after it.
	type step struct {
		data    string
		changed bool
		active  bool
	}
	tests := []struct {
		name  string
		allow bool
		steps []step
	}{
		{name: "static stops, none keeps it stopped", steps: []step{{none, false, true}, {static, true, false}, {static, false, false}, {none, true, false}, {static, true, false}}},
		{name: "unreadable changes nothing", steps: []step{{`{"policyName":`, false, true}, {`{"policyName":`, false, true}, {"", false, true}, {static, true, false}}},
		{name: "allowed static is ignored", allow: true, steps: []step{{static, false, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := host.Config()
			cfg.CPUPinning = true
			cfg.AllowKubeletStaticCPUManager = tc.allow
			cfg.KubeletCPUManagerState = filepath.Join(t.TempDir(), "cpu_manager_state")
			write(cfg.KubeletCPUManagerState, none)
			log := slog.New(slog.DiscardHandler)
			p := New(cfg, log)
			if !p.Active() {
				t.Fatalf("not active: %+v", p.Status())
			}
			for i, s := range tc.steps {
				if s.data == "" {
					if err := os.Remove(cfg.KubeletCPUManagerState); err != nil {
						t.Fatal(err)
					}
				} else {
					write(cfg.KubeletCPUManagerState, s.data)
				}
				if got := p.RecheckKubelet(log); got != s.changed {
					t.Fatalf("step %d: changed = %v, want %v", i, got, s.changed)
				}
				if p.Active() != s.active || p.Suspended() == s.active {
					t.Fatalf("step %d: active = %v suspended = %v, want active %v", i, p.Active(), p.Suspended(), s.active)
				}
			}
		})
	}
	if (*Manager)(nil).RecheckKubelet(slog.New(slog.DiscardHandler)) {
		t.Error("a nil Manager changed")
	}
}
