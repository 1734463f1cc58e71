//go:build integration_guest

package guest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
	"github.com/cgdelegate/cgdelegate/internal/host"
)

// paths are the guest file locations the suite uses.
type paths struct {
	CgroupRoot       string
	ContainerdConfig string
	ContainerdLog    string
	ContainerdSocket string
	PluginBinary     string
	PluginLog        string
	PluginYAML       string // the external plugin's -config file (also read by cgdelegate status)
	PluginPreinstall string // pre-registered plugin path
	PluginConfig     string // pre-registered plugin config (Configure blob)
	PluginBuildError string // written by the host when the plugin did not build
	HookBinary       string
	ImagesDir        string
	KubeletBinary    string
	KubeletConfig    string
	KubeletLog       string
	KubeletRoot      string
	StaticPods       string // the kubelet's staticPodPath
}

func defaultPaths() paths {
	return paths{
		CgroupRoot:       "/sys/fs/cgroup",
		ContainerdConfig: "/etc/containerd/config.toml",
		ContainerdLog:    "/var/log/containerd.log",
		ContainerdSocket: "/run/containerd/containerd.sock",
		PluginBinary:     "/usr/local/bin/cgdelegate",
		PluginLog:        "/var/log/cgdelegate.log",
		PluginYAML:       "/etc/cgdelegate/config.yaml",
		PluginPreinstall: "/opt/nri/plugins/10-cgdelegate",
		PluginConfig:     "/etc/nri/conf.d/10-cgdelegate.conf",
		PluginBuildError: "/cgd/plugin-build-error",
		HookBinary:       "/usr/local/bin/cgdelegate-hook",
		ImagesDir:        "/cgd/images",
		KubeletBinary:    "/usr/local/bin/kubelet",
		KubeletConfig:    "/etc/kubernetes/kubelet.yaml",
		KubeletLog:       "/var/log/kubelet.log",
		KubeletRoot:      "/var/lib/kubelet",
		StaticPods:       "/etc/kubernetes/manifests",
	}
}

// Images imported from the initramfs (written by integration/vm).
const (
	busyboxImage = "cgd.local/busybox:1"
	pauseImage   = "cgd.local/pause:1"
	// containerdDropIn is contrib/containerd/cgdelegate.toml, put there by
	// integration/vm.
	containerdDropIn = "/etc/containerd/conf.d/cgdelegate.toml"
	// writableHandler is a runtime handler with cgroup_writable = true.
	writableHandler = "runc-writable"
)

// guestEnv is the live VM state shared by the scenarios.
type guestEnv struct {
	variant    variant.Variant
	paths      paths
	log        *slog.Logger
	cri        *cri.Client
	containerd *daemon
	// containerdUnit says containerd runs as containerd.service, no
	// longer as containerd (ClusterRuntimeDropIn moved it there).
	containerdUnit bool
	plugin         *daemon // external mode only
	// kubelet is started by the first Kubelet scenario (requireKubelet),
	// or registered with the host's API server by the first Cluster one
	// (requireCluster); kubeletErr says why it is not running.
	kubelet    *kubeletEnv
	kubeletErr error
	// cluster is the registered kubelet's Node (requireCluster).
	cluster *clusterEnv
	// dsPlugin is cgdelegate as the DaemonSet's static pod, deployed by
	// the first scenario that needs it (requireDaemonSetPlugin); its
	// failure is pluginErr.
	dsPlugin *daemonSetPlugin
	// clusterObs are cgdelegate's views of the debug and resize steps,
	// kept for ClusterPinningOracle.
	clusterObs clusterObservations
	// engines is the engines image's import (startEnginesImport).
	engines *enginesImport
	// helm is cgdelegate installed with helm by the first scenario that
	// needs it (requireHelmPlugin); its failure is pluginErr.
	helm *helmInstall
	// registry is the cluster's registry and the releases in it; nil
	// outside the cluster boot.
	registry *variant.Registry
	// podnet is the cluster's pod network on this node (Cluster variants).
	podnet *podNetwork
	// engineProfiles says cgdelegate's engine profiles are installed on
	// the node (loadEngineProfiles).
	engineProfiles bool
	// setupErr fails every scenario when the VM could not be prepared.
	setupErr error
	// pluginErr says why the plugin is not running.
	pluginErr error
}

// env is set by TestMain before any test runs.
var env *guestEnv

