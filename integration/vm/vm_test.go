//go:build integration_vm

package vm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// variant is one boot of the VM: a host configuration and the guest
// scenarios that run in it. Every listed scenario must report a result.
type variant struct {
	Name       string
	Containerd string // containerd24 or containerd23
	NSDelegate bool   // mount cgroup2 with nsdelegate
	// Plugin is how cgdelegate runs: "external" (started by the guest suite,
	// connects to /var/run/nri/nri.sock), "preregistered" (copied to
	// /opt/nri/plugins, started by containerd) or "none".
	Plugin string
	// CgroupWritable sets cgroup_writable = true on containerd's default
	// runtime (the runc-writable runtime handler always has it).
	CgroupWritable bool
	// Pinning turns on cgdelegate's CPU pinning (cpuPinning: true).
	Pinning bool
	SMP     int
	NUMA    bool
	Tests   []string
}

// Scenarios of issue 3; TestHarness checks the harness itself.
var (
	nsdelegateScenarios = []string{
		"TestHarness",
		"TestS01AnnotatedWritable",
		"TestS02UnannotatedReadOnly",
		"TestS03OwnLimitsProtected",
		"TestS04CgroupBomb",
		"TestS07HookRefusesAfterRemount",
		"TestS08UsernsPod",
		"TestS09PluginMode",
		"TestS10Restarts",
	}
	noNSDelegateScenarios = []string{"TestHarness", "TestS05NoNsdelegate", "TestS06GuardCgroupWritable"}
	// Scenarios of issue 4 (CPU pinning), on -smp 4 with two NUMA nodes.
	pinningScenarios = []string{
		"TestHarness",
		"TestNUMATopology",
		"TestPinningPodBudget",
		"TestPinningDynamicAdd",
		"TestPinningPluginRestartDuringChurn",
	}
)

func variants() []variant {
	return []variant{
		{Name: "ctd24-nsdelegate-external", Containerd: containerd24, NSDelegate: true, Plugin: "external", Tests: nsdelegateScenarios},
		{
			Name: "ctd24-nsdelegate-preregistered", Containerd: containerd24, NSDelegate: true, Plugin: "preregistered",
			Tests: []string{"TestHarness", "TestS01AnnotatedWritable", "TestS09PluginMode", "TestS10Restarts"},
		},
		{Name: "ctd24-no-nsdelegate", Containerd: containerd24, Plugin: "external", Tests: noNSDelegateScenarios},
		// Every container of the default runtime is writable here, so the
		// guard refuses them all: only the guard scenario fits.
		{
			Name: "ctd24-no-nsdelegate-cgroup-writable", Containerd: containerd24, Plugin: "external", CgroupWritable: true,
			Tests: []string{"TestS06GuardCgroupWritable"},
		},
		{Name: "ctd23-nsdelegate-external", Containerd: containerd23, NSDelegate: true, Plugin: "external", Tests: nsdelegateScenarios},
		{Name: "ctd23-no-nsdelegate", Containerd: containerd23, Plugin: "external", Tests: noNSDelegateScenarios},
		{
			Name: "ctd24-numa-smp4", Containerd: containerd24, NSDelegate: true, Plugin: "external", Pinning: true, SMP: 4, NUMA: true,
			Tests: pinningScenarios,
		},
	}
}

func (v variant) cmdline() string {
	b := func(x bool) int {
		if x {
			return 1
		}
		return 0
	}
	return strings.Join([]string{
		"console=ttyS0", "panic=-1", "oops=panic", "quiet", "loglevel=3", "random.trust_cpu=on",
		"cgd.variant=" + v.Name,
		fmt.Sprintf("cgd.nsdelegate=%d", b(v.NSDelegate)),
		"cgd.plugin=" + v.Plugin,
		fmt.Sprintf("cgd.cgroup_writable=%d", b(v.CgroupWritable)),
		fmt.Sprintf("cgd.pinning=%d", b(v.Pinning)),
		"cgd.containerd=" + v.Containerd,
		"cgd.tests=" + strings.Join(v.Tests, ","),
	}, " ")
}

