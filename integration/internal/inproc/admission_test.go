package inproc

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// TestPinningAdmissionAtRunPodSandbox: a pod whose bubble can not be carved
// is refused at RunPodSandbox, through the real NRI adaptation, with the
// numbers; nothing changes, and a pod that fits is still admitted.
// (containerd 2.3 and 2.4 fail the sandbox on this error: "NRI
// RunPodSandbox failed: ...", internal/cri/server/sandbox_run.go.)
func TestPinningAdmissionAtRunPodSandbox(t *testing.T) {
	tests := []struct {
		name string
		// before are admitted first.
		before []*api.PodSandbox
		pod    *api.PodSandbox
		want   []string
	}{
		{
			name: "budget as large as the node",
			pod:  budgetPod("huge", "p1", 16),
			want: []string{
				"cgdelegate refused the pod default/huge", "insufficient cpus",
				"needs 16 cpus, the node pool has 16 free (0-15) and keeps at least one for shared containers",
			},
		},
		{
			name:   "budget larger than what other bubbles left",
			before: []*api.PodSandbox{budgetPod("first", "p1", 8)},
			pod:    budgetPod("second", "p2", 8),
			want: []string{
				"cgdelegate refused the pod default/second", "cpu budget 8000m",
				"needs 8 cpus, the node pool has 8 free",
			},
		},
		{
			name: "memory limit larger than every NUMA node together",
			pod:  WithPodResources(Pod("fat", "p1", cgroupfsParent, nil), 2000, 2000, 40*gi),
			want: []string{
				"cgdelegate refused the pod default/fat", "memory limit 40Gi",
				"32Gi free in all NUMA nodes together",
			},
		},
		{
			name:   "memory limit larger than the nodes other bubbles left",
			before: []*api.PodSandbox{WithPodResources(Pod("first", "p1", cgroupfsParent, nil), 2000, 2000, 20*gi)},
			pod:    WithPodResources(Pod("second", "p2", cgroupfsParent, nil), 2000, 2000, 16*gi),
			want: []string{
				"cgdelegate refused the pod default/second", "memory limit 16Gi",
				"12Gi free in all NUMA nodes together", "node 0: 0 of 16Gi free", "node 1: 12Gi of 16Gi free",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setupPinning(t, nil)
			for _, p := range tc.before {
				e.mustRunPod(p)
			}
			e.applyAsync()
			before := e.p.Pinning().Allocations

			err := e.runPod(tc.pod)
			if err == nil {
				t.Fatalf("RunPodSandbox %s admitted; want a refusal", tc.pod.GetName())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("RunPodSandbox err = %v\nwant it to contain %q", err, w)
				}
			}
			if after := e.p.Pinning().Allocations; !reflect.DeepEqual(before, after) {
				t.Errorf("refusal changed the state:\nbefore %+v\nafter  %+v", before, after)
			}
			if ups := e.applyAsync(); len(ups) != 0 {
				t.Errorf("refusal sent updates: %v", ups)
			}

			// A pod that fits is admitted, and its first container pinned.
			ok := budgetPod("fits", "p9", 2)
			e.mustRunPod(ok)
			resp := e.mustCreate(ok, Container(ok, "app", WithGuaranteedCPUs(1, gi)))
			if adjCPU(resp).GetCpus() == "" {
				t.Errorf("container of the admitted pod got no cpuset")
			}
			_ = e.rt.RemovePod(context.Background(), ok)
		})
	}
}

