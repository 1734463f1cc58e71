//go:build integration_vm

package vm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/bench"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// benchMemoryMiB is the bench VM's memory: 250 containers in 50 pods (50
// shims, 50 pauses, 250 sleeps) beside containerd, the plugin and the
// initramfs copied into the tmpfs root.
const benchMemoryMiB = 6144

// TestBenchNode is `make bench-node`: it builds (or reuses) the
// VM artifacts, boots variant.BenchVariant once with the sizes of
// CGD_BENCH_SIZES (default 0,50,100,250) on the kernel command line, and prints
// the guest's BenchNode measurements as a table: cgdelegate's rows and the
// kubelet anchor's (the kubelet's static CPU manager pinning instead, in
// the same boot). It fails when the build,
// the boot or the scenario fails (an overlap that never clears, a restart
// that moves a cpuset), never on a number. It runs only with CGD_BENCH=1,
// so that `make boots` never boots it.
func TestBenchNode(t *testing.T) {
	if os.Getenv("CGD_BENCH") == "" {
		t.Skip("the node bench runs with CGD_BENCH=1: use make bench-node")
	}
	sizes := bench.DefaultSizes
	if s := os.Getenv("CGD_BENCH_SIZES"); s != "" {
		var err error
		if sizes, err = bench.ParseSizes(s); err != nil {
			t.Fatalf("CGD_BENCH_SIZES: %v", err)
		}
	}
	start := time.Now()
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	v := variant.BenchVariant()
	workDir := newWorkDir(t)
	say("bench-node: building the VM (cached in %s)...", defaultCacheDir())
	arts, initrds := prepare(t, log, []variant.Variant{v}, workDir)
	cl, err := cmdline(v)
	if err != nil {
		t.Fatal(err)
	}
	cl += " " + bench.SizesParam + "=" + bench.FormatSizes(sizes)
	spec := bootSpec{
		Kernel: arts.Kernel, Initramfs: initrds[bootOf(v)], Cmdline: cl,
		SMP: v.SMP, NUMA: v.NUMA, MemoryMiB: benchMemoryMiB, Accel: os.Getenv("CGD_QEMU_ACCEL"),
		BootTimeout: 3 * time.Minute,
		// The guest's test binary stops after 90 minutes (init.sh).
		Timeout: 95 * time.Minute,
	}
	say("bench-node: built in %s; booting %s (%d CPUs, two NUMA nodes, %d MiB, containerd %s) for N = %s...",
		since(start), v.Name, v.SMP, benchMemoryMiB, v.Containerd, bench.FormatSizes(sizes))
	rep := bootBench(t, log, &spec, workDir, v.Name)

	res, ok := rep.Results[variant.BenchNode]
	switch {
	case !ok:
		t.Errorf("no result from the guest for %s (console log %s)\n%s", variant.BenchNode, spec.LogPath, strings.Join(rep.Output[variant.BenchNode], "\n"))
	case res.Result != "pass":
		t.Errorf("%s %s in the guest (%.1fs):\n%s", variant.BenchNode, res.Result, res.Seconds, strings.Join(rep.Output[variant.BenchNode], "\n"))
	}
	var tab bench.Table
	var bursts []map[string]float64
	var hook map[string]float64
	for _, m := range rep.Metrics[variant.BenchNode] {
		switch m.Name {
		case bench.MetricSize:
			tab.Sizes = append(tab.Sizes, m.Values)
		case bench.MetricUnpinnedSize:
			tab.Unpinned = append(tab.Unpinned, m.Values)
		case bench.MetricKubeletSize:
			tab.Kubelet = append(tab.Kubelet, m.Values)
		case bench.MetricRestart:
			tab.Restart = m.Values
		case bench.MetricBurst:
			bursts = append(bursts, m.Values)
		case bench.MetricHookExec:
			hook = m.Values
		default:
			t.Errorf("unexpected bench metric %s", m)
		}
	}
	if len(tab.Sizes) != len(sizes) || tab.Restart == nil {
		t.Errorf("the guest measured %d sizes of %d and %s the restart", len(tab.Sizes), len(sizes), map[bool]string{true: "not", false: "did"}[tab.Restart == nil])
	}
	if len(tab.Unpinned) != len(sizes) {
		t.Errorf("the guest measured the runtime alone at %d sizes of %d", len(tab.Unpinned), len(sizes))
	}
	kubeletSizes := 0
	for _, n := range sizes {
		if n <= bench.KubeletMaxSize {
			kubeletSizes++
		}
	}
	if len(tab.Kubelet) != kubeletSizes {
		t.Errorf("the guest measured the kubelet anchor at %d sizes of %d", len(tab.Kubelet), kubeletSizes)
	}
	say("")
	say("cgdelegate bench-node: %s, %d CPUs on two NUMA nodes, containerd %s + runc %s under qemu TCG; %s, in %s.",
		v.Name, v.SMP, v.Containerd, runcVersion, time.Now().Format("2006-01-02"), since(start))
	say("")
	if err := bench.WriteTable(os.Stdout, tab); err != nil {
		t.Error(err)
	}
	say("")
	if err := bench.WriteBurst(os.Stdout, bursts, hook); err != nil {
		t.Error(err)
	}
}

// bootBench boots the bench VM, again if the emulated guest kernel crashes
// at boot (see runVariant), streaming the guest's progress to stdout;
// spec.LogPath is the last attempt's console log.
func bootBench(t *testing.T, log *slog.Logger, spec *bootSpec, workDir, name string) *consoleReport {
	t.Helper()
	verbose := os.Getenv("CGD_VM_VERBOSE") != ""
	for attempt := 1; ; attempt++ {
		spec.LogPath = filepath.Join(workDir, fmt.Sprintf("console-%s-%d.log", name, attempt))
		rep, err := boot(context.Background(), log.With("variant", name, "attempt", attempt), *spec, func(line string) {
			if verbose || strings.HasPrefix(line, "CGD-") || strings.Contains(line, "bench_test.go:") {
				fmt.Printf("guest: %s\n", strings.TrimSpace(line))
			}
		})
		if err == nil || !rep.KernelCrashed || attempt == maxBootAttempts {
			if err != nil {
				t.Errorf("boot %s failed: %v\nconsole log: %s\n--- console tail ---\n%s", name, err, spec.LogPath, fileTail(spec.LogPath, 60))
			}
			for _, p := range rep.Problems {
				t.Errorf("console: %s", p)
			}
			return rep
		}
		fmt.Printf("(attempt %d: the emulated guest kernel crashed: %s; booting again)\n", attempt, rep.CrashLine)
	}
}
