//go:build integration_vm

package vm

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// TestDemo is `make demo`: it builds (or reuses) the VM artifacts, boots one
// VM (variant.DemoVariant) and prints, as a story, what the guest's Demo
// scenario observed. It fails when the build or the boot fails, the
// scenario fails, or any step of the story was not observed; the pinning
// step is required when the variant pins CPUs. It runs only with CGD_DEMO=1 (make demo sets it),
// so that `make integration` does not boot it.
func TestDemo(t *testing.T) {
	if os.Getenv("CGD_DEMO") == "" {
		t.Skip("the demo runs with CGD_DEMO=1: use make demo")
	}
	start := time.Now()
	out := os.Stdout
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	v := variant.DemoVariant()
	workDir, err := os.MkdirTemp("", "cgd-demo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CGD_KEEP_WORKDIR") != "" {
			t.Logf("console log kept in %s", workDir)
			return
		}
		os.RemoveAll(workDir)
	})

	shape := fmt.Sprintf("%d CPUs", v.SMP)
	if v.NUMA {
		shape += " on two NUMA nodes"
	}
	say("cgdelegate demo: one VM (qemu, %s), pure cgroup v2 with nsdelegate, containerd %s, runc %s,", shape, v.Containerd, runcVersion)
	say("cgdelegate as an external NRI plugin, pods driven through the CRI as a kubelet would.")
	cacheDir := defaultCacheDir()
	say("Building the VM (the first run builds containerd and runc and downloads a kernel: about 9 minutes on")
	say("2 CPUs, each step logged on stderr as it starts and ends; later runs reuse %s)...", cacheDir)
	// The build logs each ingredient it builds at info, with its time, so
	// that a first run is not minutes of silence; the boot stays at warn.
	buildLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b := &builder{log: buildLog, repo: repoRoot(t), cacheDir: cacheDir, workDir: workDir}
	arts, err := b.buildAll(context.Background(), []string{v.Containerd}, v.Kubelet, v.Cluster, v.RunsCritest())
	if err != nil {
		t.Fatalf("building the VM: %v", err)
	}
	if arts.PluginErr != nil {
		t.Fatalf("cgdelegate did not build:\n%v", arts.PluginErr)
	}
	initrd := filepath.Join(workDir, "initramfs.cpio")
	if err := packInitramfs(initrd, arts, bootOf(v)); err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	say("Built in %s. Booting the VM (software emulation; about a minute)...", since(start))
	say("")

	tr, rep, logPath, err := bootDemo(log, arts, initrd, workDir, v, out)
	var problems []string
	if err != nil {
		problems = append(problems, fmt.Sprintf("boot: %v\n--- console tail ---\n%s", err, fileTail(logPath, 40)))
	}
	for _, p := range rep.Problems {
		problems = append(problems, "console: "+p)
	}
	switch res, ok := rep.Results[variant.Demo]; {
	case !ok:
		problems = append(problems, "the guest reported no result for the Demo scenario:\n"+strings.Join(rep.Output[variant.Demo], "\n"))
	case res.Result != "pass":
		problems = append(problems, fmt.Sprintf("the guest's Demo scenario: %s:\n%s", res.Result, strings.Join(rep.Output[variant.Demo], "\n")))
	}
	want := demoSteps
	if v.Pinning {
		want = append(want[:len(want):len(want)], demoStepPinning)
	}
	if m := tr.Missing(want); len(m) > 0 {
		problems = append(problems, "steps not observed in the VM: "+strings.Join(m, ", "))
	}
	say("")
	if len(problems) > 0 {
		say("The demo FAILED after %s (console log: %s):", since(start), logPath)
		for _, p := range problems {
			t.Error(p)
		}
		return
	}
	say("Every step above was observed in the VM. Demo done in %s.", since(start))
}

// bootDemo boots the demo VM, printing each story line to out as it
// arrives, again if the emulated guest kernel crashes at boot.
func bootDemo(log *slog.Logger, arts *artifacts, initrd, workDir string, v variant.Variant, out io.Writer) (*demoTranscript, *consoleReport, string, error) {
	cl, err := cmdline(v)
	if err != nil {
		return &demoTranscript{}, newConsoleReport(), "", err
	}
	spec := bootSpec{
		Kernel: arts.Kernel, Initramfs: initrd, Cmdline: cl,
		SMP: v.SMP, NUMA: v.NUMA, MemoryMiB: 2048, Accel: os.Getenv("CGD_QEMU_ACCEL"),
		BootTimeout: 3 * time.Minute,
		Timeout:     12 * time.Minute,
	}
	for attempt := 1; ; attempt++ {
		tr := &demoTranscript{}
		spec.LogPath = filepath.Join(workDir, fmt.Sprintf("console-demo-%d.log", attempt))
		rep, err := boot(context.Background(), log, spec, func(line string) {
			if text, ok := tr.Feed(line); ok {
				fmt.Fprintf(out, "%s\n", text)
			}
		})
		// Multi-threaded TCG occasionally crashes the guest kernel in
		// early boot (see runVariant): that is the emulator; boot again.
		if err == nil || !rep.KernelCrashed || attempt == maxBootAttempts {
			return tr, rep, spec.LogPath, err
		}
		fmt.Fprintf(out, "(the emulated guest kernel crashed while booting: %s; booting again)\n", rep.CrashLine)
	}
}

func since(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	if d < time.Minute {
		return d.String()
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}
