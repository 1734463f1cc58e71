//go:build integration_vm

package vm

// The pod network of the Cluster boots, the running part: kube-proxy built
// with the control plane, the CNI plugins and the kernel's netfilter
// modules taken from Debian's packages (each cached by version), and the
// host's bridge and taps (hostNetwork), up for one boot and down after it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/cgdelegate/cgdelegate/integration/internal/podnet"
)

// podNetArtifacts are the host paths of what a node of the pod network
// needs.
type podNetArtifacts struct {
	// KubeProxy is the kube-proxy binary (kubeletVersion).
	KubeProxy string
	// CNIDir holds cniPlugins.
	CNIDir string
	// Modules is lib/modules/<Release> of the guest kernel, holding only
	// netfilterModulePaths; the guest runs depmod on it.
	Modules, Release string
}

// kubeProxy is kube-proxy, from kubernetes' build.
func (b *builder) kubeProxy(ctx context.Context) (string, error) {
	dir, err := b.kubernetes(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "kube-proxy"), nil
}

// debianPackage downloads name at its candidate version into dir and
// returns the .deb's path and the version.
func (b *builder) debianPackage(ctx context.Context, dir, name, version string) (string, error) {
	if _, err := b.run(ctx, dir, nil, "apt-get", "download", name+"="+version); err != nil {
		return "", err
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s=%s: got %v", name, version, debs)
	}
	return debs[0], nil
}

// candidate is the version apt would install of a package.
func (b *builder) candidate(ctx context.Context, name string) (string, error) {
	out, err := b.run(ctx, "", nil, "apt-cache", "policy", name)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Candidate: "); ok && v != "(none)" {
			return v, nil
		}
	}
	return "", fmt.Errorf("apt-cache policy %s: no candidate version (run apt-get update?)", name)
}

// cniPluginBinaries extracts cniPlugins from Debian's
// containernetworking-plugins and caches them under its version.
func (b *builder) cniPluginBinaries(ctx context.Context) (string, error) {
	version, err := b.candidate(ctx, cniPluginsPackage)
	if err != nil {
		return "", err
	}
	return b.cached("cni/"+strings.NewReplacer("~", "_", ":", "_").Replace(version), func(tmp string) error {
		deb, err := b.debianPackage(ctx, tmp, cniPluginsPackage, version)
		if err != nil {
			return err
		}
		script := `dpkg-deb --fsys-tarfile "$1" | tar -x`
		for _, p := range cniPlugins {
			script += " ./usr/lib/cni/" + p
		}
		if _, err := b.run(ctx, tmp, nil, "sh", "-c", script, "sh", deb); err != nil {
			return err
		}
		for _, p := range cniPlugins {
			if err := os.Rename(filepath.Join(tmp, "usr", "lib", "cni", p), filepath.Join(tmp, p)); err != nil {
				return fmt.Errorf("CNI plugins: %w", err)
			}
		}
		return errors.Join(os.Remove(deb), os.RemoveAll(filepath.Join(tmp, "usr")))
	})
}

// netfilterModules extracts netfilterModulePaths from the kernel package
// kernelKey (what kernel returned), compressed as Debian ships them, and
// caches them under that key as lib/modules/<release>; it returns that
// directory and the release.
func (b *builder) netfilterModules(ctx context.Context, kernelKey string) (dir, release string, err error) {
	cache, err := b.cached("netfilter/"+kernelKey, func(tmp string) error {
		name, version, err := b.kernelPackage(ctx)
		if err != nil {
			return err
		}
		if got := name + "_" + strings.ReplaceAll(version, "~", "_"); got != kernelKey {
			return fmt.Errorf("netfilter modules: the kernel package is now %s, the kernel booted is %s", got, kernelKey)
		}
		deb, err := b.debianPackage(ctx, tmp, name, version)
		if err != nil {
			return err
		}
		script := `dpkg-deb --fsys-tarfile "$1" | tar -x --wildcards`
		for _, p := range netfilterTarPatterns() {
			script += " '" + p + "'"
		}
		if _, err := b.run(ctx, tmp, nil, "sh", "-c", script, "sh", deb); err != nil {
			return err
		}
		return os.Remove(deb)
	})
	if err != nil {
		return "", "", err
	}
	releases, _ := filepath.Glob(filepath.Join(cache, "lib", "modules", "*"))
	if len(releases) != 1 {
		return "", "", fmt.Errorf("netfilter modules in %s: want one kernel release, found %v", cache, releases)
	}
	return releases[0], filepath.Base(releases[0]), nil
}