func TestMain(m *testing.M) {
	flag.Parse()
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		fmt.Printf("CGD-FATAL cannot read /proc/cmdline: %v\n", err)
		os.Exit(2)
	}
	v, err := variant.Decode(string(cmdline))
	if err != nil {
		fmt.Printf("CGD-FATAL boot variant: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(2)
	}
	e := &guestEnv{
		variant: v,
		paths:   defaultPaths(),
		log:     slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	env = e
	start := time.Now()
	e.setupErr = e.setup()
	if e.setupErr != nil {
		e.log.Error("VM setup failed; every scenario will fail", "err", e.setupErr)
	} else {
		e.log.Info("VM ready", "took", time.Since(start).Round(100*time.Millisecond), "variant", v.Name, "plugin", v.Plugin, "pluginErr", e.pluginErr)
	}
	code := m.Run()
	if code != 0 {
		e.dumpLogs()
	}
	e.shutdown()
	os.Exit(code)
}

// requirePlugin fails the scenario when cgdelegate is not running.
func (e *guestEnv) requirePlugin(t *testing.T) {
	t.Helper()
	if e.variant.Plugin == variant.PluginNone {
		t.Fatalf("scenario needs cgdelegate but variant %s runs without it", e.variant.Name)
	}
	if e.variant.Plugin == variant.PluginHelm {
		e.requireHelmPlugin(t)
		return
	}
	if e.pluginErr != nil {
		t.Fatalf("cgdelegate is not running: %v", e.pluginErr)
	}
	if e.plugin != nil && !e.plugin.Running() {
		t.Fatalf("cgdelegate (external) has exited; log tail:\n%s", fileTail(e.paths.PluginLog, 30))
	}
}

func (e *guestEnv) setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// systemd mounted cgroup2 with nsdelegate; a variant without it gets
	// the same mount without (init.sh mounts it so for the busybox ones).
	if e.variant.Systemd && !e.variant.NSDelegate {
		if err := e.cgroupRemount(false); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	if err := holdCFSBandwidth(e.paths.CgroupRoot); err != nil {
		e.log.Warn("the CFS bandwidth static key is not held; the guest may die of an Oops: int3 under TCG", "err", err)
	}
	if err := os.MkdirAll(filepath.Dir(e.paths.ContainerdConfig), 0o755); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if err := os.WriteFile(e.paths.ContainerdConfig, []byte(containerdConfig(e.variant)), 0o644); err != nil {
		return fmt.Errorf("setup: containerd config: %w", err)
	}
	reg, err := loadRegistry()
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if e.registry = reg; reg != nil {
		if err := writeRegistryHosts(e.registry.Host); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	e.pluginErr = e.pluginAvailable()
	// The DaemonSet's pod brings its own config (the ConfigMap's).
	if !e.variant.NeedsReleaseImage() {
		if err := writeFile(e.paths.PluginYAML, pluginConfigYAML(e.variant)); err != nil {
			return fmt.Errorf("setup: plugin config: %w", err)
		}
	}
	if e.pluginErr == nil && e.variant.Plugin == variant.PluginPreregistered {
		if err := e.preinstallPlugin(); err != nil {
			return err
		}
	}
	// The CNI network list before containerd reads its directory.
	if e.variant.Cluster {
		if err := e.setupPodNetwork(); err != nil {
			return err
		}
	}
	e.containerd = &daemon{name: "containerd", path: "containerd", args: []string{"--config", e.paths.ContainerdConfig}, logPath: e.paths.ContainerdLog}
	if err := e.startContainerd(ctx); err != nil {
		return err
	}
	if err := e.importImages(ctx); err != nil {
		return err
	}
	// The DaemonSet's pod starts with the kubelet, in the first scenario
	// that needs it (requireDaemonSetPlugin).
	if e.pluginErr == nil && e.variant.Plugin != variant.PluginNone && !e.variant.NeedsReleaseImage() {
		e.pluginErr = e.startPlugin(ctx, 0)
	}
	return nil
}

// cfsBandwidthHold is the empty cgroup below the root whose CPU quota
// stays for the whole boot (holdCFSBandwidth).
const cfsBandwidthHold = "cgd-cfs-bandwidth-hold"

// holdCFSBandwidth puts a CPU quota on an empty cgroup of its own for the
// whole boot. The kernel switches its CFS bandwidth static key by live code
// patching (int3 first, then the new bytes) whenever the first CPU quota on
// the node is set or the last one goes, which pods with CPU limits do all
// the time; under multi-threaded TCG that patching sometimes races the
// emulator and the guest dies with "Oops: int3" in enqueue_entity or
// update_curr (twice in one boot of ctd24-daemonset-Kubelet). With a quota
// that stays, the key is switched once, here, before any container runs.
// The quota (ten CPUs) never throttles: no task is in the cgroup.
func holdCFSBandwidth(root string) error {
	cg := host.NewFS(root, "/sys")
	if err := cg.Write("", "cgroup.subtree_control", "+cpu"); err != nil {
		return err
	}
	if err := os.Mkdir(cg.Dir(cfsBandwidthHold), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("hold the CFS bandwidth key: %w", err)
	}
	return cg.Write(cfsBandwidthHold, "cpu.max", "1000000 100000")
}

func (e *guestEnv) pluginAvailable() error {
	if e.variant.Plugin == variant.PluginNone {
		return errors.New("variant runs without cgdelegate")
	}
	if b, err := os.ReadFile(e.paths.PluginBuildError); err == nil {
		return fmt.Errorf("cgdelegate did not build on the host:\n%s", b)
	}
	for _, p := range []string{e.paths.PluginBinary, e.paths.HookBinary} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("plugin binaries: %w", err)
		}
	}
	return nil
}

