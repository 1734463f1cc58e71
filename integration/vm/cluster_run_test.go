//go:build integration_vm

package vm

// The control plane of the Cluster variants, the running part: it builds
// kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (as
// the kubelet is built) and our etcd main (testdata/etcd, in a module of
// its own), and runs them on the host's loopback around the boot of a
// variant that needs them (startControlPlane). cluster.go has the
// certificates and flags.

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// etcdVersion is the go.etcd.io/etcd/server/v3 release our etcd main
// embeds.
const etcdVersion = "v3.7.3"

// etcdMain is the source of our etcd (a single member on loopback). It is
// built in a module of its own: adding etcd's server module to the
// project's go.mod upgrades golang.org/x/net, x/text and go-systemd under
// the product and adds some forty modules it never uses.
//
//go:embed testdata/etcd/main.go
var etcdMain []byte

// controlPlaneCommands are the k8s.io/kubernetes commands of the cluster
// (kubectl runs on the host's workstation, startWorkstation, and goes into
// the guest too).
var controlPlaneCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// clusterArtifacts are the host paths of what a Cluster variant needs.
type clusterArtifacts struct {
	// Bin holds controlPlaneCommands; Etcd is our etcd; Helm is the helm
	// command (for the guest, and to package and push the chart) and
	// Chart the chart's directory.
	Bin, Etcd, Helm, Chart string
	// PKI is the certificates and kubeconfigs, made for this run; the
	// guest's kubeconfigs name its port, so the API server must listen
	// there.
	PKI clusterPKI
	// RegistryPort is the registry's port, chosen with the API server's
	// (the guest is told it before the registry starts); Releases are
	// what the harness pushes there, empty when the plugin did not build.
	RegistryPort int
	Releases     []builtRelease
	// Previous is the previous release (buildPrevious), pushed only for
	// the boots that install it (variant.Variant.NeedsPrevious); nil when
	// no selected variant does.
	Previous *builtRelease
	// WorkstationPort and WorkstationToken are where and with what the
	// guest asks the host to run kubectl and helm (startWorkstation),
	// chosen like RegistryPort.
	WorkstationPort  int
	WorkstationToken string
}

// etcdKey is the cache key of our etcd: the version and the source's
// hash.
func etcdKey() string {
	sum := sha256.Sum256(etcdMain)
	return "etcd/" + etcdVersion + "-" + hex.EncodeToString(sum[:6])
}

