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

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// kernelArgs are the kernel parameters of every boot; the variant's cgd.*
// parameters follow them.
const kernelArgs = "console=ttyS0 panic=-1 oops=panic quiet loglevel=3 random.trust_cpu=on"

// cmdline is the kernel command line that boots v.
func cmdline(v variant.Variant) (string, error) {
	params, err := v.Encode()
	if err != nil {
		return "", err
	}
	if !v.AppArmor {
		// The kernel enables AppArmor by default: a boot that is not an
		// AppArmor node switches it off. On the busybox init nothing
		// mounts securityfs, so containerd applies no profile either way,
		// but a program that reads the module's parameter (critest's
		// AppArmor specs) would take the node for an AppArmor one.
		params = "apparmor=0 " + params
	}
	return kernelArgs + " " + params, nil
}

// suiteOf is the variants CGD_SUITE names: "" or "ci", the suite CI
// boots (variant.Suite, `make boots`); "extended", the long checks it
// leaves out (variant.Extended, `make boots-extended`); "conformance",
// SIG Node's critest with and without cgdelegate (variant.Conformance,
// `make boots-conformance`); "all", the three.
func suiteOf(env string) ([]variant.Variant, error) {
	switch env {
	case "", "ci":
		return variant.Suite(), nil
	case "extended":
		return variant.Extended(), nil
	case "conformance":
		return variant.Conformance(), nil
	case "all":
		return slices.Concat(variant.Suite(), variant.Extended(), variant.Conformance()), nil
	}
	return nil, fmt.Errorf("CGD_SUITE=%q: want ci, extended, conformance or all", env)
}

// selectVariants applies CGD_VARIANTS (comma-separated names or substrings)
// and CGD_SCENARIOS (comma-separated scenario identifiers) for quick
// iteration.
func selectVariants(all []variant.Variant) []variant.Variant {
	var out []variant.Variant
	filter := os.Getenv("CGD_VARIANTS")
	for _, v := range all {
		if filter != "" && !slices.ContainsFunc(strings.Split(filter, ","), func(f string) bool {
			return f != "" && strings.Contains(v.Name, f)
		}) {
			continue
		}
		if s := os.Getenv("CGD_SCENARIOS"); s != "" {
			want := strings.Split(s, ",")
			v.Scenarios = slices.DeleteFunc(slices.Clone(v.Scenarios), func(sc variant.Scenario) bool { return !slices.Contains(want, string(sc)) })
			if len(v.Scenarios) == 0 {
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
	suite, err := suiteOf(os.Getenv("CGD_SUITE"))
	if err != nil {
		t.Fatal(err)
	}
	vs := selectVariants(suite)
	if len(vs) == 0 {
		t.Fatal("CGD_VARIANTS/CGD_SCENARIOS selected no variant")
	}
	workDir := newWorkDir(t)
	arts, initrds := prepare(t, log, vs, workDir)
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) { runVariant(t, log, arts, initrds, workDir, v) })
	}
	log.Info("integration suite done", "took", time.Since(start).Round(time.Second))
	// A CI log is often read from its tail: say again there what failed.
	if b, err := os.ReadFile(filepath.Join(workDir, failuresFile)); err == nil && len(b) > 0 {
		t.Logf("the failed scenarios again, with their output:\n%s", b)
	}
}

// failuresFile, in a run's work dir, collects each failed scenario's
// output (reportScenarios) for TestVM to repeat at the end.
const failuresFile = "failures.txt"

// TestIngredients builds and caches what the selected variants boot (kernel,
// containerd, runc, the kubelet, the systemd root filesystem, the images and
// initramfs) without booting anything. `make integration` runs it first, on
// its own time limit: on a cold machine the builds alone take longer than
// the boots, and the suite's limit is for the boots.
func TestIngredients(t *testing.T) {
	if os.Getenv("CGD_INGREDIENTS") == "" {
		t.Skip("set CGD_INGREDIENTS=1 to build the VM ingredients only (make integration does)")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	suite, err := suiteOf(os.Getenv("CGD_SUITE"))
	if err != nil {
		t.Fatal(err)
	}
	vs := selectVariants(suite)
	if len(vs) == 0 {
		t.Fatal("CGD_VARIANTS/CGD_SCENARIOS selected no variant")
	}
	_, initrds := prepare(t, log, vs, newWorkDir(t))
	for k, p := range initrds {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("initramfs %s: %v", k, err)
		}
		t.Logf("initramfs %s: %d MiB", k, st.Size()>>20)
	}
}