// selectVariants applies CGD_VARIANTS (comma-separated names or substrings)
// and CGD_SCENARIOS (comma-separated guest test names) for quick iteration.
func selectVariants(all []variant) []variant {
	var out []variant
	filter := os.Getenv("CGD_VARIANTS")
	for _, v := range all {
		if filter != "" && !slices.ContainsFunc(strings.Split(filter, ","), func(f string) bool {
			return f != "" && strings.Contains(v.Name, f)
		}) {
			continue
		}
		if s := os.Getenv("CGD_SCENARIOS"); s != "" {
			want := strings.Split(s, ",")
			v.Tests = slices.DeleteFunc(slices.Clone(v.Tests), func(t string) bool { return !slices.Contains(want, t) })
			if len(v.Tests) == 0 {
				continue
			}
		}
		out = append(out, v)
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the repository")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// TestVM builds everything, boots every variant and reports each guest
// scenario as variant/scenario.
func TestVM(t *testing.T) {
	start := time.Now()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cacheDir := defaultCacheDir()
	workDir, err := os.MkdirTemp("", "cgd-vm-")
	if err != nil {
		t.Fatal(err)
	}
	keep := os.Getenv("CGD_KEEP_WORKDIR") != ""
	t.Cleanup(func() {
		if keep {
			t.Logf("work dir kept: %s", workDir)
			return
		}
		if t.Failed() {
			// Keep the console logs, drop the big build outputs.
			entries, _ := os.ReadDir(workDir)
			for _, e := range entries {
				if !strings.HasPrefix(e.Name(), "console-") {
					os.RemoveAll(filepath.Join(workDir, e.Name()))
				}
			}
			t.Logf("console logs kept in %s", workDir)
			return
		}
		os.RemoveAll(workDir)
	})

	vs := selectVariants(variants())
	if len(vs) == 0 {
		t.Fatal("CGD_VARIANTS/CGD_SCENARIOS selected no variant")
	}
	var versions []string
	for _, v := range vs {
		if !slices.Contains(versions, v.Containerd) {
			versions = append(versions, v.Containerd)
		}
	}

	b := &builder{log: log, repo: repoRoot(t), cacheDir: cacheDir, workDir: workDir}
	ctx := context.Background()
	arts, err := b.buildAll(ctx, versions)
	if err != nil {
		t.Fatalf("building the VM: %v", err)
	}
	t.Run("build/plugin", func(t *testing.T) {
		if arts.PluginErr != nil {
			t.Fatalf("cgdelegate or cgdelegate-hook did not build; the scenarios that need them will fail:\n%v", arts.PluginErr)
		}
	})
	initrds := map[string]string{}
	for _, v := range versions {
		p := filepath.Join(workDir, "initramfs-"+v+".cpio")
		if err := packInitramfs(p, arts, v); err != nil {
			t.Fatalf("initramfs: %v", err)
		}
		initrds[v] = p
	}
	log.Info("artifacts ready", "took", time.Since(start).Round(time.Second), "cache", cacheDir, "work", workDir)

	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) { runVariant(t, log, arts, initrds[v.Containerd], workDir, v) })
	}
	log.Info("integration suite done", "took", time.Since(start).Round(time.Second))
}

// maxBootAttempts bounds the boots of one variant when the guest kernel
// crashes (see runVariant).
const maxBootAttempts = 3

func runVariant(t *testing.T, log *slog.Logger, arts *artifacts, initrd, workDir string, v variant) {
	smp := v.SMP
	if smp == 0 {
		smp = 2
	}
	spec := bootSpec{
		Kernel: arts.Kernel, Initramfs: initrd, Cmdline: v.cmdline(),
		SMP: smp, NUMA: v.NUMA, MemoryMiB: 2048, Accel: os.Getenv("CGD_QEMU_ACCEL"),
		BootTimeout: 3 * time.Minute,
		Timeout:     15 * time.Minute,
	}
	verbose := os.Getenv("CGD_VM_VERBOSE") != ""
	var (
		rep *consoleReport
		err error
	)
	for attempt := 1; ; attempt++ {
		spec.LogPath = filepath.Join(workDir, fmt.Sprintf("console-%s-%d.log", v.Name, attempt))
		rep, err = boot(context.Background(), log.With("variant", v.Name, "attempt", attempt), spec, func(line string) {
			if verbose || strings.HasPrefix(line, "CGD-") || strings.HasPrefix(line, "--- ") {
				t.Log(line)
			}
		})
		// Multi-threaded TCG occasionally loses a race with the kernel's
		// int3-based code patching (an "Oops: int3" in early boot). That is
		// the emulator, not the product: boot again, loudly, a bounded
		// number of times.
		if err == nil || !rep.KernelCrashed || attempt == maxBootAttempts {
			break
		}
		t.Logf("attempt %d of %s: guest kernel crashed (%s); booting again. Console log: %s",
			attempt, v.Name, rep.CrashLine, spec.LogPath)
	}
	if err != nil {
		t.Errorf("boot %s failed: %v\nconsole log: %s\n--- console tail ---\n%s", v.Name, err, spec.LogPath, fileTail(spec.LogPath, 60))
	}
	for _, p := range rep.Problems {
		t.Errorf("console: %s", p)
	}
	if rep.Done != nil && rep.Done.Exit != 0 {
		t.Logf("guest test binary exited %d", rep.Done.Exit)
	}
	for _, name := range v.Tests {
		t.Run(name, func(t *testing.T) {
			res, ok := rep.Results[name]
			out := strings.Join(rep.Output[name], "\n")
			switch {
			case !ok:
				t.Fatalf("no result from the guest for %s (console log %s)\n%s", name, spec.LogPath, out)
			case res.Result == "pass":
				t.Logf("passed in the guest in %.1fs", res.Seconds)
			default:
				t.Fatalf("%s in the guest (%.1fs):\n%s", res.Result, res.Seconds, out)
			}
		})
	}
	for name := range rep.Results {
		if !slices.Contains(v.Tests, name) {
			t.Errorf("guest reported unexpected scenario %s", name)
		}
	}
}

func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tail(string(b), n)
}
