package inproc

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// TestChurnThousandPods is the churn check (no growth over a churn) at its
// full size, in process
// (the VM's ScaleChurn runs 70 pods under emulation): 1,000 pods started
// and removed through the real ttrpc connection beside 20 running
// node-shared containers, every third pod pinned (a 2-CPU budget with an
// exclusive and a pod-shared container, so that the fleet is narrowed and
// widened), the others plain. After it the allocation table is the one
// after the warm-up, and the process's live heap, goroutines and open fds
// are back where they were: a leak of half a KiB a pod fails it.
func TestChurnThousandPods(t *testing.T) {
	const pods, warmup = 1000, 30
	e := setupPinning(t, nil)
	fleet := Pod("fleet", "f0", cgroupfsParent, nil)
	e.mustRunPod(fleet)
	for i := range 20 {
		e.mustCreate(fleet, Container(fleet, fmt.Sprintf("n%d", i)))
	}
	churn := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			uid := fmt.Sprintf("churn%d", i)
			var pod *api.PodSandbox
			var ctrs []*api.Container
			if i%3 == 0 {
				pod = budgetPod(uid, uid, 2)
				ctrs = []*api.Container{Container(pod, "g", WithGuaranteedCPUs(1, gi)), Container(pod, "s")}
			} else {
				pod = Pod(uid, uid, cgroupfsParent, nil)
				ctrs = []*api.Container{Container(pod, "app")}
			}
			e.mustRunPod(pod)
			for _, c := range ctrs {
				e.mustCreate(pod, c)
			}
			e.applyAsync()
			for _, c := range ctrs {
				e.stopRemove(pod, c)
			}
			if err := e.rt.RemovePod(context.Background(), pod); err != nil {
				t.Fatalf("RemovePodSandbox %s: %v", uid, err)
			}
			e.node.removePod(pod.Id)
			e.applyAsync()
		}
	}
	churn(0, warmup)
	want := e.p.Pinning().Allocations
	before := footprint(t)
	churn(warmup, warmup+pods)
	after := footprint(t)

	if got := e.p.Pinning().Allocations; len(got.Pods) != 1 || len(got.Pods[0].Containers) != 20 || got.NodeSharedPool != want.NodeSharedPool {
		t.Errorf("allocation table after the churn: %d pods, node shared pool %s; want only the fleet's 20 containers and %s", len(got.Pods), got.NodeSharedPool, want.NodeSharedPool)
	}
	t.Logf("%d pods: live heap %d -> %d KiB, goroutines %d -> %d, fds %d -> %d",
		pods, before.heap>>10, after.heap>>10, before.goroutines, after.goroutines, before.fds, after.fds)
	if limit := before.heap + pods*512; after.heap > limit {
		t.Errorf("live heap grew from %d to %d bytes over %d pods (allowed %d)", before.heap, after.heap, pods, limit)
	}
	if after.goroutines > before.goroutines {
		t.Errorf("goroutines grew from %d to %d", before.goroutines, after.goroutines)
	}
	if after.fds > before.fds {
		t.Errorf("open fds grew from %d to %d", before.fds, after.fds)
	}
}

// usage is the test process's live heap after a collection, goroutines
// and open fds.
type usage struct {
	heap            uint64
	goroutines, fds int
}

func footprint(t *testing.T) usage {
	t.Helper()
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return usage{heap: m.HeapAlloc, goroutines: runtime.NumGoroutine(), fds: len(fds)}
}
