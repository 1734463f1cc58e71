package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
)

func TestResize(t *testing.T) {
	tests := []struct {
		name  string
		scope string
		// setup adds pods and containers; id is resized to res.
		setup   func(t *testing.T, p *Policy)
		id      string
		res     budget.Container
		wantErr string
		// wantPool is the pool after an allowed resize.
		wantPool Pool
	}{
		{
			name: "exclusive, same resources", id: "g", res: guaranteed(1000), wantPool: PoolExclusive,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", podBudget(4000))
				mustAdd(t, p, ctr("g", "p", guaranteed(1000)))
			},
		},
		{
			name: "exclusive grows", id: "g", res: guaranteed(2000), wantErr: "in-place resize of a pinned container is not supported",
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", podBudget(4000))
				mustAdd(t, p, ctr("g", "p", guaranteed(1000)))
			},
		},
		{
			name: "exclusive memory limit change", id: "g",
			res:     budget.NewContainer(budget.Budget{CPURequest: 1000, CPULimit: 1000, MemoryLimit: 2 * gib}),
			wantErr: "runs exclusive",
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", podBudget(4000))
				mustAdd(t, p, ctr("g", "p", guaranteed(1000)))
			},
		},
		{
			// The kubelet admits a limit change of a Burstable container in
			// a Guaranteed pod: its cpu.max and memory.max change, its
			// cpuset does not.
			name: "pod-shared memory limit change", id: "s", res: budget.NewContainer(budget.Budget{CPURequest: 500, CPULimit: 2000, MemoryLimit: 2 * gib}),
			wantPool: PoolPodShared,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", podBudget(4000))
				mustAdd(t, p, ctr("g", "p", guaranteed(1000)))
				mustAdd(t, p, ctr("s", "p", burstable(500)))
			},
		},
		{
			name: "pod-shared cpu limit change", id: "s", res: budget.NewContainer(budget.Budget{CPURequest: 500, CPULimit: 3000}),
			wantPool: PoolPodShared,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", podBudget(4000))
				mustAdd(t, p, ctr("s", "p", burstable(500)))
			},
		},
		{
			name: "pod-shared cpu request change", id: "s", res: burstable(1000),
			wantErr: `container "s" in pod p runs pod-shared (cpus 0-1,8-9): resources cpu=500m/2000m,memory=-/- to cpu=1000m/2000m,memory=-/-`,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", podBudget(4000))
				mustAdd(t, p, ctr("s", "p", burstable(500)))
			},
		},
		{
			name: "node-shared beside its bubble: cpu limit change", id: "dbg",
			res:      budget.NewContainer(budget.Budget{CPULimit: 1000, MemoryLimit: gib}),
			wantPool: PoolNodeShared,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", podBudget(2000))
				mustAdd(t, p, ctr("g", "p", guaranteed(2000)))
				mustAdd(t, p, debugger(podBudget(2000)))
			},
		},
		{
			name: "node-shared beside its bubble: cpu request change", id: "dbg",
			res:     budget.NewContainer(budget.Budget{CPURequest: 500, CPULimit: 2000, MemoryLimit: 8 * gib}),
			wantErr: "runs node-shared",
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", podBudget(2000))
				mustAdd(t, p, ctr("g", "p", guaranteed(2000)))
				mustAdd(t, p, debugger(podBudget(2000)))
			},
		},
		{
			name: "node-shared grows", id: "n", res: burstable(900), wantPool: PoolNodeShared,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "q", budget.Budget{})
				mustAdd(t, p, ctr("n", "q", burstable(500)))
			},
		},
		{
			// The kubelet may resize the container before the pod budget
			// (and sends the budget read back from cpu.weight): a pod
			// cgdelegate does not place is not held to it.
			name: "node-shared beyond its pod budget", id: "n", res: burstable(3000), wantPool: PoolNodeShared,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "q", budget.Budget{CPURequest: 2000, CPULimit: 4000, MemoryLimit: 8 * gib})
				mustAdd(t, p, ctr("n", "q", burstable(500)))
			},
		},
		{
			// A Burstable pod's resize (requests 250m, limit 500m -> 750m), beside a bubble.
			name: "node-shared cpu limit up beside a bubble", id: "b",
			res:      budget.NewContainer(budget.Budget{CPURequest: 250, CPULimit: 750, MemoryLimit: 64 * mib}),
			wantPool: PoolNodeShared,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "pinned", podBudget(2000))
				mustAdd(t, p, ctr("g", "pinned", guaranteed(1000)))
				mustAddPod(t, p, "q", budget.Budget{CPURequest: 250, CPULimit: 500, MemoryLimit: 64 * mib})
				mustAdd(t, p, ctr("b", "q", budget.NewContainer(budget.Budget{CPURequest: 250, CPULimit: 500, MemoryLimit: 64 * mib})))
			},
		},
		{
			// In pod scope only a bubble holds exclusive slices.
			name: "pod scope: guaranteed node-shared becomes whole cpus", id: "n", res: guaranteed(2000), wantPool: PoolNodeShared,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "q", budget.Budget{})
				mustAdd(t, p, ctr("n", "q", guaranteed(1500)))
			},
		},
		{
			name: "container scope: would become exclusive", scope: "container", id: "n", res: guaranteed(1000),
			wantErr: "would make it exclusive",
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "q", budget.Budget{})
				mustAdd(t, p, ctr("n", "q", guaranteed(1500)))
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{Scope: "pod"})
			if tc.scope == "container" {
				p = mustNew(t, dualHT(), Options{Scope: "container"})
			}
			tc.setup(t, p)
			before := p.Snapshot()
			prev, _ := p.Assignment(tc.id)
			a, ok, err := p.Resize(tc.id, tc.res)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrResize) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), KubeletResizeReason) {
					t.Fatalf("err = %v, want ErrResize with %q and the kubelet's reason", err, tc.wantErr)
				}
				if after := p.Snapshot(); !reflect.DeepEqual(before, after) {
					t.Errorf("refused resize changed the state")
				}
				p.mu.Lock()
				got := p.st.ctrs[tc.id].spec.Resources
				p.mu.Unlock()
				if got == tc.res {
					t.Errorf("refused resize recorded the new resources")
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("Resize = %v, %v", ok, err)
			}
			if a.Pool != tc.wantPool {
				t.Errorf("pool %s, want %s", a.Pool, tc.wantPool)
			}
			if !reflect.DeepEqual(a, prev) {
				t.Errorf("assignment %+v, was %+v", a, prev)
			}
			if after, _ := p.Assignment(tc.id); !reflect.DeepEqual(after, a) {
				t.Errorf("Assignment after resize %+v, Resize returned %+v", after, a)
			}
			if got := p.Snapshot().NodeSharedPool; got != before.NodeSharedPool {
				t.Errorf("node shared pool %s, was %s", got, before.NodeSharedPool)
			}
			for i, ps := range p.Snapshot().Pods {
				if ps.Bubble != before.Pods[i].Bubble || ps.SharedPool != before.Pods[i].SharedPool {
					t.Errorf("pod %s pools %s/%s, were %s/%s", ps.ID, ps.Bubble, ps.SharedPool, before.Pods[i].Bubble, before.Pods[i].SharedPool)
				}
			}
			if got := p.st.ctrs[tc.id].spec.Resources; got != tc.res {
				t.Errorf("resources %+v, want %+v recorded", got, tc.res)
			}
		})
	}
	t.Run("unknown container", func(t *testing.T) {
		p := mustNew(t, dualHT(), Options{})
		if _, ok, err := p.Resize("nope", guaranteed(1000)); ok || err != nil {
			t.Errorf("Resize(unknown) = %v, %v", ok, err)
		}
	})
}

