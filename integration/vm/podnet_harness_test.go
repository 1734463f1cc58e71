package vm

// The pod network of the Cluster boots, the pure part of the host's side
// (integration/internal/podnet has the plan itself): what the guest gets
// from Debian (the CNI plugins, the kernel's netfilter and bridge modules)
// and where, and how the host's existing addresses and routes are read for
// the plan's conflict check. podnet_run_test.go builds the ingredients and
// brings the host's bridge and taps up and down.

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// cniPluginsPackage is the Debian package of the CNI plugins users run
// (bridge, host-local, loopback), the containernetworking/plugins release
// Debian ships.
const cniPluginsPackage = "containernetworking-plugins"

// cniPlugins are the plugins a node's network list uses (podnet.CNIConfig),
// and loopback, which containerd calls for every pod's lo.
var cniPlugins = []string{"bridge", "host-local", "loopback"}

// guestCNIBin is where containerd looks for CNI plugins in the guest.
const guestCNIBin = "opt/cni/bin"

// netfilterModulePaths are the kernel modules a node needs for its pod
// network, below lib/modules/<release>/kernel of the kernel package:
// nf_tables and everything nftables-mode kube-proxy asks the kernel for
// (conntrack, NAT, numgen, ...; loaded on demand through modprobe and the
// module aliases), the bridge the CNI plugin makes with br_netfilter (so a
// pod reaching a Service whose endpoint is on the same bridge gets its
// reply un-NATed), veth for the pods' links, and crc32c, which conntrack
// needs. Directories end in "/".
var netfilterModulePaths = []string{
	"net/netfilter/", "net/ipv4/netfilter/", "net/ipv6/netfilter/", "net/bridge/", "net/802/", "net/llc/",
	"drivers/net/veth.ko", "lib/libcrc32c.ko", "crypto/crc32c_generic.ko", "arch/x86/crypto/crc32c-intel.ko",
}

// netfilterTarPatterns are the tar --wildcards patterns that extract
// netfilterModulePaths from a kernel package's data (./lib/modules/...;
// files may end in .xz or .zst).
func netfilterTarPatterns() []string {
	var pats []string
	for _, p := range netfilterModulePaths {
		pats = append(pats, "*/kernel/"+p+"*")
	}
	return pats
}

// guestModulesDir is where the guest's modprobe finds a kernel release's
// modules: the systemd root filesystem merges /lib into /usr/lib.
func guestModulesDir(release string) string { return "usr/lib/modules/" + release }

// parseRoutes reads the destinations of `ip -4 route show table main`:
// each line's first word, a prefix, a bare address (a /32) or "default"
// (skipped).
func parseRoutes(r io.Reader) ([]netip.Prefix, error) {
	var out []netip.Prefix
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		dst := f[0]
		// Route types such as "unreachable 10.1.0.0/16" or "blackhole ...".
		if len(f) > 1 && !strings.ContainsAny(dst, "./") {
			dst = f[1]
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		p, err := netip.ParsePrefix(dst)
		if err != nil {
			return nil, fmt.Errorf("ip route: line %q: %w", sc.Text(), err)
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ip route: %w", err)
	}
	return out, nil
}
