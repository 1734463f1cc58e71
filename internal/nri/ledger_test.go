package nri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// setStat writes the cgroup.stat of the cgroup at rel (the root: "/").
func setStat(t testing.TB, h *fakehost.Host, rel string, live, dying int) {
	t.Helper()
	if err := h.WriteFile(h.Path(rel+"/"+host.FileStat), fmt.Sprintf("nr_descendants %d\nnr_dying_descendants %d\n", live, dying)); err != nil {
		t.Fatal(err)
	}
}

// podRel is the pod cgroup of pod, relative to the cgroup root.
func podRel(t testing.TB, pod *api.PodSandbox) string {
	t.Helper()
	rel, err := host.PodPath(pod.GetLinux().GetCgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// TestNodeBudgetCountsDying plays a container that leaves dying cgroups
// behind (mkdir, charge memory, rmdir), which cgroup.max.descendants does
// not count: a writable pod's reservation holds its live and dying
// cgroups together, so its churn never refuses another tenant's pod while
// the node's real total is within the budget; the node's dying cgroups
// outside the writable pods (a removed churner's, other pods') count as
// they are, and so does what a pod made past its cap between two looks.
func TestNodeBudgetCountsDying(t *testing.T) {
	tests := []struct {
		name string
		// budget; the churner's live and dying cgroups; the node's dying
		// cgroups (the churner's included).
		budget, live, dying, nodeDying int
		// removed: the churner's pod is removed before the next pod.
		removed bool
		wantErr []string // nil: the next pod is admitted
		inUse   int
	}{
		{name: "churn within its own cap", budget: 600, live: 3, dying: 240, nodeDying: 240, inUse: 250},
		{name: "churn filling its cap", budget: 500, live: 3, dying: 247, nodeDying: 247, inUse: 250},
		{
			name: "churn past its cap between two looks", budget: 550, live: 3, dying: 300, nodeDying: 300, inUse: 303,
			wantErr: []string{"250 are reserved by 1 writable pods", "53 are held past those reservations", "(247 left)"},
		},
		{
			name: "dying cgroups elsewhere on the node", budget: 600, live: 3, dying: 10, nodeDying: 120, inUse: 360,
			wantErr: []string{"110 dying cgroups remain outside them", "(240 left)"},
		},
		{
			name: "a removed churner's dying cgroups", budget: 400, live: 3, dying: 240, nodeDying: 240, removed: true, inUse: 240,
			wantErr: []string{"0 are reserved by 0 writable pods", "240 dying cgroups remain outside them", "(160 left)"},
		},
		{name: "a removed churner's dying cgroups within the budget", budget: 500, live: 3, dying: 240, nodeDying: 240, removed: true, inUse: 240},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := fakehost.New(t)
			p := budgetPlugin(t, h, tc.budget, nil)
			ctx := context.Background()
			churn, next := budgetPod(t, h, 1, writableAnn), budgetPod(t, h, 2, writableAnn)
			churn.Namespace, next.Namespace = "team-churn", "team-b"
			if _, _, err := p.CreateContainer(ctx, churn, budgetCtr(churn, "app")); err != nil {
				t.Fatal(err)
			}
			setStat(t, h, podRel(t, churn), tc.live, tc.dying)
			setStat(t, h, "/", 80, tc.nodeDying)
			d := p.Delegation()
			if d.DyingInPods != tc.dying || d.Node == nil || d.Node.DyingDescendants != tc.nodeDying || d.Pods[0].Live != tc.live {
				t.Fatalf("look: %+v, want %d dying in the writable pods, %d on the node, %d live", d, tc.dying, tc.nodeDying, tc.live)
			}
			if tc.removed {
				if err := p.RemovePodSandbox(ctx, churn); err != nil {
					t.Fatal(err)
				}
			}
			p.writable.mu.Lock()
			inUse := p.writable.inUse()
			p.writable.mu.Unlock()
			if inUse != tc.inUse {
				t.Errorf("in use: %d, want %d", inUse, tc.inUse)
			}
			_, _, err := p.CreateContainer(ctx, next, budgetCtr(next, "app"))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("another tenant's pod with the node's real total within the budget: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNodeBudget) || refusal.CauseOf(err) != refusal.NodeBudget {
				t.Fatalf("another tenant's pod with the node's real total past the budget: %v, want a node_budget refusal", err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestChurnBound plays a pod that churns cgroups: its cgroup.max.descendants
// follows its cap less its dying cgroups at each tighten and look, down to
// 0 below its live cgroups (so the kernel refuses its own mkdir), and back
// up as they are freed, never above its cap (a kubelet's lower value
// included); a later container of the pod neither shrinks its reservation
// nor is told less than its cap, and the hook's limit stays the cap; a pod
// that asked for nothing is never written.
func TestChurnBound(t *testing.T) {
	h := fakehost.New(t)
	p := budgetPlugin(t, h, 0, nil)
	ctx := context.Background()
	churn := budgetPod(t, h, 1, writableAnn)
	low := budgetPod(t, h, 2, writableAnn)
	if err := h.SetPodBounds(low.GetLinux().GetCgroupParent(), "100", "max"); err != nil {
		t.Fatal(err)
	}
	plain := budgetPod(t, h, 3, nil)
	for _, pod := range []*api.PodSandbox{churn, low, plain} {
		if _, _, err := p.CreateContainer(ctx, pod, budgetCtr(pod, "app")); err != nil {
			t.Fatal(err)
		}
		setStat(t, h, podRel(t, pod), 1, 0)
	}
	bound := func(pod *api.PodSandbox) string {
		t.Helper()
		got, err := h.ReadPodFile(pod.GetLinux().GetCgroupParent(), host.FileMaxDescendants)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	steps := []struct {
		name             string
		look             func()
		live, dying      int
		want, wantLow    string
		wantLowReserved  int
		wantChurnReserve int
		// wantDelay: the next tighten comes sooner while dying cgroups grow.
		wantDelay time.Duration
	}{
		{name: "no dying cgroups", look: p.TightenBounds, live: 1, want: "250", wantLow: "100", wantDelay: TightenEvery},
		{name: "some dying", look: p.TightenBounds, live: 5, dying: 200, want: "50", wantLow: "0", wantDelay: TightenFast},
		{name: "at the cap", look: func() { p.Delegation() }, live: 5, dying: 245, want: "5", wantLow: "0", wantDelay: TightenFast},
		{name: "past the cap", look: p.TightenBounds, live: 5, dying: 300, want: "0", wantLow: "0", wantDelay: TightenFast},
		{name: "no longer churning", look: p.TightenBounds, live: 5, dying: 300, want: "0", wantLow: "0", wantDelay: TightenEvery},
		{name: "freed", look: p.TightenBounds, live: 5, dying: 20, want: "230", wantLow: "80", wantDelay: TightenEvery},
		{name: "all freed", look: func() { p.Delegation() }, live: 1, want: "250", wantLow: "100", wantDelay: TightenEvery},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			setStat(t, h, podRel(t, churn), st.live, st.dying)
			setStat(t, h, podRel(t, low), st.live, st.dying)
			st.look()
			if got := bound(churn); got != st.want {
				t.Errorf("churning pod's cgroup.max.descendants = %s, want %s", got, st.want)
			}
			if got := bound(low); got != st.wantLow {
				t.Errorf("pod with a kubelet's lower bound: cgroup.max.descendants = %s, want %s", got, st.wantLow)
			}
			if got := bound(plain); got != "max" {
				t.Errorf("a pod that asked for nothing got cgroup.max.descendants = %s", got)
			}
			if got := p.TightenDelay(); got != st.wantDelay {
				t.Errorf("next tighten in %v, want %v", got, st.wantDelay)
			}
		})
	}

	// A second container while the bound is down to 0: the reservation
	// stays the cap, the container is told the cap, and the hook checks
	// against the cap, which the bound in force is within.
	setStat(t, h, podRel(t, churn), 5, 300)
	p.TightenBounds()
	p.h.Load().bounds.Forget(podRel(t, churn)) // the pod bounds read again
	adj, _, err := p.CreateContainer(ctx, churn, budgetCtr(churn, "sidecar"))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Delegation(); d.Pods[0].Reserved != 250 || d.Pods[0].Bound != 0 || d.Reserved != 350 {
		t.Errorf("after a second container: pod reserves %d with bound %d, %d reserved in all; want 250, 0, 350", d.Pods[0].Reserved, d.Pods[0].Bound, d.Reserved)
	}
	env := map[string]string{}
	for _, kv := range adj.GetEnv() {
		env[kv.GetKey()] = kv.GetValue()
	}
	if got := env["CGDELEGATE_MAX_DESCENDANTS"]; got != "250" {
		t.Errorf("the second container is told its bound is %q, want its cap 250", got)
	}
	hookArgs := strings.Join(adj.GetHooks().GetCreateRuntime()[0].GetArgs(), " ")
	if !strings.Contains(hookArgs, "--max-descendants 250") {
		t.Errorf("hook args %q: want the cap, --max-descendants 250", hookArgs)
	}
	if err := p.h.Load().fs.CheckBounds(podRel(t, churn), host.Bounds{Descendants: 250, Depth: 50}); err != nil {
		t.Errorf("the hook's check of the lowered bound against the cap: %v", err)
	}

	// A reload lowers maxDescendants to 100: the pod's next container is
	// decided at 100, its hook checks 100, so the reservation follows,
	// and the bound never goes back above it once the dying are freed.
	cfg := p.Config()
	cfg.MaxDescendants = 100
	if err := p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	adj, _, err = p.CreateContainer(ctx, churn, budgetCtr(churn, "late"))
	if err != nil {
		t.Fatal(err)
	}
	setStat(t, h, podRel(t, churn), 5, 10)
	p.TightenBounds()
	if got := bound(churn); got != "90" {
		t.Errorf("after a reload to maxDescendants 100 and 10 dying: cgroup.max.descendants %s, want 90", got)
	}
	hookArgs = strings.Join(adj.GetHooks().GetCreateRuntime()[0].GetArgs(), " ")
	if !strings.Contains(hookArgs, "--max-descendants 100") {
		t.Errorf("hook args %q after the reload: want --max-descendants 100", hookArgs)
	}
	if err := p.h.Load().fs.CheckBounds(podRel(t, churn), host.Bounds{Descendants: 100, Depth: 50}); err != nil {
		t.Errorf("the new container's hook check: %v", err)
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

// TestNodeBudgetDyingAfterRestart: a restarted plugin reads the dying
// cgroups of the writable pods and of the node at Synchronize, before any
// look, and finds a churning pod's cap again from its lowered bound plus
// its dying cgroups, never above the pod's decided cap.
func TestNodeBudgetDyingAfterRestart(t *testing.T) {
	h := fakehost.New(t)
	ctx := context.Background()
	var rw api.Mount
	spec.SetWritableMount(&rw)
	churn, small, next := budgetPod(t, h, 1, writableAnn),
		budgetPod(t, h, 2, map[string]string{annotations.WritableCgroups.Name: "true", annotations.MaxDescendants.Name: "40"}),
		budgetPod(t, h, 3, writableAnn)
	// Before the restart, the churner's bound was lowered to 250-200; it
	// made 30 more since. The small pod's was lowered to 0 by 40 dying,
	// and made 100 more: its cap stays its annotation's 40.
	for _, x := range []struct {
		pod              *api.PodSandbox
		bound            string
		live, dying, cap int
	}{{churn, "50", 2, 230, 250}, {small, "0", 2, 140, 40}} {
		if err := h.SetPodBounds(x.pod.GetLinux().GetCgroupParent(), x.bound, "50"); err != nil {
			t.Fatal(err)
		}
		setStat(t, h, podRel(t, x.pod), x.live, x.dying)
	}
	// 100 more dying cgroups on the node, a removed pod's.
	setStat(t, h, "/", 60, 470)
	ctrs := []*api.Container{budgetCtr(churn, "app"), budgetCtr(small, "app")}
	for _, c := range ctrs {
		c.State, c.Mounts = api.ContainerState_CONTAINER_RUNNING, []*api.Mount{&rw}
	}
	p := budgetPlugin(t, h, 650, nil)
	if _, err := p.Synchronize(ctx, []*api.PodSandbox{churn, small, next}, ctrs); err != nil {
		t.Fatal(err)
	}
	// Before any look: 250 + 40 reserved, 102 past the small pod's cap,
	// 100 outside: 492 in use, 158 left.
	_, _, err := p.CreateContainer(ctx, next, budgetCtr(next, "app"))
	for _, want := range []string{"290 are reserved by 2 writable pods", "102 are held past", "100 dying cgroups remain outside", "(158 left)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a new writable pod right after the restart: %v, want a refusal saying %q", err, want)
		}
	}
	p.TightenBounds()
	for pod, want := range map[*api.PodSandbox]string{churn: "20", small: "0"} {
		if got, _ := h.ReadPodFile(pod.GetLinux().GetCgroupParent(), host.FileMaxDescendants); got != want {
			t.Errorf("%s after the restart: cgroup.max.descendants %s, want %s", pod.GetName(), got, want)
		}
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

// TestChurnBoundConcurrent plays the tighten tick racing pods' first and
// later containers: a pod's first bounds are never lowered before they are
// in place (so its reservation is its cap), and each bound ends at its cap
// less its dying cgroups.
func TestChurnBoundConcurrent(t *testing.T) {
	h := fakehost.New(t)
	p := budgetPlugin(t, h, 0, nil)
	const n = 10
	pods := make([]*api.PodSandbox, n)
	for i := range pods {
		pods[i] = budgetPod(t, h, i, writableAnn)
		setStat(t, h, podRel(t, pods[i]), 1, 10*i)
	}
	stop := make(chan struct{})
	var tick sync.WaitGroup
	tick.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				p.TightenBounds()
			}
		}
	})
	var wg sync.WaitGroup
	for _, pod := range pods {
		wg.Go(func() {
			for _, name := range []string{"app", "sidecar", "debug"} {
				if _, _, err := p.CreateContainer(context.Background(), pod, budgetCtr(pod, name)); err != nil {
					t.Errorf("%s/%s: %v", pod.GetName(), name, err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	tick.Wait()
	p.TightenBounds()
	d := p.Delegation()
	if d.Reserved != n*config.DefaultMaxDescendants {
		t.Errorf("reserved %d, want %d: a pod's reservation followed its lowered bound", d.Reserved, n*config.DefaultMaxDescendants)
	}
	for i, pod := range pods {
		want := strconv.Itoa(config.DefaultMaxDescendants - 10*i)
		if got, _ := h.ReadPodFile(pod.GetLinux().GetCgroupParent(), host.FileMaxDescendants); got != want {
			t.Errorf("%s: cgroup.max.descendants %s, want %s", pod.GetName(), got, want)
		}
	}
}

// TestRestartKeepsCap plays dying cgroups freed while the plugin is away:
// the churner's bound was its cap less 12 dying cgroups (0); 3 of them are
// freed before the new plugin synchronizes. Its cap is still the 12 its
// container was given (the container's environment), not the 9 its bound
// and dying cgroups add up to now, and its bound goes back up to 3.
func TestRestartKeepsCap(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		withEnv  bool
		reserved int
		bound    string
	}{
		{"the container's environment says its cap", true, 12, "3"},
		// Containers made before the environment said: the bound plus
		// the dying cgroups is all there is.
		{"no environment", false, 9, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := fakehost.New(t)
			pod := budgetPod(t, h, 1, map[string]string{annotations.WritableCgroups.Name: "true", annotations.MaxDescendants.Name: "12"})
			ctr := budgetCtr(pod, "churn")
			p := budgetPlugin(t, h, 1000, nil)
			if _, err := p.Synchronize(ctx, []*api.PodSandbox{pod}, nil); err != nil {
				t.Fatal(err)
			}
			adj, _, err := p.CreateContainer(ctx, pod, ctr)
			if err != nil {
				t.Fatal(err)
			}
			// The container as the runtime reports it at Synchronize.
			ctr.State, ctr.Mounts = api.ContainerState_CONTAINER_RUNNING, adj.GetMounts()
			if tc.withEnv {
				for _, kv := range adj.GetEnv() {
					ctr.Env = append(ctr.Env, kv.GetKey()+"="+kv.GetValue())
				}
			}
			setStat(t, h, podRel(t, pod), 0, 12)
			p.TightenBounds()
			if got, _ := h.ReadPodFile(pod.GetLinux().GetCgroupParent(), host.FileMaxDescendants); got != "0" {
				t.Fatalf("bound with 12 dying: %s, want 0", got)
			}
			setStat(t, h, podRel(t, pod), 0, 9)
			again := budgetPlugin(t, h, 1000, nil)
			if _, err := again.Synchronize(ctx, []*api.PodSandbox{pod}, []*api.Container{ctr}); err != nil {
				t.Fatal(err)
			}
			if d := again.Delegation(); d.Reserved != tc.reserved {
				t.Errorf("after the restart: reserved %d, want %d", d.Reserved, tc.reserved)
			}
			if got, _ := h.ReadPodFile(pod.GetLinux().GetCgroupParent(), host.FileMaxDescendants); got != tc.bound {
				t.Errorf("after the restart: cgroup.max.descendants %s, want %s", got, tc.bound)
			}
		})
	}
}
