//go:build integration_guest

package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/cgdelegate/cgdelegate/integration/internal/critest"
	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// critest's registry, its logs and reports, and the bound of one pass.
const (
	critestMirror  = "127.0.0.1:5000"
	critestLogDir  = "/var/log/critest"
	critestTimeout = 18 * time.Minute
)

// criConformance runs critest once per critest.Passes entry, compares each
// pass with cgdelegate to the one without, prints the counts of each
// (CGD-METRIC critest-<pass>) and fails on a difference docs/critest.md
// does not explain.
func criConformance(t *testing.T, e *guestEnv) {
	if e.variant.Plugin != variant.PluginExternal || e.plugin == nil {
		t.Fatalf("variant %s: the passes stop and reconfigure cgdelegate, which needs the external plugin, not %s", e.variant.Name, e.variant.Plugin)
	}
	ctx := context.Background()
	if err := loadCritestModules(); err != nil {
		t.Fatal(err)
	}
	stop, err := serveCritestImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	shipped, err := shippedConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shipped, "guard: enforce\n") {
		t.Fatalf("the shipped config does not set guard: enforce, which the passes with cgdelegate run with:\n%s", shipped)
	}
	t.Cleanup(func() { e.restorePluginConfig(t) })
	var baseline critest.Result
	for i, p := range critest.Passes {
		if err := e.configureForPass(ctx, p, shipped); err != nil {
			t.Fatalf("pass %s: %v", p.Name, err)
		}
		if err := e.removeCritestImages(ctx); err != nil {
			t.Fatalf("pass %s: %v", p.Name, err)
		}
		start := time.Now()
		res, err := runCritest(ctx, p.Name)
		if err != nil {
			t.Fatalf("pass %s: %v", p.Name, err)
		}
		c := res.Counts()
		t.Logf("critest %s, pass %s (%s): %s in %s", critest.Version, p.Name, passSummary(p), c, time.Since(start).Round(time.Second))
		clusterMetric(t, string(variant.CRIConformance), "critest-"+p.Name, map[string]float64{
			"specs": float64(c.Specs), "passed": float64(c.Passed), "failed": float64(c.Failed),
			"skipped": float64(c.Skipped), "skipped_by_name": float64(c.ByName), "seconds": seconds(time.Since(start)),
		})
		if i == 0 {
			// The skipped specs once: they skip alike in every pass
			// (a difference would show below).
			for _, sk := range res.Skipped() {
				t.Logf("pass %s: skipped: %s: %s", p.Name, sk.Name, firstLines(sk.Message, 1))
			}
		}
		for _, f := range res.Failures() {
			t.Logf("pass %s: failed: %s\n    %s", p.Name, f.Name, strings.ReplaceAll(firstLines(f.Message, 6), "\n", "\n    "))
		}
		if e.plugin.Running() != p.Plugin {
			t.Errorf("pass %s: cgdelegate running = %v after critest, want %v; its log:\n%s", p.Name, e.plugin.Running(), p.Plugin, fileTail(e.paths.PluginLog, 30))
		}
		if i == 0 {
			baseline = res
			continue
		}
		ds := critest.Compare(baseline, res, p.Name)
		for _, d := range ds {
			if d.Explained != "" {
				t.Logf("pass %s: %s", p.Name, d)
			}
		}
		for _, d := range critest.Unexplained(ds) {
			t.Errorf("pass %s: %s; not explained in docs/critest.md", p.Name, d)
		}
	}
}

func passSummary(p critest.Pass) string {
	switch {
	case !p.Plugin:
		return "without cgdelegate"
	case p.Extra == "":
		return "cgdelegate with the shipped config"
	}
	return "cgdelegate with the shipped config and " + strings.ReplaceAll(strings.TrimSpace(p.Extra), "\n", ", ")
}

// shippedConfig is the shipped ConfigMap's config.yaml (contrib/kubernetes,
// what the chart renders with its defaults).
func shippedConfig() (string, error) {
	_, cm, err := manifests.Shipped()
	if err != nil {
		return "", err
	}
	c, ok := cm.Data["config.yaml"]
	if !ok {
		return "", fmt.Errorf("the shipped ConfigMap has no config.yaml: keys %v", cm.Data)
	}
	return c, nil
}