// etcd builds testdata/etcd against etcdVersion, cached by etcdKey.
func (b *builder) etcd(ctx context.Context) (string, error) {
	dir, err := b.cached(etcdKey(), func(tmp string) error {
		env := []string{"GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off", "CGO_ENABLED=0"}
		src := filepath.Join(tmp, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		gomod := "module cgdelegate.local/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 " + etcdVersion + "\n"
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		if err := os.WriteFile(filepath.Join(src, "main.go"), etcdMain, 0o644); err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		if _, err := b.run(ctx, src, env, "go", "mod", "tidy"); err != nil {
			return err
		}
		if _, err := b.run(ctx, src, env, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(tmp, "etcd"), "."); err != nil {
			return err
		}
		return os.RemoveAll(src)
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "etcd"), nil
}

// chartDir is the Helm chart the cluster boots install, relative to the
// repository; the harness packages it for the registry (buildReleases).
const chartDir = "contrib/helm/cgdelegate"

// helm is the helm command of go.mod's tool directive, built as `make
// chart` builds it (CGO_ENABLED=0 go tool helm: the same binary, from the
// Go build cache when make test has run), copied into the cache under its
// version for the guest.
func (b *builder) helm(ctx context.Context) (string, error) {
	out, err := b.run(ctx, b.repo, nil, "go", "list", "-m", "-f", "{{.Version}}", "helm.sh/helm/v4")
	if err != nil {
		return "", fmt.Errorf("helm: the version go.mod pins: %w", err)
	}
	version := strings.TrimSpace(string(out))
	dir, err := b.cached("helm/"+version, func(tmp string) error {
		out, err := b.run(ctx, b.repo, []string{"CGO_ENABLED=0"}, "go", "tool", "-n", "helm")
		if err != nil {
			return fmt.Errorf("helm: %w", err)
		}
		// The path is the last line (go may print downloads before it).
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		built, err := os.ReadFile(lines[len(lines)-1])
		if err != nil {
			return fmt.Errorf("helm: %w", err)
		}
		return os.WriteFile(filepath.Join(tmp, "helm"), built, 0o755)
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "helm"), nil
}

// buildCluster builds (or takes from the cache) the control plane and
// makes this run's PKI in workDir/cluster, for an API server on a free
// loopback port.
func (b *builder) buildCluster(ctx context.Context) (*clusterArtifacts, error) {
	bin, err := b.kubernetes(ctx) // controlPlaneCommands are among its commands
	if err != nil {
		return nil, err
	}
	etcd, err := b.etcd(ctx)
	if err != nil {
		return nil, err
	}
	port, err := apiServerPort()
	if err != nil {
		return nil, err
	}
	registryPort, err := apiServerPort()
	for err == nil && registryPort == port {
		registryPort, err = apiServerPort()
	}
	if err != nil {
		return nil, err
	}
	workstationPort, err := apiServerPort()
	for err == nil && (workstationPort == port || workstationPort == registryPort) {
		workstationPort, err = apiServerPort()
	}
	if err != nil {
		return nil, err
	}
	token, err := newWorkstationToken()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.workDir, "cluster", "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	pki, err := newClusterPKI(dir, port, time.Now())
	if err != nil {
		return nil, err
	}
	helm, err := b.helm(ctx)
	if err != nil {
		return nil, err
	}
	return &clusterArtifacts{
		Bin: bin, Etcd: etcd, Helm: helm, Chart: filepath.Join(b.repo, chartDir), PKI: pki,
		RegistryPort: registryPort, WorkstationPort: workstationPort, WorkstationToken: token,
	}, nil
}

// netModuleFiles are the modules Debian's 6.12 kernel needs for a
// virtio-net NIC (virtio-pci is built in), in load order, as paths below
// lib/modules/<release>/kernel.
var netModuleFiles = []string{"net/core/failover.ko", "drivers/net/net_failover.ko", "drivers/net/virtio_net.ko"}

// netModules extracts netModuleFiles from the kernel package kernelKey
// (what kernel returned) and caches them, decompressed, under that key;
// it returns their paths in load order.
func (b *builder) netModules(ctx context.Context, kernelKey string) ([]string, error) {
	return b.kernelModules(ctx, "netmodules", kernelKey, netModuleFiles)
}

// kernelModules extracts files (paths below lib/modules/<release>/kernel)
// from the kernel package kernelKey and caches them, decompressed, under
// <cacheName>/<kernelKey>; it returns their paths in the order given.
func (b *builder) kernelModules(ctx context.Context, cacheName, kernelKey string, files []string) ([]string, error) {
	dir, err := b.cached(cacheName+"/"+kernelKey, func(tmp string) error {
		name, version, err := b.kernelPackage(ctx)
		if err != nil {
			return err
		}
		if got := name + "_" + strings.ReplaceAll(version, "~", "_"); got != kernelKey {
			return fmt.Errorf("%s: the kernel package is now %s, the kernel booted is %s", cacheName, got, kernelKey)
		}
		if _, err := b.run(ctx, tmp, nil, "apt-get", "download", name+"="+version); err != nil {
			return err
		}
		debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
		if len(debs) != 1 {
			return fmt.Errorf("apt-get download %s: got %v", name, debs)
		}
		script := `dpkg-deb --fsys-tarfile "$1" | tar -x --wildcards`
		for _, m := range files {
			script += " '*/kernel/" + m + "*'"
		}
		if _, err := b.run(ctx, tmp, nil, "sh", "-c", script, "sh", debs[0]); err != nil {
			return err
		}
		for _, m := range files {
			found, _ := filepath.Glob(filepath.Join(tmp, "lib", "modules", "*", "kernel", m+"*"))
			if len(found) != 1 {
				return fmt.Errorf("%s: module %s: found %v", debs[0], m, found)
			}
			if err := decompressModule(found[0], filepath.Join(tmp, filepath.Base(m))); err != nil {
				return err
			}
		}
		for _, junk := range append(debs, filepath.Join(tmp, "lib")) {
			if err := os.RemoveAll(junk); err != nil {
				return fmt.Errorf("%s: %w", cacheName, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, m := range files {
		paths = append(paths, filepath.Join(dir, filepath.Base(m)))
	}
	return paths, nil
}

// apiServerPort is a port free on 127.0.0.1 below Linux's default
// ephemeral range (32768 and up), for the API server and the registry. It
// is chosen when the guest's kubeconfigs are written, which can be many
// boots before the API server listens there; below that range no
// outgoing connection takes it in between.
func apiServerPort() (int, error) {
	const lo, hi = 20000, 32767
	start := lo + int(time.Now().UnixNano()%int64(hi-lo+1))
	for i := range hi - lo + 1 {
		port := lo + (start-lo+i)%(hi-lo+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			l.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("API server port: no free port on 127.0.0.1 in %d-%d", lo, hi)
}

// freeLoopbackPorts returns n distinct TCP ports that were free on
// 127.0.0.1 a moment ago.
func freeLoopbackPorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// hostProc is one control plane process, its output in a log file. It is
// its own process group, and dies with the test binary (Pdeathsig) even
// when the test is killed before its cleanup runs.
type hostProc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error // the exit, once done is closed
}

func startHostProc(name, logPath, bin string, args ...string) (*hostProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	p := &hostProc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *hostProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after timeout, and
// waits for the exit.
func (p *hostProc) stop(timeout time.Duration) error {
	if p.exited() {
		return nil
	}
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: SIGTERM to process group %d: %w", p.name, pgid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: SIGKILL to process group %d: %w", p.name, pgid, err)
	}
	<-p.done
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.name, pgid, timeout)
}

// runningControlPlane is the control plane of one boot.
type runningControlPlane struct {
	cfg   controlPlane
	procs []*hostProc // in start order
	log   *slog.Logger
}

// startControlPlane starts etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler on the host's loopback, each after the one before is
// healthy, and registers their stop (in reverse order) with t.Cleanup, so
// nothing outlives the variant's test, passed or failed. dir holds their
// data and logs.
func startControlPlane(t *testing.T, log *slog.Logger, a *clusterArtifacts, dir string) (*runningControlPlane, error) {
	t.Helper()
	return startControlPlaneOf(t, log, a, controlPlane{DataDir: dir})
}

// startControlPlaneOf is startControlPlane with cfg's Host and APIOnly
// (its PKI is a's, its ports are chosen here).
func startControlPlaneOf(t *testing.T, log *slog.Logger, a *clusterArtifacts, cfg controlPlane) (*runningControlPlane, error) {
	t.Helper()
	start := time.Now()
	dir := cfg.DataDir
	ports, err := freeLoopbackPorts(4)
	if err != nil {
		return nil, err
	}
	cfg.PKI = a.PKI
	cfg.EtcdClient, cfg.EtcdPeer, cfg.ControllerManager, cfg.Sched = ports[0], ports[1], ports[2], ports[3]
	cp := &runningControlPlane{log: log, cfg: cfg}
	t.Cleanup(cp.stop)
	if err := cp.cfg.validate(); err != nil {
		return nil, err
	}
	admin, err := cp.adminClient()
	if err != nil {
		return nil, err
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The components' self-signed serving certificates; only /healthz
		// on loopback is read with it.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	plain := &http.Client{Timeout: 5 * time.Second}
	steps := []struct {
		name, bin string
		args      []string
		client    *http.Client
		health    string
		within    time.Duration
	}{
		{"etcd", a.Etcd, cp.cfg.EtcdArgs(), plain, loopbackURL("http", cp.cfg.EtcdClient) + "/health", time.Minute},
		{"kube-apiserver", filepath.Join(a.Bin, "kube-apiserver"), cp.cfg.APIServerArgs(), admin, cp.cfg.APIServerURL() + "/readyz", 3 * time.Minute},
		{"kube-controller-manager", filepath.Join(a.Bin, "kube-controller-manager"), cp.cfg.ControllerManagerArgs(), insecure, loopbackURL("https", cp.cfg.ControllerManager) + "/healthz", 2 * time.Minute},
		{"kube-scheduler", filepath.Join(a.Bin, "kube-scheduler"), cp.cfg.SchedulerArgs(), insecure, loopbackURL("https", cp.cfg.Sched) + "/healthz", 2 * time.Minute},
	}
	if cfg.APIOnly {
		steps = steps[:2]
	}
	for _, s := range steps {
		p, err := startHostProc(s.name, filepath.Join(dir, s.name+".log"), s.bin, s.args...)
		if err != nil {
			return nil, err
		}
		cp.procs = append(cp.procs, p)
		stepStart := time.Now()
		if err := waitHealthy(p, s.client, s.health, s.within); err != nil {
			return nil, fmt.Errorf("%w\n--- %s ---\n%s", err, p.log, fileTail(p.log, 30))
		}
		log.Info("control plane component healthy", "component", s.name, "pid", p.cmd.Process.Pid, "took", time.Since(stepStart).Round(100*time.Millisecond))
	}
	log.Info("control plane up", "apiserver", cp.cfg.APIServerURL(), "took", time.Since(start).Round(100*time.Millisecond))
	return cp, nil
}

// adminClient talks to the API server with the admin's client
// certificate, trusting only the cluster CA.
func (cp *runningControlPlane) adminClient() (*http.Client, error) {
	pki := cp.cfg.PKI
	ca, err := os.ReadFile(pki.Path("ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("control plane: %s holds no certificate", pki.Path("ca.crt"))
	}
	cert, err := adminKeyPair(pki.Kubeconfig("admin"))
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}, nil
}

// adminKeyPair reads the client certificate and key embedded in a
// kubeconfig that newClusterPKI wrote.
func adminKeyPair(path string) (tls.Certificate, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("control plane: %w", err)
	}
	field := func(name string) ([]byte, error) {
		for _, l := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+": "); ok {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					return nil, fmt.Errorf("control plane: %s %s: %w", path, name, err)
				}
				return b, nil
			}
		}
		return nil, fmt.Errorf("control plane: %s has no %s", path, name)
	}
	certPEM, err := field("client-certificate-data")
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := field("client-key-data")
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("control plane: key pair of %s: %w", path, err)
	}
	return cert, nil
}

// waitHealthy polls url until it answers 200, the process exits, or within
// passes.
func waitHealthy(p *hostProc, c *http.Client, url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("%s exited before %s answered: %w", p.name, url, p.err)
		}
		resp, err := c.Get(url)
		if err == nil {
			body := make([]byte, 512)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body[:n])))
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy within %s at %s: %w", p.name, within, url, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// healthy reports the first component that has exited, for the boot's
// report.
func (cp *runningControlPlane) healthy() error {
	for _, p := range cp.procs {
		if p.exited() {
			return fmt.Errorf("control plane: %s exited during the boot: %w\n--- %s ---\n%s", p.name, p.err, p.log, fileTail(p.log, 30))
		}
	}
	return nil
}

// stop stops every component, the last started first.
func (cp *runningControlPlane) stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		if err := p.stop(20 * time.Second); err != nil {
			cp.log.Warn("control plane stop", "component", p.name, "err", err)
		}
	}
	if len(cp.procs) > 0 {
		cp.log.Info("control plane stopped", "components", len(cp.procs))
	}
	cp.procs = nil
}