// newWorkDir is a run's scratch directory, removed at the end; a failed
// run keeps its console logs, CGD_KEEP_WORKDIR keeps everything.
func newWorkDir(t *testing.T) string {
	t.Helper()
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
			// Keep the console logs and the control plane's logs, drop
			// the big build outputs.
			entries, _ := os.ReadDir(workDir)
			for _, e := range entries {
				if !strings.HasPrefix(e.Name(), "console-") && e.Name() != "cluster" {
					os.RemoveAll(filepath.Join(workDir, e.Name()))
				}
			}
			t.Logf("console logs kept in %s", workDir)
			return
		}
		os.RemoveAll(workDir)
	})
	return workDir
}

// prepare builds (or takes from the cache) everything vs boot and packs one
// initramfs per boot kind. The systemd root filesystem is built while the
// Go builds run: mmdebstrap mostly waits on the archive and dpkg, one core
// at most, so the two overlap well on a cold machine.
func prepare(t *testing.T, log *slog.Logger, vs []variant.Variant, workDir string) (*artifacts, map[bootKind]string) {
	t.Helper()
	start := time.Now()
	cacheDir := defaultCacheDir()
	var versions []string
	systemd, systemdPod, withKubelet, withCluster, engines, withCritest, previous := false, false, false, false, false, false, false
	for _, v := range vs {
		if !slices.Contains(versions, v.Containerd) {
			versions = append(versions, v.Containerd)
		}
		systemd = systemd || v.Systemd
		systemdPod = systemdPod || slices.Contains(v.Scenarios, variant.InPodSystemd)
		withKubelet = withKubelet || v.Kubelet
		withCluster = withCluster || v.Cluster
		engines = engines || v.NeedsEngines()
		withCritest = withCritest || v.RunsCritest()
		previous = previous || v.NeedsPrevious()
	}

	b := &builder{log: log, repo: repoRoot(t), cacheDir: cacheDir, workDir: workDir}
	ctx := context.Background()
	type rootfsResult struct {
		systemd, engines string
		err              error
	}
	// The root filesystems one after the other, beside the Go builds.
	rootfs := make(chan rootfsResult, 1)
	go func() {
		var r rootfsResult
		if systemd || systemdPod {
			r.systemd, r.err = b.debianRootfs(ctx, systemdRootfs)
			log.Info("systemd root filesystem ready", "took", time.Since(start).Round(time.Second), "err", r.err)
		}
		if engines && r.err == nil {
			r.engines, r.err = b.debianRootfs(ctx, enginesRootfs)
			log.Info("engines root filesystem ready", "took", time.Since(start).Round(time.Second), "err", r.err)
		}
		rootfs <- r
	}()
	arts, err := b.buildAll(ctx, versions, withKubelet, withCluster, withCritest)
	r := <-rootfs // never leave the goroutine behind, even on a failed build
	if err != nil {
		t.Fatalf("building the VM: %v", err)
	}
	log.Info("builds done", "took", time.Since(start).Round(time.Second))
	t.Run("build/plugin", func(t *testing.T) {
		if arts.PluginErr != nil {
			t.Fatalf("cgdelegate or cgdelegate-hook did not build; the scenarios that need them will fail:\n%v", arts.PluginErr)
		}
	})
	if r.err != nil {
		t.Fatalf("building the root filesystems: %v", r.err)
	}
	arts.SystemdRootfs = r.systemd
	if systemdPod {
		if arts.SystemdPodImage, err = b.systemdPodImage(arts.SystemdRootfs); err != nil {
			t.Fatalf("building the systemd pod image: %v", err)
		}
	}
	if engines {
		if arts.EnginesImage, err = b.enginesImage(r.engines, arts.Busybox); err != nil {
			t.Fatalf("building the engines image: %v", err)
		}
	}
	if previous && arts.Cluster != nil && arts.PluginErr == nil {
		if arts.Cluster.Previous, err = b.buildPrevious(ctx, arts.Cluster.Helm); err != nil {
			t.Fatalf("building the previous release: %v", err)
		}
	}
	// One initramfs per containerd version, init, kubelet and release
	// image: only the variants that need them carry their 90 and 35 MB.
	initrds := map[bootKind]string{}
	for _, v := range withFollowers(vs) {
		k := bootOf(v)
		if _, ok := initrds[k]; ok {
			continue
		}
		p := filepath.Join(workDir, "initramfs-"+k.String()+".cpio")
		if err := packInitramfs(p, arts, k); err != nil {
			t.Fatalf("initramfs: %v", err)
		}
		initrds[k] = p
	}
	log.Info("artifacts ready", "took", time.Since(start).Round(time.Second), "cache", cacheDir, "work", workDir)
	return arts, initrds
}