// configureForPass stops cgdelegate for a pass without it, or (re)starts it
// with the shipped config and the pass's additions.
func (e *guestEnv) configureForPass(ctx context.Context, p critest.Pass, shipped string) error {
	if err := e.plugin.Stop(20 * time.Second); err != nil {
		return err
	}
	if !p.Plugin {
		return nil
	}
	if err := writeFile(e.paths.PluginYAML, shipped+p.Extra); err != nil {
		return err
	}
	return e.startPlugin(ctx, fileSize(e.paths.ContainerdLog))
}

// removeCritestImages removes what an earlier pass pulled, so that each
// pass pulls the same images.
func (e *guestEnv) removeCritestImages(ctx context.Context) error {
	out, err := e.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return err
	}
	var names []string
	for _, n := range strings.Fields(out) {
		for _, r := range critest.Registries {
			if strings.HasPrefix(n, r+"/") {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	_, err = e.ctr(ctx, append([]string{"images", "rm"}, names...)...)
	return err
}

// serveCritestImages serves critest's images on critestMirror (an
// in-memory registry) and makes it containerd's mirror for every registry
// they name (hosts.toml; containerd reads it at each pull).
func serveCritestImages(ctx context.Context) (stop func(), err error) {
	l, err := net.Listen("tcp", critestMirror)
	if err != nil {
		return nil, fmt.Errorf("critest registry: %w", err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(l) }()
	stop = func() { _ = srv.Close() }
	imgs := critest.Images(critest.Userland{})
	for i, img := range imgs {
		tar := filepath.Join(critest.ImagesDir, fmt.Sprintf("%d.tar", i))
		for _, ref := range img.Refs {
			_, path, err := critest.RegistryPath(ref)
			if err != nil {
				stop()
				return nil, err
			}
			if _, err := ociimage.PushArchive(ctx, tar, critestMirror+"/"+path, ociimage.PushOptions{PlainHTTP: true}); err != nil {
				stop()
				return nil, fmt.Errorf("critest registry: push %s as %s: %w", tar, ref, err)
			}
		}
	}
	for _, host := range critest.Registries {
		dir := filepath.Join(containerdHostsDir, host)
		toml := "# critest's images, from the VM's own registry (integration/guest/critest_test.go).\n" +
			"server = \"https://" + host + "\"\n\n[host.\"http://" + critestMirror + "\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
		if err := writeFile(filepath.Join(dir, "hosts.toml"), toml); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// runCritest runs critest against containerd (its NRI tests too, on the
// NRI socket) with Skips skipped by name, in a fixed order, each failed
// spec tried once more (in every pass alike), and reads its JSON report.
// critest exits non-zero when a spec fails; only a missing report is an
// error.
func runCritest(ctx context.Context, pass string) (critest.Result, error) {
	if err := os.MkdirAll(critestLogDir, 0o755); err != nil {
		return critest.Result{}, err
	}
	report := filepath.Join(critestLogDir, pass+".json")
	logPath := filepath.Join(critestLogDir, pass+".log")
	_ = os.Remove(report)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return critest.Result{}, err
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(ctx, critestTimeout+time.Minute)
	defer cancel()
	endpoint := "unix://" + env.paths.ContainerdSocket
	cmd := exec.CommandContext(ctx, critest.GuestBinary,
		"-runtime-endpoint", endpoint, "-image-endpoint", endpoint,
		"-nri-socket", "/var/run/nri/nri.sock",
		"-ginkgo.skip", critest.SkipPattern(),
		"-ginkgo.json-report", report,
		"-ginkgo.seed", "1", "-ginkgo.flake-attempts", "2",
		"-ginkgo.timeout", critestTimeout.String(), "-ginkgo.no-color",
	)
	cmd.Dir = critestLogDir
	cmd.Stdout, cmd.Stderr = logf, logf
	runErr := cmd.Run()
	f, err := os.Open(report)
	if err != nil {
		return critest.Result{}, fmt.Errorf("critest wrote no report (critest: %w): %w\n%s", runErr, err, fileTail(logPath, 40))
	}
	defer f.Close()
	res, err := critest.ReadReport(f)
	if err != nil {
		return critest.Result{}, fmt.Errorf("%w\n%s", err, fileTail(logPath, 40))
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return critest.Result{}, fmt.Errorf("critest: %w", runErr)
	}
	return res, nil
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}

// loadCritestModules loads critest.Modules (bridge and what it needs) for
// critest's brctl specs; a module already loaded is fine.
func loadCritestModules() error {
	for _, m := range critest.Modules {
		p := filepath.Join(critest.ModulesDir, filepath.Base(m))
		out, err := exec.Command("insmod", p).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "File exists") {
			return fmt.Errorf("insmod %s: %w: %s", p, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
