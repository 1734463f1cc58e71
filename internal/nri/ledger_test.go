package nri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/spec"
)

var writableAnn = map[string]string{annotations.WritableCgroups.Name: "true"}

// budgetPod makes pod n's cgroup (unbounded, as the kubelet leaves it) and
// returns the pod.
func budgetPod(t testing.TB, h *fakehost.Host, n int, ann map[string]string) *api.PodSandbox {
	t.Helper()
	parent := fmt.Sprintf("/kubepods/burstable/pod%d", n)
	if err := h.AddPodCgroup(parent); err != nil {
		t.Fatal(err)
	}
	return &api.PodSandbox{
		Id: fmt.Sprintf("p%d", n), Name: fmt.Sprintf("web-%d", n), Namespace: "team-a", Annotations: ann,
		Linux: &api.LinuxPodSandbox{CgroupParent: parent},
	}
}

// budgetCtr is container name of pod, with its cgroup path below the pod's.
func budgetCtr(pod *api.PodSandbox, name string) *api.Container {
	return &api.Container{
		Id: pod.GetId() + "-" + name, Name: name, PodSandboxId: pod.GetId(),
		Linux: &api.LinuxContainer{
			Namespaces:  []*api.LinuxNamespace{{Type: "cgroup"}},
			CgroupsPath: pod.GetLinux().GetCgroupParent() + "/" + pod.GetId() + "-" + name,
		},
	}
}