// bootKind tells the initramfs images of a run apart.
type bootKind struct {
	containerd       string
	systemd, kubelet bool
	release          bool // the release image's archive (variant.CarriesReleaseArchive)
	// cluster: kubectl, the guest's kubeconfigs and the network modules
	// (variant.Variant.Cluster).
	cluster bool
	// engines: the engines image (variant.Variant.NeedsEngines).
	engines bool
	// critest: critest and its images (variant.Variant.RunsCritest).
	critest bool
	// previous: the registry file names the previous release
	// (variant.Variant.NeedsPrevious).
	previous bool
}

// bootOf is the initramfs v boots.
func bootOf(v variant.Variant) bootKind {
	return bootKind{containerd: v.Containerd, systemd: v.Systemd, kubelet: v.RunsKubelet(), release: v.CarriesReleaseArchive(), cluster: v.Cluster, engines: v.NeedsEngines(), critest: v.RunsCritest(), previous: v.NeedsPrevious()}
}

func (k bootKind) String() string {
	s := k.containerd
	if k.systemd {
		s += "-systemd"
	}
	if k.kubelet {
		s += "-kubelet"
	}
	if k.release {
		s += "-release"
	}
	if k.cluster {
		s += "-cluster"
	}
	if k.engines {
		s += "-engines"
	}
	if k.critest {
		s += "-critest"
	}
	if k.previous {
		s += "-previous"
	}
	return s
}

// maxBootAttempts bounds the boots of one variant when the guest kernel
// crashes (see runVariant).
const maxBootAttempts = 3

