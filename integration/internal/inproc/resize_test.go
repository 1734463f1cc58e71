package inproc

import (
	"context"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// TestPinningResize: in-place resizes through the real NRI adaptation. An
// exclusive container, a pod-shared container's CPU request and a pinned
// pod are refused (KEP-5526) with the numbers; a resize that changes
// nothing keeps the exclusive container's cpuset and quota -1; a
// pod-shared container's limits and a node-shared container change and
// keep their cpusets.
func TestPinningResize(t *testing.T) {
	ctx := context.Background()
	e := setupPinning(t, nil)
	pod := budgetPod("pinned", "p1", 3)
	e.mustRunPod(pod)
	g := Container(pod, "g", WithGuaranteedCPUs(1, gi))
	gCPUs := adjCPU(e.mustCreate(pod, g)).GetCpus()
	s := Container(pod, "s", WithResources(500, 1000, 256*mi))
	e.mustCreate(pod, s)
	plain := Pod("plain", "p2", cgroupfsParent, nil)
	e.mustRunPod(plain)
	n := Container(plain, "n", WithResources(250, 0, 0))
	nCPUs := adjCPU(e.mustCreate(plain, n)).GetCpus()

	// self returns the update the plugins made for the resized container.
	self := func(t *testing.T, resp *api.UpdateContainerResponse, id string) *api.LinuxCPU {
		t.Helper()
		for _, u := range resp.GetUpdate() {
			if u.GetContainerId() == id {
				return u.GetLinux().GetResources().GetCpu()
			}
		}
		t.Fatalf("no update for %s in %v", id, resp.GetUpdate())
		return nil
	}

	refused := []struct {
		name string
		ctr  *api.Container
		res  *api.LinuxResources
		want []string
	}{
		{"exclusive container grows", g, LinuxResources(2000, 2000, gi), []string{
			"in-place resize refused", `container "g"`, "runs exclusive (cpus " + gCPUs + ")",
			"cpu=1000m/1000m,memory=-/1Gi to cpu=2000m/2000m,memory=-/1Gi", `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\"`,
		}},
		{"pod-shared container shrinks", s, LinuxResources(250, 1000, 256*mi), []string{
			`container "s"`, "runs pod-shared", "cpu=500m/1000m", "to cpu=250m/1000m",
		}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.rt.UpdateContainer(ctx, pod, e.node.ctrs[tc.ctr.Id], tc.res)
			if err == nil {
				t.Fatal("resize allowed; want a refusal")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}

	t.Run("pinned pod", func(t *testing.T) {
		err := e.rt.UpdatePodSandbox(ctx, pod, LinuxResources(4000, 4000, 4*gi))
		if err == nil || !strings.Contains(err.Error(), "in-place resize of a pinned pod is not supported") ||
			!strings.Contains(err.Error(), "cpu=3000m/3000m,memory=-/4Gi to cpu=4000m/4000m,memory=-/4Gi") {
			t.Fatalf("err = %v, want a pinned-pod refusal with the budgets", err)
		}
	})

	t.Run("exclusive container, same resources, keeps quota -1", func(t *testing.T) {
		resp, err := e.rt.UpdateContainer(ctx, pod, e.node.ctrs[g.Id], LinuxResources(1000, 1000, gi))
		if err != nil {
			t.Fatal(err)
		}
		cpu := self(t, resp, g.Id)
		if cpu.GetQuota().GetValue() != -1 || cpu.GetCpus() != gCPUs {
			t.Errorf("resize result quota %v cpus %q, want -1 and %q", cpu.GetQuota(), cpu.GetCpus(), gCPUs)
		}
	})

	// The kubelet admits a limit change of a Burstable container in a
	// Guaranteed pod: cpu.max and memory.max change, the cpuset does not.
	t.Run("pod-shared container limits change, keeps its cpuset", func(t *testing.T) {
		sCPUs := e.node.cpus(t, s.Id).String()
		resp, err := e.rt.UpdateContainer(ctx, pod, e.node.ctrs[s.Id], LinuxResources(500, 2000, 512*mi))
		if err != nil {
			t.Fatal(err)
		}
		cpu := self(t, resp, s.Id)
		if cpu.GetCpus() != sCPUs || cpu.GetQuota().GetValue() != 2000*cfsPeriod/1000 {
			t.Errorf("resize result cpus %q quota %v, want %q and the new quota", cpu.GetCpus(), cpu.GetQuota(), sCPUs)
		}
	})

	t.Run("node-shared container is resized and keeps its cpuset", func(t *testing.T) {
		resp, err := e.rt.UpdateContainer(ctx, plain, e.node.ctrs[n.Id], LinuxResources(500, 2000, gi))
		if err != nil {
			t.Fatal(err)
		}
		cpu := self(t, resp, n.Id)
		if cpu.GetCpus() != nCPUs || cpu.GetQuota().GetValue() != 2000*cfsPeriod/1000 {
			t.Errorf("resize result cpus %q quota %v, want %q and the new quota", cpu.GetCpus(), cpu.GetQuota(), nCPUs)
		}
	})

	t.Run("unpinned pod resize passes", func(t *testing.T) {
		if err := e.rt.UpdatePodSandbox(ctx, plain, LinuxResources(1000, 2000, gi)); err != nil {
			t.Fatal(err)
		}
	})
}