func TestResizePod(t *testing.T) {
	burst := budget.Budget{CPURequest: 1000, CPULimit: 2000, MemoryLimit: gib}
	// small is a Burstable pod: requests 250m, limits 500m and 64Mi.
	small := budget.Budget{CPURequest: 250, CPULimit: 500, MemoryLimit: 64 * mib}
	burstableCtr := func(b budget.Budget) ContainerSpec {
		c := ctr("c", "p", budget.NewContainer(b))
		c.PodQoS = budget.QoSBurstable
		return c
	}
	tests := []struct {
		name   string
		budget budget.Budget
		// ctr, when set, is added to the pod before the resize.
		ctr  *ContainerSpec
		next budget.Budget
		// want is the budget recorded after an allowed resize.
		want    budget.Budget
		wantErr string
	}{
		{name: "bubble pod unchanged", budget: podBudget(2000), next: podBudget(2000), want: podBudget(2000)},
		{
			// 2000m is 2048 shares, cpu.weight 79, read back as 2046
			// shares (1999m); the recorded budget stays as it was.
			name: "bubble pod read back through cpu.weight", budget: podBudget(2000),
			next: readBack(podBudget(2000), 1999), want: podBudget(2000),
		},
		{name: "bubble pod grows", budget: podBudget(2000), next: podBudget(3000), wantErr: "in-place resize of a pinned pod is not supported"},
		{
			name: "bubble pod memory grows", budget: podBudget(2000), next: budget.Budget{CPURequest: 2000, CPULimit: 2000, MemoryLimit: 2 * gib},
			wantErr: `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\"`,
		},
		{name: "burstable pod grows", budget: burst, next: budget.Budget{CPURequest: 1500, CPULimit: 3000, MemoryLimit: gib}, want: budget.Budget{CPURequest: 1500, CPULimit: 3000, MemoryLimit: gib}},
		{
			// The limit step arrives with the request read back
			// (250m -> 256 shares -> weight 10 -> 237 shares -> 232m).
			name: "small pod: cpu limit up, request read back", budget: small,
			next: budget.Budget{CPURequest: 232, CPULimit: 750, MemoryLimit: 64 * mib},
			want: budget.Budget{CPURequest: 232, CPULimit: 750, MemoryLimit: 64 * mib},
		},
		{
			name: "small pod: memory up, request read back", budget: small,
			next: budget.Budget{CPURequest: 232, CPULimit: 500, MemoryLimit: 96 * mib},
			want: budget.Budget{CPURequest: 232, CPULimit: 500, MemoryLimit: 96 * mib},
		},
		{
			name: "memory limit read back rounded to a page", budget: small,
			next: budget.Budget{CPURequest: 250, CPULimit: 500, MemoryLimit: 64*mib - 4096}, want: small,
		},
		{name: "fractional guaranteed pod would get a bubble", budget: podBudget(1500), next: podBudget(2000), wantErr: "would give it a bubble"},
		{
			name: "guaranteed pod read back at whole cpus would get a bubble", budget: podBudget(1500),
			next: readBack(podBudget(2000), 1999), wantErr: "would give it a bubble",
		},
		{
			// NRI has no memory request: 1000m/1000m with a memory limit
			// reads as Guaranteed, but the container's oom_score_adj says
			// Burstable, so no bubble is due.
			name: "burstable pod that reads as guaranteed", budget: budget.Budget{CPURequest: 500, CPULimit: 500, MemoryLimit: gib},
			ctr:  ptr(burstableCtr(budget.Budget{CPURequest: 500, CPULimit: 500, MemoryLimit: gib})),
			next: podBudget(1000), want: podBudget(1000),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{})
			mustAddPod(t, p, "p", tc.budget)
			if tc.ctr != nil {
				mustAdd(t, p, *tc.ctr)
			}
			err := p.ResizePod("p", tc.next)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrResize) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), KubeletResizeReason) {
					t.Fatalf("err = %v, want ErrResize with %q and the kubelet's reason", err, tc.wantErr)
				}
				if p.st.pods["p"].spec.Budget != tc.budget {
					t.Errorf("refused resize recorded the budget")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.st.pods["p"].spec.Budget; got != tc.want {
				t.Errorf("budget %s, want %s recorded", got, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// readBack is b with the CPU request the kubelet reads back from cpu.weight.
func readBack(b budget.Budget, request int64) budget.Budget {
	b.CPURequest = request
	return b
}

// TestRebuildRestoresQuota: a repair that moves a container out of an
// exclusive slice (here: its stamped slice is claimed twice and no other
// fits) puts its CFS quota back.
func TestRebuildRestoresQuota(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "p", podBudget(2000))
	a, _ := mustAdd(t, p, ctr("a", "p", guaranteed(1000)))
	s, _ := mustAdd(t, p, ctr("s", "p", burstable(100)))
	res := p.Rebuild([]PodSpec{{ID: "p", Budget: podBudget(2000)}}, []ContainerState{
		{Spec: ctr("a", "p", guaranteed(1000)), Stamp: a.Stamp(), CPUs: a.CPUs, Mems: a.Mems, CPUQuota: -1},
		{Spec: ctr("b", "p", guaranteed(1000)), Stamp: a.Stamp(), CPUs: a.CPUs, Mems: a.Mems, CPUQuota: -1},
		{Spec: ctr("s", "p", burstable(100)), Stamp: s.Stamp(), CPUs: s.CPUs, Mems: s.Mems, CPUQuota: 200000},
	})
	var b *Assignment
	for i := range res.Updates {
		if res.Updates[i].ContainerID == "b" {
			b = &res.Updates[i]
		}
	}
	if b == nil {
		t.Fatalf("no update for b: %+v (conflicts %v)", res.Updates, res.Conflicts)
	}
	if b.Pool == PoolExclusive || b.RestoreQuota != 100000 {
		t.Errorf("b: pool %s, restore quota %d; want shared with quota 100000 back", b.Pool, b.RestoreQuota)
	}
	for _, u := range res.Updates {
		if u.ContainerID != "b" && u.RestoreQuota != 0 {
			t.Errorf("%s: restore quota %d, want none", u.ContainerID, u.RestoreQuota)
		}
	}
}