// buildPodNet builds (or takes from the cache) what the pod network needs.
func (b *builder) buildPodNet(ctx context.Context, kernelKey string) (*podNetArtifacts, error) {
	var a podNetArtifacts
	var err error
	if a.KubeProxy, err = b.kubeProxy(ctx); err != nil {
		return nil, err
	}
	if a.CNIDir, err = b.cniPluginBinaries(ctx); err != nil {
		return nil, err
	}
	if a.Modules, a.Release, err = b.netfilterModules(ctx, kernelKey); err != nil {
		return nil, err
	}
	return &a, nil
}

// netLockPath is held (flock) while a run's bridge and taps are up: a
// second run on the same host waits for nothing and fails at once, and a
// link of the plan found while the lock is free is a killed run's leftover
// (a killed process's flock is released by the kernel).
const netLockPath = "/run/cgdelegate-vm-net.lock"

// errNotRoot is returned when the host's network cannot be changed.
var errNotRoot = errors.New("the cluster boots' pod network needs root (CAP_NET_ADMIN) on the host for its bridge and taps")

// hostNetwork is the host's side of a podnet.Plan while it is up.
type hostNetwork struct {
	plan podnet.Plan
	lock *os.File
	log  *slog.Logger
}

// ipCmd runs ip(8) with args.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// upHostNetwork takes the lock (lockPath, netLockPath but in tests),
// removes a killed run's leftover links,
// checks the plan's ranges are free on the host, and runs the plan's
// HostUp. On error nothing of the plan is left up.
func upHostNetwork(log *slog.Logger, plan podnet.Plan, lockPath string) (_ *hostNetwork, err error) {
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w; running as uid %d", errNotRoot, os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("the pod network needs ip(8) from iproute2 (run integration/vm/install-deps.sh): %w", err)
	}
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pod network lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("pod network: another run holds %s (its VM network is up): %w", lockPath, err)
	}
	h := &hostNetwork{plan: plan, lock: lock, log: log}
	defer func() {
		if err != nil {
			h.down()
		}
	}()
	for _, name := range plan.Interfaces() {
		if _, ierr := net.InterfaceByName(name); ierr == nil {
			log.Warn("removing a link a killed run left behind", "link", name)
			if err := ipCmd("link", "del", name); err != nil {
				return nil, err
			}
		}
	}
	inUse, routes, err := hostAddresses()
	if err != nil {
		return nil, err
	}
	if err := plan.Conflicts(inUse, routes); err != nil {
		return nil, err
	}
	for _, args := range plan.HostUp() {
		if err := ipCmd(args...); err != nil {
			return nil, fmt.Errorf("pod network up: %w", err)
		}
	}
	log.Info("pod network up", "bridge", plan.Bridge, "host", plan.Host, "nodes", len(plan.Nodes))
	return h, nil
}

// hostAddresses are the host's interface addresses and the destinations
// of its main IPv4 routing table.
func hostAddresses() (inUse, routes []netip.Prefix, err error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, nil, fmt.Errorf("host addresses: %w", err)
	}
	for _, a := range addrs {
		if p, perr := netip.ParsePrefix(a.String()); perr == nil && p.Addr().Is4() {
			inUse = append(inUse, p)
		}
	}
	out, err := exec.Command("ip", "-4", "route", "show", "table", "main").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("ip -4 route: %w", err)
	}
	routes, err = parseRoutes(bytes.NewReader(out))
	return inUse, routes, err
}

// down removes the taps and the bridge and releases the lock; a link
// already gone is no error.
func (h *hostNetwork) down() {
	if h == nil || h.lock == nil {
		return
	}
	for _, args := range h.plan.HostDown() {
		if _, err := net.InterfaceByName(args[len(args)-1]); err != nil {
			continue
		}
		if err := ipCmd(args...); err != nil {
			h.log.Warn("pod network down", "err", err)
		}
	}
	h.lock.Close() // releases the flock
	h.lock = nil
	h.log.Info("pod network down", "bridge", h.plan.Bridge)
}

// leftover reports the plan's links that still exist.
func leftover(plan podnet.Plan) []string {
	var left []string
	for _, name := range plan.Interfaces() {
		if _, err := net.InterfaceByName(name); err == nil {
			left = append(left, name)
		}
	}
	return slices.Clip(left)
}