// TestPinningQoS: only a Guaranteed pod-level budget with whole CPUs gets
// a bubble, as with the kubelet's PodLevelResourceManagers; a pod whose
// containers' oom_score_adj says Burstable (a memory request NRI does not
// carry) gives its bubble back at its first container.
func TestPinningQoS(t *testing.T) {
	burstableAdj := func(c *api.Container) { c.Linux.OomScoreAdj = api.Int(500) }
	tests := []struct {
		name string
		pod  *api.PodSandbox
		opts []ContainerOption
		// wantBubble is the bubble size after the first container.
		wantBubble int
	}{
		{"guaranteed whole cpus", budgetPod("g", "p1", 2), nil, 2},
		{"burstable budget", WithPodResources(Pod("b", "p1", cgroupfsParent, nil), 1000, 2000, gi), nil, 0},
		{"guaranteed fractional budget", WithPodResources(Pod("f", "p1", cgroupfsParent, nil), 1500, 1500, gi), nil, 0},
		{"reads guaranteed, oom_score_adj says burstable", budgetPod("m", "p1", 2), []ContainerOption{burstableAdj}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setupPinning(t, nil)
			e.mustRunPod(tc.pod)
			c := Container(tc.pod, "app", append([]ContainerOption{WithGuaranteedCPUs(1, gi)}, tc.opts...)...)
			resp := e.mustCreate(tc.pod, c)
			e.applyAsync()
			st := e.p.Pinning().Allocations
			bubble := mustSet(t, st.Pods[0].Bubble)
			if bubble.Size() != tc.wantBubble {
				t.Fatalf("bubble %q, want %d cpus (status %+v)", st.Pods[0].Bubble, tc.wantBubble, st.Pods[0])
			}
			stamp := e.node.stamp(t, c.Id)
			switch {
			case tc.wantBubble > 0 && stamp.Pool != policy.PoolExclusive:
				t.Errorf("pool %s, want exclusive", stamp.Pool)
			case tc.wantBubble == 0 && (stamp.Pool != policy.PoolNodeShared || adjCPU(resp).GetQuota() != nil):
				t.Errorf("pool %s quota %v, want node-shared with its own quota", stamp.Pool, adjCPU(resp).GetQuota())
			}
		})
	}
}

// TestPinningReservedMemory: reservedMemory is kept back from the bubbles
// (a pod that fits the bare nodes is refused, with the numbers), and a
// reservation the node can not hold leaves pinning inactive with the
// reason, while writable cgroups keep working.
func TestPinningReservedMemory(t *testing.T) {
	t.Run("kept back from the bubbles", func(t *testing.T) {
		e := setupPinning(t, func(c *config.Config) { c.ReservedMemory = "0:memory=4Gi;1:memory=4Gi" })
		if got := e.p.Pinning().Allocations.ReservedMemory; got != "0:memory=4Gi;1:memory=4Gi" {
			t.Errorf("status reservedMemory = %q", got)
		}
		err := e.runPod(WithPodResources(Pod("fat", "p1", cgroupfsParent, nil), 2000, 2000, 30*gi))
		for _, w := range []string{
			"cgdelegate refused the pod default/fat", "memory limit 30Gi", "24Gi free in all NUMA nodes together",
			"node 0: 12Gi of 12Gi free (MemTotal 16Gi, reservedMemory 4Gi)",
		} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("RunPodSandbox err = %v\nwant it to contain %q", err, w)
			}
		}
		e.mustRunPod(WithPodResources(Pod("fits", "p2", cgroupfsParent, nil), 2000, 2000, 20*gi))
		if mems := e.p.Pinning().Allocations.Pods[0].Mems; mems != "0-1" {
			t.Errorf("20Gi on two 12Gi nodes: memory nodes %q, want 0-1", mems)
		}
	})
	for _, tc := range []struct{ name, reserved, want string }{
		{"unknown NUMA node", "2:memory=1Gi", "reservedMemory: NUMA node 2 does not exist on this machine (NUMA nodes 0-1)"},
		{"more than the node has", "1:memory=17Gi", "reservedMemory: NUMA node 1: 17Gi is more than the node has (MemTotal 16Gi)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setupPinning(t, func(c *config.Config) { c.ReservedMemory = tc.reserved })
			st := e.p.Pinning()
			if st == nil || st.Active || !strings.Contains(st.Reason, tc.want) {
				t.Fatalf("status pinning = %+v, want inactive with reason ~ %q", st, tc.want)
			}
			pod := Pod("w", "p1", cgroupfsParent, writableAnn(""))
			e.mustRunPod(pod)
			if resp := e.mustCreate(pod, Container(pod, "app")); cgroupMount(resp.GetAdjust().GetMounts()) == nil {
				t.Errorf("writable cgroups lost: adjustment mounts %v", resp.GetAdjust().GetMounts())
			}
		})
	}
}