func budgetPlugin(t testing.TB, h *fakehost.Host, budget int, log *slog.Logger) *Plugin {
	t.Helper()
	cfg := h.Config()
	cfg.NodeMaxDelegatedCgroups = budget
	p, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNodeBudget plays a node filling up with writable pods: each reserves
// its cgroup.max.descendants (250 by default) of nodeMaxDelegatedCgroups,
// and the pod that would take the sum over it is refused with the budget,
// what is reserved and by how many pods, and what it asks, while a pod that
// asked for nothing, and more containers of an admitted pod, still pass.
func TestNodeBudget(t *testing.T) {
	h := fakehost.New(t)
	p := budgetPlugin(t, h, 600, nil)
	ctx := context.Background()
	pods := make([]*api.PodSandbox, 4)
	for i := range pods {
		pods[i] = budgetPod(t, h, i+1, writableAnn)
	}
	for _, pod := range pods[:2] {
		if _, _, err := p.CreateContainer(ctx, pod, budgetCtr(pod, "app")); err != nil {
			t.Fatalf("pod %s within the budget: %v", pod.GetName(), err)
		}
	}
	_, _, err := p.CreateContainer(ctx, pods[2], budgetCtr(pods[2], "app"))
	if !errors.Is(err, ErrNodeBudget) || refusal.CauseOf(err) != refusal.NodeBudget {
		t.Fatalf("third writable pod: %v, want a node_budget refusal", err)
	}
	for _, want := range []string{"team-a/web-3 need 250", "nodeMaxDelegatedCgroups=600", "500 are reserved by 2 writable pods", "100 left", annotations.MaxDescendants.Name} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if got, _ := h.ReadPodFile(pods[2].GetLinux().GetCgroupParent(), host.FileMaxDescendants); got != "max" {
		t.Errorf("the refused pod's cgroup got bounds %q: partial state", got)
	}
	if _, _, err := p.CreateContainer(ctx, pods[0], budgetCtr(pods[0], "sidecar")); err != nil {
		t.Errorf("a second container of an admitted pod: %v", err)
	}
	plain := budgetPod(t, h, 9, nil)
	if adj, _, err := p.CreateContainer(ctx, plain, budgetCtr(plain, "app")); err != nil || adj != nil {
		t.Errorf("a pod that asked for nothing: %v, %v; want it unchanged", adj, err)
	}
	small := budgetPod(t, h, 5, map[string]string{annotations.WritableCgroups.Name: "true", annotations.MaxDescendants.Name: "100"})
	if _, _, err := p.CreateContainer(ctx, small, budgetCtr(small, "app")); err != nil {
		t.Errorf("a pod asking for what is left (100): %v", err)
	}
	if d := p.Delegation(); d.Reserved != 600 || len(d.Pods) != 3 || d.Budget != 600 {
		t.Errorf("ledger: reserved %d by %d pods of %d, want 600 by 3 of 600", d.Reserved, len(d.Pods), d.Budget)
	}
	if err := p.RemovePodSandbox(ctx, pods[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.CreateContainer(ctx, pods[2], budgetCtr(pods[2], "app")); err != nil {
		t.Errorf("after a writable pod's removal: %v", err)
	}

	off := budgetPlugin(t, h, 0, nil)
	for _, pod := range pods {
		if _, _, err := off.CreateContainer(ctx, pod, budgetCtr(pod, "app")); err != nil {
			t.Errorf("nodeMaxDelegatedCgroups: 0 is no budget: %v", err)
		}
	}
}

// TestNodeBudgetConcurrent plays writable pods created at once: no more of
// them pass than the budget holds.
func TestNodeBudgetConcurrent(t *testing.T) {
	h := fakehost.New(t)
	p := budgetPlugin(t, h, 5*config.DefaultMaxDescendants, nil)
	const n = 20
	pods := make([]*api.PodSandbox, n)
	for i := range pods {
		pods[i] = budgetPod(t, h, i, writableAnn)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, pod := range pods {
		wg.Go(func() { _, _, errs[i] = p.CreateContainer(context.Background(), pod, budgetCtr(pod, "app")) })
	}
	wg.Wait()
	passed := 0
	for _, err := range errs {
		switch {
		case err == nil:
			passed++
		case !errors.Is(err, ErrNodeBudget):
			t.Errorf("refused for another reason: %v", err)
		}
	}
	if passed != 5 {
		t.Fatalf("%d of %d concurrent writable pods passed a budget for 5", passed, n)
	}
}

// TestNodeBudgetCountsDying plays a container that leaves dying cgroups
// behind (mkdir, charge memory, rmdir): cgroup.max.descendants does not
// count them, the node budget does, from the last look.
func TestNodeBudgetCountsDying(t *testing.T) {
	h := fakehost.New(t)
	p := budgetPlugin(t, h, 600, nil)
	ctx := context.Background()
	a, b := budgetPod(t, h, 1, writableAnn), budgetPod(t, h, 2, writableAnn)
	if _, _, err := p.CreateContainer(ctx, a, budgetCtr(a, "app")); err != nil {
		t.Fatal(err)
	}
	rel, _ := host.PodPath(a.GetLinux().GetCgroupParent())
	if err := h.WriteFile(h.Path(rel+"/"+host.FileStat), "nr_descendants 3\nnr_dying_descendants 200\n"); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile(h.Path(host.FileStat), "nr_descendants 80\nnr_dying_descendants 310\n"); err != nil {
		t.Fatal(err)
	}
	d := p.Delegation()
	if d.DyingInPods != 200 || d.Node == nil || d.Node.DyingDescendants != 310 || d.Pods[0].Live != 3 {
		t.Fatalf("look: %+v, want 200 dying in the writable pods, 310 on the node, 3 live", d)
	}
	_, _, err := p.CreateContainer(ctx, b, budgetCtr(b, "app"))
	if !errors.Is(err, ErrNodeBudget) || !strings.Contains(err.Error(), "200 dying cgroups remain") {
		t.Fatalf("a pod past the budget with the dying cgroups counted: %v", err)
	}
}

// TestNodeBudgetRebuiltAtSynchronize: a restarted plugin learns the
// writable pods from the runtime's containers and their pod cgroups'
// bounds, and does not admit past the budget what it admitted before.
func TestNodeBudgetRebuiltAtSynchronize(t *testing.T) {
	h := fakehost.New(t)
	ctx := context.Background()
	var rw api.Mount
	spec.SetWritableMount(&rw)
	a, b, c := budgetPod(t, h, 1, writableAnn), budgetPod(t, h, 2, writableAnn), budgetPod(t, h, 3, writableAnn)
	if err := h.SetPodBounds(a.GetLinux().GetCgroupParent(), "250", "50"); err != nil {
		t.Fatal(err)
	}
	if err := h.SetPodBounds(b.GetLinux().GetCgroupParent(), "100", "50"); err != nil {
		t.Fatal(err)
	}
	running := func(pod *api.PodSandbox, name string, state api.ContainerState, mounts ...*api.Mount) *api.Container {
		ctr := budgetCtr(pod, name)
		ctr.State, ctr.Mounts = state, mounts
		return ctr
	}
	ro := &api.Mount{Destination: spec.CgroupMountPoint, Type: "cgroup", Source: "cgroup", Options: []string{"ro"}}
	ctrs := []*api.Container{
		running(a, "app", api.ContainerState_CONTAINER_RUNNING, &rw),
		running(b, "app", api.ContainerState_CONTAINER_RUNNING, &rw),
		running(b, "old", api.ContainerState_CONTAINER_STOPPED, &rw),
		running(c, "app", api.ContainerState_CONTAINER_RUNNING, ro),
	}
	p := budgetPlugin(t, h, 500, nil)
	if _, err := p.Synchronize(ctx, []*api.PodSandbox{a, b, c}, ctrs); err != nil {
		t.Fatal(err)
	}
	d := p.Delegation()
	if d.Reserved != 350 || len(d.Pods) != 2 {
		t.Fatalf("rebuilt ledger: %d reserved by %d pods, want 350 by 2", d.Reserved, len(d.Pods))
	}
	if _, _, err := p.CreateContainer(ctx, c, budgetCtr(c, "next")); !errors.Is(err, ErrNodeBudget) {
		t.Fatalf("a new writable pod after the restart: %v, want the budget's refusal", err)
	}
}

// TestUnsafeAfterStart plays a remount without nsdelegate while a writable
// container runs: it is listed as unsafe, logged once as an error with its
// pod and container, and no longer listed once it stopped or the host is
// safe again.
func TestUnsafeAfterStart(t *testing.T) {
	h := fakehost.New(t)
	var logs bytes.Buffer
	p := budgetPlugin(t, h, 0, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := context.Background()
	pod := budgetPod(t, h, 1, writableAnn)
	ctr, other := budgetCtr(pod, "app"), budgetCtr(pod, "never-started")
	for _, c := range []*api.Container{ctr, other} {
		if _, _, err := p.CreateContainer(ctx, pod, c); err != nil {
			t.Fatal(err)
		}
	}
	ctrCgroup := h.Path(ctr.GetLinux().GetCgroupsPath())
	if err := os.MkdirAll(ctrCgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	if d := p.Delegation(); len(d.Unsafe) != 0 || len(d.Pods) != 1 || len(d.Pods[0].Containers) != 2 {
		t.Fatalf("safe host: %+v", d)
	}
	if err := h.Remount(fakehost.NoNsdelegate); err != nil {
		t.Fatal(err)
	}
	d := p.Delegation()
	if len(d.Unsafe) != 1 || d.Unsafe[0].Container != "app" || d.Unsafe[0].Pod != "team-a/web-1" {
		t.Fatalf("unsafe host: unsafe containers %+v, want team-a/web-1 app", d.Unsafe)
	}
	p.Delegation()
	if n := strings.Count(logs.String(), "writable container runs on a host no longer safe"); n != 1 {
		t.Errorf("%d error logs for one unsafe container, want 1:\n%s", n, logs.String())
	}
	for _, want := range []string{"level=ERROR", "pod=team-a/web-1", "container=app", "nsdelegate"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs.String())
		}
	}
	if err := os.Remove(ctrCgroup); err != nil {
		t.Fatal(err)
	}
	if d := p.Delegation(); len(d.Unsafe) != 0 || len(d.Pods[0].Containers) != 1 {
		t.Fatalf("after the container stopped: %+v", d)
	}
	if err := h.Remount(fakehost.Nsdelegate); err != nil {
		t.Fatal(err)
	}
	if d := p.Delegation(); len(d.Unsafe) != 0 {
		t.Fatalf("safe again: %+v", d.Unsafe)
	}
}