func (e *guestEnv) preinstallPlugin() error {
	for _, d := range []string{filepath.Dir(e.paths.PluginPreinstall), filepath.Dir(e.paths.PluginConfig)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("pre-register plugin: %w", err)
		}
	}
	b, err := os.ReadFile(e.paths.PluginBinary)
	if err != nil {
		return fmt.Errorf("pre-register plugin: %w", err)
	}
	if err := os.WriteFile(e.paths.PluginPreinstall, b, 0o755); err != nil {
		return fmt.Errorf("pre-register plugin: %w", err)
	}
	if err := os.WriteFile(e.paths.PluginConfig, []byte(pluginConfigYAML(e.variant)), 0o644); err != nil {
		return fmt.Errorf("pre-register plugin config: %w", err)
	}
	return nil
}

// pluginConfigYAML is the plugin config of the variant: the -config file of
// the external plugin and the Configure blob of the pre-registered one.
// There is no kubelet in the VM, so no cpu_manager_state either: pinning is
// not held back by the kubelet check.
func pluginConfigYAML(v variant.Variant) string {
	s := "guard: enforce\n"
	if v.Pinning {
		s += "cpuPinning: true\n"
	}
	if v.Cluster {
		// CPU 0 stays in the node shared pool, as a kubelet's reserved
		// CPU would (the resize scenario's pinned pod gets another).
		s += "reservedCPUs: \"0\"\n"
	}
	if servesMetrics(v) {
		s += "metricsAddress: " + metricsAddress + "\n"
	}
	if slices.Contains(v.Scenarios, variant.BenchNode) || slices.Contains(v.Scenarios, variant.ScaleChurn) {
		// The bench profiles the plugin's CPU (logProfile); ScaleChurn
		// prints the plugin's goroutines when they do not settle.
		s += "profiling: true\n"
	}
	return s
}

// writeFile writes a file, creating its directory.
func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// startContainerd starts containerd and waits until its CRI answers.
func (e *guestEnv) startContainerd(ctx context.Context) error {
	if err := e.containerd.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(e.paths.ContainerdSocket); err == nil {
			break
		}
		if !e.containerd.Running() {
			return fmt.Errorf("containerd exited at start-up:\n%s", fileTail(e.paths.ContainerdLog, 40))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd socket never appeared: %w\n%s", ctx.Err(), fileTail(e.paths.ContainerdLog, 40))
		case <-time.After(100 * time.Millisecond):
		}
	}
	// One client for the whole boot: gRPC reconnects by itself after a
	// containerd restart, and pods keep using the client they were made with.
	if e.cri == nil {
		c, err := cri.Dial(e.paths.ContainerdSocket)
		if err != nil {
			return err
		}
		e.cri = c
	}
	v, err := e.cri.WaitReady(ctx)
	if err != nil {
		return fmt.Errorf("containerd CRI: %w\n%s", err, fileTail(e.paths.ContainerdLog, 40))
	}
	e.log.Info("containerd ready", "runtime", v.GetRuntimeName(), "version", v.GetRuntimeVersion(), "cri", v.GetRuntimeApiVersion())
	return nil
}

func (e *guestEnv) importImages(ctx context.Context) error {
	tars, err := filepath.Glob(filepath.Join(e.paths.ImagesDir, "*.tar"))
	if err != nil || len(tars) == 0 {
		return fmt.Errorf("no images in %s: %w", e.paths.ImagesDir, err)
	}
	for _, tar := range tars {
		cmd := exec.CommandContext(ctx, "ctr", "--address", e.paths.ContainerdSocket, "-n", "k8s.io", "images", "import", tar)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ctr images import %s: %w\n%s", tar, err, out)
		}
	}
	return nil
}

