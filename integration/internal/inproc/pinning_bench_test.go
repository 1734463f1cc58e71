package inproc

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/sys/unix"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/nri"
)

// benchSharedContainers is the number of shared-pool containers a dynamic
// add has to update.
const benchSharedContainers = 50

// pinningBenchPod builds a pinning plugin config on the dual-socket tree
// and a pod with an 8-CPU budget and 50 shared containers.
func pinningBenchPod(b *testing.B) (config.Config, *api.PodSandbox, []*api.Container) {
	b.Helper()
	host := fakehost.New(b)
	if err := host.InstallSysfs(topologyTree); err != nil {
		b.Fatal(err)
	}
	cfg := host.Config()
	cfg.CPUPinning = true
	cfg.KubeletCPUManagerState = host.Dir + "/cpu_manager_state"
	pod := budgetPod("bench", "pb", 8)
	ctrs := make([]*api.Container, benchSharedContainers)
	for i := range ctrs {
		ctrs[i] = Container(pod, fmt.Sprintf("shared-%02d", i))
	}
	return cfg, pod, ctrs
}

// reportLatency adds p50 and p99 of the dynamic add to the benchmark.
func reportLatency(b *testing.B, d []time.Duration) {
	b.Helper()
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "add-p50-ns")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), "add-p99-ns")
}

// processCPU is the CPU time of the whole process so far,
// CLOCK_PROCESS_CPUTIME_ID.
func processCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// threadCPU is the CPU time of the calling OS thread (lock it first),
// CLOCK_THREAD_CPUTIME_ID: exact, where getrusage counts in ticks.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// BenchmarkPinningDynamicAdd adds a Guaranteed 1-CPU container to a running
// pod whose 50 shared-pool containers must all be updated in the same
// response, then stops and removes it (50 updates again). ns/op is one add
// plus one stop; add-p99-ns is the add alone.
//
//   - handler: the plugin's own handlers, called directly: plugin time;
//   - ttrpc: the same through the in-process runtime over real ttrpc.
func BenchmarkPinningDynamicAdd(b *testing.B) {
	ctx := context.Background()
	b.Run("handler", func(b *testing.B) {
		cfg, pod, shared := pinningBenchPod(b)
		p, err := nri.New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		if err := p.RunPodSandbox(ctx, pod); err != nil {
			b.Fatal(err)
		}
		for _, c := range shared {
			if _, _, err := p.CreateContainer(ctx, pod, c); err != nil {
				b.Fatal(err)
			}
		}
		added := Container(pod, "added", WithGuaranteedCPUs(1, gi))
		var lat, cpu []time.Duration
		// Thread CPU time per add: on a shared, overloaded machine wall
		// time mostly measures waiting for a CPU.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for b.Loop() {
			start, startCPU := time.Now(), threadCPU(b)
			_, upd, err := p.CreateContainer(ctx, pod, added)
			lat, cpu = append(lat, time.Since(start)), append(cpu, threadCPU(b)-startCPU)
			if err != nil || len(upd) != benchSharedContainers {
				b.Fatalf("add: %d updates, err %v", len(upd), err)
			}
			if upd, err := p.StopContainer(ctx, pod, added); err != nil || len(upd) != benchSharedContainers {
				b.Fatalf("stop: %d updates, err %v", len(upd), err)
			}
			if err := p.RemoveContainer(ctx, pod, added); err != nil {
				b.Fatal(err)
			}
		}
		reportLatency(b, lat)
		slices.Sort(cpu)
		b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds()), "add-p50-cpu-ns")
		b.ReportMetric(float64(cpu[len(cpu)*9/10].Nanoseconds()), "add-p90-cpu-ns")
		b.ReportMetric(float64(cpu[len(cpu)*99/100].Nanoseconds()), "add-p99-cpu-ns")
	})
	b.Run("ttrpc", func(b *testing.B) {
		cfg, pod, shared := pinningBenchPod(b)
		p, err := nri.New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		rt, err := NewRuntime("containerd", "v2.4.2-inproc")
		if err != nil {
			b.Fatal(err)
		}
		defer rt.Close()
		s, err := rt.Connect(ctx, p, "cgdelegate", "50")
		if err != nil {
			b.Fatal(err)
		}
		defer s.Stop()
		p.SetUpdater(s)
		if err := rt.RunPod(ctx, pod); err != nil {
			b.Fatal(err)
		}
		for _, c := range shared {
			if _, err := rt.CreateContainer(ctx, pod, c); err != nil {
				b.Fatal(err)
			}
		}
		var lat []time.Duration
		for b.Loop() {
			added := Container(pod, "added", WithGuaranteedCPUs(1, gi))
			start := time.Now()
			resp, err := rt.CreateContainer(ctx, pod, added)
			lat = append(lat, time.Since(start))
			if err != nil || len(resp.GetUpdate()) != benchSharedContainers {
				b.Fatalf("add: %d updates, err %v", len(resp.GetUpdate()), err)
			}
			if _, err := rt.StopContainer(ctx, pod, added); err != nil {
				b.Fatal(err)
			}
			if err := rt.RemoveContainer(ctx, pod, added); err != nil {
				b.Fatal(err)
			}
		}
		reportLatency(b, lat)
	})
}
