package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/podres"
)

func TestResize(t *testing.T) {
	tests := []struct {
		name  string
		scope string
		// setup adds pods and containers; id is resized to res.
		setup   func(t *testing.T, p *Policy)
		id      string
		res     podres.Container
		wantErr string
		// wantPool is the pool after an allowed resize.
		wantPool Pool
	}{
		{
			name: "exclusive, same resources", id: "g", res: guaranteed(1000), wantPool: PoolExclusive,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", budget(4000))
				mustAdd(t, p, ctr("g", "p", guaranteed(1000)))
			},
		},
		{
			name: "exclusive grows", id: "g", res: guaranteed(2000), wantErr: "in-place resize of a pinned container is not supported",
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", budget(4000))
				mustAdd(t, p, ctr("g", "p", guaranteed(1000)))
			},
		},
		{
			name: "pod-shared memory change", id: "s", res: podres.NewContainer(podres.Budget{CPURequest: 500, CPULimit: 2000, MemoryLimit: 2 * gib}),
			wantErr: "runs pod-shared",
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "p", budget(4000))
				mustAdd(t, p, ctr("s", "p", burstable(500)))
			},
		},
		{
			name: "node-shared grows", id: "n", res: burstable(900), wantPool: PoolNodeShared,
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "q", podres.Budget{})
				mustAdd(t, p, ctr("n", "q", burstable(500)))
			},
		},
		{
			name: "node-shared beyond its pod budget", id: "n", res: burstable(3000), wantErr: "container cpu requests sum 3000m exceed pod cpu budget 2000m",
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "q", podres.Budget{CPURequest: 2000, CPULimit: 4000, MemoryLimit: 8 * gib})
				mustAdd(t, p, ctr("n", "q", burstable(500)))
			},
		},
		{
			name: "container scope: would become exclusive", scope: "container", id: "n", res: guaranteed(1000),
			wantErr: "would make it exclusive",
			setup: func(t *testing.T, p *Policy) {
				mustAddPod(t, p, "q", podres.Budget{})
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
			a, ok, err := p.Resize(tc.id, tc.res)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrResize) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrResize with %q", err, tc.wantErr)
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
	burst := podres.Budget{CPURequest: 1000, CPULimit: 2000, MemoryLimit: gib}
	tests := []struct {
		name    string
		budget  podres.Budget
		next    podres.Budget
		wantErr string
	}{
		{"bubble pod unchanged", budget(2000), budget(2000), ""},
		{"bubble pod grows", budget(2000), budget(3000), "in-place resize of a pinned pod is not supported"},
		{"burstable pod grows", burst, podres.Budget{CPURequest: 1500, CPULimit: 3000, MemoryLimit: gib}, ""},
		{"fractional guaranteed pod would get a bubble", budget(1500), budget(2000), "would give it a bubble"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, dualHT(), Options{})
			mustAddPod(t, p, "p", tc.budget)
			err := p.ResizePod("p", tc.next)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrResize) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrResize with %q", err, tc.wantErr)
				}
				if p.st.pods["p"].spec.Budget != tc.budget {
					t.Errorf("refused resize recorded the budget")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.st.pods["p"].spec.Budget != tc.next {
				t.Errorf("budget %s, want %s recorded", p.st.pods["p"].spec.Budget, tc.next)
			}
		})
	}
}

// TestRebuildRestoresQuota: a repair that moves a container out of an
// exclusive slice (here: its stamped slice is claimed twice and no other
// fits) puts its CFS quota back.
func TestRebuildRestoresQuota(t *testing.T) {
	p := mustNew(t, dualHT(), Options{})
	mustAddPod(t, p, "p", budget(2000))
	a, _ := mustAdd(t, p, ctr("a", "p", guaranteed(1000)))
	s, _ := mustAdd(t, p, ctr("s", "p", burstable(100)))
	res := p.Rebuild([]PodSpec{{ID: "p", Budget: budget(2000)}}, []ContainerState{
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