// startPlugin starts the external plugin (or, when pre-registered, only
// waits for containerd to have started it) and waits for registration in
// the containerd log after byte offset from.
func (e *guestEnv) startPlugin(ctx context.Context, from int64) error {
	want := "connected and synchronized"
	if e.variant.Plugin == variant.PluginPreregistered {
		want = "synchronization success"
	} else {
		if e.plugin == nil {
			e.plugin = &daemon{name: "cgdelegate", path: e.paths.PluginBinary, args: []string{"-log-level", "debug", "-config", e.paths.PluginYAML}, logPath: e.paths.PluginLog}
		}
		if err := e.plugin.Start(); err != nil {
			return err
		}
	}
	err := waitLog(ctx, e.paths.ContainerdLog, from, 90*time.Second, func(l string) bool {
		return strings.Contains(l, "cgdelegate") && strings.Contains(l, want)
	}, func() error {
		if e.plugin != nil && !e.plugin.Running() {
			return errors.New("cgdelegate exited")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cgdelegate did not register with containerd: %w\n--- plugin log ---\n%s\n--- containerd log ---\n%s",
			err, fileTail(e.paths.PluginLog, 20), fileTail(e.paths.ContainerdLog, 20))
	}
	return nil
}

// restartContainerd stops containerd (leaving the shims and containers
// running) and starts it again; a pre-registered plugin comes back with it.
func (e *guestEnv) restartContainerd(ctx context.Context) error {
	if e.containerdUnit {
		return errors.New("containerd runs as " + containerdUnit + " since ClusterRuntimeDropIn: put such a scenario before it")
	}
	if err := e.containerd.Stop(30 * time.Second); err != nil {
		return err
	}
	from := fileSize(e.paths.ContainerdLog)
	if err := e.startContainerd(ctx); err != nil {
		return err
	}
	if e.variant.Plugin == variant.PluginPreregistered && e.pluginErr == nil {
		return e.startPlugin(ctx, from)
	}
	return nil
}

// restartPlugin stops and starts the external plugin.
func (e *guestEnv) restartPlugin(ctx context.Context) error {
	if e.variant.Plugin != variant.PluginExternal || e.plugin == nil {
		return fmt.Errorf("restartPlugin: plugin mode %s", e.variant.Plugin)
	}
	if err := e.plugin.Stop(20 * time.Second); err != nil {
		return err
	}
	return e.startPlugin(ctx, fileSize(e.paths.ContainerdLog))
}

func (e *guestEnv) shutdown() {
	if e.kubelet != nil {
		_ = e.kubelet.daemon.Stop(10 * time.Second)
	}
	if e.plugin != nil {
		_ = e.plugin.Stop(5 * time.Second)
	}
	if e.cri != nil {
		_ = e.cri.Close()
	}
	if e.containerd != nil {
		_ = e.containerd.Stop(10 * time.Second)
	}
}

// dumpLogs prints the daemons' log tails for the host's console log.
func (e *guestEnv) dumpLogs() {
	logs := []string{e.paths.ContainerdLog, e.paths.PluginLog}
	if e.kubelet != nil {
		logs = append(logs, e.paths.KubeletLog)
	}
	if e.dsPlugin != nil {
		// The DaemonSet pod's container logs, every restart.
		pods, _ := filepath.Glob("/var/log/pods/" + e.dsPlugin.namespace + "_" + e.dsPlugin.sp.Full + "_*/*/*.log")
		logs = append(logs, pods...)
	}
	for _, f := range logs {
		fmt.Printf("CGD-LOG ===== tail of %s =====\n", f)
		for _, l := range strings.Split(fileTail(f, 60), "\n") {
			fmt.Printf("CGD-LOG %s\n", l)
		}
	}
}

// containerdConfig is the variant's containerd config; extraImports are
// imported after the shipped drop-in (a scenario's own settings).
func containerdConfig(v variant.Variant, extraImports ...string) string {
	runtime := func(name string, writable bool) string {
		return fmt.Sprintf(`
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[1]s]
      runtime_type = 'io.containerd.runc.v2'
      cgroup_writable = %[2]v
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[1]s.options]
        BinaryName = '/usr/local/bin/runc'
        SystemdCgroup = %[3]v
`, name, writable, v.Systemd)
	}
	// A fail-closed variant imports the shipped drop-in, which containerd
	// merges over the NRI settings below.
	var files []string
	if v.FailClosed {
		files = append(files, containerdDropIn)
	}
	files = append(files, extraImports...)
	imports := ""
	if len(files) > 0 {
		imports = "imports = ['" + strings.Join(files, "', '") + "']\n"
	}
	return `# Written by the cgdelegate integration suite (variant ` + v.Name + `).
version = 3
` + imports + `
root = '/var/lib/containerd'
state = '/run/containerd'

[grpc]
  address = '/run/containerd/containerd.sock'

[debug]
  level = 'info'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '` + pauseImage + `'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '` + containerdHostsDir + `'

[plugins.'io.containerd.cri.v1.runtime']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
` + runtime("runc", v.CgroupWritable) + runtime(writableHandler, true) + `
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '/var/run/nri/nri.sock'
  plugin_path = '/opt/nri/plugins'
  plugin_config_path = '/etc/nri/conf.d'
  plugin_registration_timeout = '20s'
  plugin_request_timeout = '15s'
`
}
