package nri

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
)

// posted collects the Events the plugin posts.
type posted struct {
	mu     sync.Mutex
	events []advert.PodEvent
}

func (p *posted) post(e advert.PodEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, e)
}

func (p *posted) take() []advert.PodEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.events
	p.events = nil
	return out
}

// checkEvents checks got against want: one Event per want entry, with the
// pod, container and reason, and a message that says each of says.
func checkEvents(t *testing.T, got []advert.PodEvent, want []advert.PodEvent, says ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("posted %+v, want %d Events like %+v", got, len(want), want)
	}
	for i, w := range want {
		g := got[i]
		if g.Namespace != w.Namespace || g.Name != w.Name || g.UID != w.UID || g.Container != w.Container || g.Reason != w.Reason || g.Action == "" {
			t.Errorf("posted %+v, want %+v", g, w)
		}
		for _, s := range says {
			if !strings.Contains(g.Message, s) {
				t.Errorf("message %q does not say %q", g.Message, s)
			}
		}
	}
}

// auditCtr is a running container of pod with the runtime's /sys/fs/cgroup
// mount, read-write when rw.
func auditCtr(pod *api.PodSandbox, rw bool) *api.Container {
	opt := "ro"
	if rw {
		opt = "rw"
	}
	return &api.Container{
		Id: pod.GetId() + "-app", PodSandboxId: pod.GetId(), Name: "app", State: api.ContainerState_CONTAINER_RUNNING,
		Mounts: []*api.Mount{
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", opt}},
		},
		Linux: &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{{Type: "cgroup"}}},
	}
}

// TestEventMissed: a container found at Synchronize running without the
// change it asked for (created while the plugin was not connected, as
// after an NRI request timeout) gets a CgroupDelegationMissed Event on its
// pod; a pod that asked for nothing never gets one, even where the audit
// logs it (a runtime-writable container the guard never checked).
func TestEventMissed(t *testing.T) {
	w := annotations.WritableCgroups.Name
	tests := []struct {
		name string
		ann  map[string]string
		rw   bool
		want bool
		says []string
	}{
		{name: "writable asked, runs read-only", ann: map[string]string{w: "true"}, want: true, says: []string{"asked for writable", "read-only", "not connected"}},
		{name: "read-only asked, runs runtime-writable", ann: map[string]string{w: "ReadOnly"}, rw: true, want: true, says: []string{"asked for read-only"}},
		{name: "nothing asked, runtime-writable, unchecked by the guard", rw: true},
		{name: "nothing asked", ann: map[string]string{"other": "x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := fakehost.New(t)
			got := &posted{}
			p, err := New(h.Config(), slog.New(slog.DiscardHandler), WithEvents(got.post))
			if err != nil {
				t.Fatal(err)
			}
			pod := budgetPod(t, h, 1, tc.ann)
			pod.Uid = "uid-1"
			if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, []*api.Container{auditCtr(pod, tc.rw)}); err != nil {
				t.Fatal(err)
			}
			var want []advert.PodEvent
			if tc.want {
				want = []advert.PodEvent{{Namespace: "team-a", Name: "web-1", UID: "uid-1", Container: "app", Reason: advert.ReasonDelegationMissed}}
			}
			checkEvents(t, got.take(), want, tc.says...)
		})
	}
}