// runVariant boots v (and its cluster's second node, when it has one:
// variant.MixedFleetNode) and reports each of its scenarios; initrds are
// prepare's.
func runVariant(t *testing.T, log *slog.Logger, arts *artifacts, initrds map[bootKind]string, workDir string, v variant.Variant) {
	initrd := initrds[bootOf(v)]
	cl, err := cmdline(v)
	if err != nil {
		t.Fatal(err)
	}
	spec := bootSpec{
		Kernel: arts.Kernel, Initramfs: initrd, Cmdline: cl,
		SMP: v.SMP, NUMA: v.NUMA, Net: v.Cluster, MemoryMiB: 2048, Accel: os.Getenv("CGD_QEMU_ACCEL"),
		BootTimeout: 3 * time.Minute,
		Timeout:     15 * time.Minute,
	}
	if v.Systemd {
		// Twice the initramfs, a copy into the tmpfs and systemd's own
		// start: about three times the busybox boot under TCG.
		spec.BootTimeout = 6 * time.Minute
	}
	if v.NeedsEngines() {
		// The engines image three times over (the initramfs, systemd's
		// copy into the tmpfs, containerd's content and snapshot) and the
		// engines' own containers.
		spec.MemoryMiB = 5120
	}
	if v.RunsKubelet() || slices.Contains(v.Scenarios, variant.ScaleChurn) {
		// The guest gives the tests 20 minutes instead of 10 (init.sh).
		spec.Timeout = 25 * time.Minute
	}
	if v.Cluster {
		// And 45 to the cluster boot's (guest-run.sh, init.sh).
		spec.Timeout = 50 * time.Minute
	}
	var (
		cp     *runningControlPlane
		second *follower
	)
	if v.Cluster {
		// The pod network's bridge first: the API server listens on it.
		h, err := upHostNetwork(log.With("variant", v.Name), clusterPlan, netLockPath)
		if err != nil {
			t.Fatalf("pod network for %s: %v", v.Name, err)
		}
		t.Cleanup(h.down)
		node := clusterPlan.Nodes[0]
		params, err := clusterPlan.KernelParams(node.Name)
		if err != nil {
			t.Fatal(err)
		}
		spec.Cmdline += " " + params
		spec.Tap, spec.MAC = node.Tap, node.MAC
		// The control plane runs on the host, not in the guest: under TCG
		// it would take the guest's CPU (see doc.go).
		dir := filepath.Join(workDir, "cluster", v.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if cp, err = startControlPlane(t, log.With("variant", v.Name), arts.Cluster, dir); err != nil {
			t.Fatalf("control plane for %s: %v", v.Name, err)
		}
		// The registry the guest pulls and installs from, the releases
		// pushed before the guest boots.
		reg := registryServer{IP: clusterHostIP, Port: arts.Cluster.RegistryPort, Dir: filepath.Join(dir, "registry")}
		if err := startRegistry(t, log.With("variant", v.Name), reg); err != nil {
			t.Fatalf("registry for %s: %v", v.Name, err)
		}
		rels := arts.Cluster.Releases
		if v.NeedsPrevious() && arts.Cluster.Previous != nil {
			// Only the boot that installs it (the guest is told of it
			// in the same case: bootKind.previous).
			rels = append([]builtRelease{*arts.Cluster.Previous}, rels...)
		}
		if err := publishReleases(context.Background(), log.With("variant", v.Name), reg, arts.Cluster.Helm, rels); err != nil {
			t.Fatalf("publishing the releases for %s: %v", v.Name, err)
		}
		// kubectl and helm for the guest's scenarios, on the host.
		if err := startWorkstation(t, log.With("variant", v.Name), arts.Cluster, dir); err != nil {
			t.Fatalf("workstation for %s: %v", v.Name, err)
		}
		// The second node boots beside the first and idles until the
		// first's ClusterMixedFleet asks it to join.
		if second = startSecondNode(t, log, arts, initrds, workDir, v); second != nil {
			defer second.stop() // before the control plane and the bridge go (t.Cleanup)
		}
	}
	if slices.Contains(v.Scenarios, variant.KubeletPinningOracle) {
		// The guest gives the oracle 45 minutes (init.sh).
		spec.Timeout = 50 * time.Minute
	}
	if v.RunsCritest() {
		// And critest's three passes 60 (init.sh).
		spec.Timeout = 65 * time.Minute
	}
	verbose := os.Getenv("CGD_VM_VERBOSE") != ""
	var rep *consoleReport
	for attempt := 1; ; attempt++ {
		spec.LogPath = filepath.Join(workDir, fmt.Sprintf("console-%s-%d.log", v.Name, attempt))
		rep, err = boot(context.Background(), log.With("variant", v.Name, "attempt", attempt), spec, func(line string) {
			if verbose || strings.HasPrefix(line, "CGD-") || strings.HasPrefix(line, "--- ") {
				t.Log(line)
			}
		})
		// Multi-threaded TCG occasionally loses a race with the kernel's
		// int3-based code patching (an "Oops: int3" in early boot, or
		// later where a static key flips; the guest holds the CFS
		// bandwidth one, see holdCFSBandwidth). That is the emulator, not
		// the product: boot again, loudly, a bounded number of times.
		if err == nil || !rep.KernelCrashed || attempt == maxBootAttempts {
			break
		}
		t.Logf("attempt %d of %s: guest kernel crashed (%s); booting again. Console log: %s",
			attempt, v.Name, rep.CrashLine, spec.LogPath)
	}
	if err != nil {
		noteFailure(spec.LogPath, fmt.Sprintf("%s: boot failed: %v\n%s", v.Name, err, fileTail(spec.LogPath, 40)))
		t.Errorf("boot %s failed: %v\nconsole log: %s\n--- console tail ---\n%s", v.Name, err, spec.LogPath, fileTail(spec.LogPath, 60))
	}
	for _, p := range rep.Problems {
		noteFailure(spec.LogPath, fmt.Sprintf("%s: console: %s", v.Name, p))
		t.Errorf("console: %s", p)
	}
	if second != nil {
		second.report(t)
	}
	if cp != nil {
		if err := cp.healthy(); err != nil {
			t.Error(err)
		}
	}
	if rep.Done != nil && rep.Done.Exit != 0 {
		t.Logf("guest test binary exited %d", rep.Done.Exit)
	}
	reportScenarios(t, rep, v.Scenarios, "the guest", spec.LogPath)
	for sc := range rep.Results {
		if !slices.Contains(v.Scenarios, sc) {
			t.Errorf("guest reported unexpected scenario %s", sc)
		}
	}
}

// reportScenarios makes a subtest of each scenario of a guest (where, as
// "the guest" or "the second node") from its console report: its metrics
// logged, passed, or failed with its output (no result: the console log
// at logPath says why).
func reportScenarios(t *testing.T, rep *consoleReport, scenarios []variant.Scenario, where, logPath string) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(string(sc), func(t *testing.T) {
			res, ok := rep.Results[sc]
			out := strings.Join(rep.Output[sc], "\n")
			for _, m := range rep.Metrics[sc] {
				t.Logf("%s", m)
			}
			switch {
			case !ok:
				noteFailure(logPath, fmt.Sprintf("%s: no result from %s (console log %s):\n%s", t.Name(), where, logPath, tail(out, 40)))
				t.Fatalf("no result from %s for %s (console log %s)\n%s", where, sc, logPath, out)
			case res.Result == "pass":
				t.Logf("passed on %s in %.1fs", where, res.Seconds)
			default:
				noteFailure(logPath, fmt.Sprintf("%s: %s on %s (%.1fs):\n%s", t.Name(), res.Result, where, res.Seconds, tail(out, 40)))
				t.Fatalf("%s on %s (%.1fs):\n%s", res.Result, where, res.Seconds, out)
			}
		})
	}
}

// noteFailure appends a failure to the failures file beside the console
// log at logPath (best effort: the failure is reported anyway).
func noteFailure(logPath, text string) {
	f, err := os.OpenFile(filepath.Join(filepath.Dir(logPath), failuresFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\n\n", text)
}

func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tail(string(b), n)
}