// TestEventHostUnsafe: a writable container running when nsdelegate is
// removed gets one HostUnsafe Event on its pod (not one per look); a pod
// that asked for nothing, running beside it, gets none.
func TestEventHostUnsafe(t *testing.T) {
	h := fakehost.New(t)
	got := &posted{}
	p, err := New(h.Config(), slog.New(slog.DiscardHandler), WithEvents(got.post))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pod, plain := budgetPod(t, h, 1, writableAnn), budgetPod(t, h, 2, nil)
	pod.Uid = "uid-1"
	for _, pc := range []struct {
		pod *api.PodSandbox
		ctr *api.Container
	}{{pod, budgetCtr(pod, "app")}, {plain, budgetCtr(plain, "app")}} {
		if _, _, err := p.CreateContainer(ctx, pc.pod, pc.ctr); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(h.Path(pc.ctr.GetLinux().GetCgroupsPath()), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p.Delegation()
	if e := got.take(); len(e) != 0 {
		t.Fatalf("safe host: posted %+v", e)
	}
	if err := h.Remount(fakehost.NoNsdelegate); err != nil {
		t.Fatal(err)
	}
	p.Delegation()
	p.Delegation()
	checkEvents(t, got.take(), []advert.PodEvent{{Namespace: "team-a", Name: "web-1", UID: "uid-1", Container: "app", Reason: advert.ReasonHostUnsafe}},
		"no longer safe", "nsdelegate")
}

// TestEventPinningGivenUp: an update given up for a container pinned in its
// pod's bubble gets a CPUPinningUpdateFailed Event on its pod; one for a
// container of the node shared pool (its pod asked for nothing) does not,
// nor one for a pod removed since.
func TestEventPinningGivenUp(t *testing.T) {
	ctx := context.Background()
	got := &posted{}
	p, err := New(pinConfig(t), slog.New(slog.DiscardHandler), WithEvents(got.post))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Configure(ctx, "", "containerd", "v2"); err != nil {
		t.Fatal(err)
	}
	budget := nodeSharedAndBudget(ctx, t, p)
	budget.Uid = "uid-budget"
	if err := p.RunPodSandbox(ctx, budget); err != nil {
		t.Fatal(err)
	}
	ctr := &api.Container{Id: "c1", PodSandboxId: "p1", Name: "worker", Linux: &api.LinuxContainer{CgroupsPath: "/kubepods/podp1/c1"}}
	if _, _, err := p.CreateContainer(ctx, budget, ctr); err != nil {
		t.Fatal(err)
	}
	pn := p.pin.Load()
	pinned, ok := pn.Assignment("c1")
	if !ok {
		t.Fatal("c1 has no assignment")
	}
	shared, ok := pn.Assignment("c0")
	if !ok {
		t.Fatal("c0 has no assignment")
	}

	p.gaveUp(shared, 10)
	if e := got.take(); len(e) != 0 {
		t.Fatalf("node shared pool container: posted %+v", e)
	}
	p.gaveUp(pinned, 10)
	checkEvents(t, got.take(), []advert.PodEvent{{Namespace: "default", Name: "budget", UID: "uid-budget", Container: "worker", Reason: advert.ReasonPinningUpdateFailed}},
		"failed all 10 updates", string(pinned.Pool), pinned.CPUs.String())

	// Synchronize rebuilds what is known of the pinned pods.
	plain := &api.PodSandbox{Id: "p0", Name: "plain", Namespace: "default"}
	c0 := &api.Container{Id: "c0", PodSandboxId: "p0", Name: "app", State: api.ContainerState_CONTAINER_RUNNING, Linux: &api.LinuxContainer{CgroupsPath: "/kubepods/besteffort/podp0/c0"}}
	ctr.State = api.ContainerState_CONTAINER_RUNNING
	if _, err := p.Synchronize(ctx, []*api.PodSandbox{plain, budget}, []*api.Container{c0, ctr}); err != nil {
		t.Fatal(err)
	}
	if pinned, ok = p.pin.Load().Assignment("c1"); !ok {
		t.Fatal("c1 has no assignment after Synchronize")
	}
	p.gaveUp(pinned, 10)
	if e := got.take(); len(e) != 1 || e[0].Container != "worker" {
		t.Fatalf("after Synchronize: posted %+v, want worker's Event", e)
	}

	if err := p.RemovePodSandbox(ctx, budget); err != nil {
		t.Fatal(err)
	}
	p.gaveUp(pinned, 10)
	if e := got.take(); len(e) != 0 {
		t.Fatalf("removed pod: posted %+v", e)
	}
}

// TestEventsOff: without WithEvents the plugin keeps nothing for them.
func TestEventsOff(t *testing.T) {
	p, err := New(pinConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.pinned != nil || p.opts.post != nil {
		t.Fatal("pinned pods kept without Events")
	}
}
