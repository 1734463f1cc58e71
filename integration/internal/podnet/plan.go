package podnet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalidPlan is wrapped by every Plan.Validate problem.
var ErrInvalidPlan = errors.New("invalid pod network plan")

// ErrConflict is wrapped when the host already uses an address range the
// plan needs.
var ErrConflict = errors.New("address range in use on the host")

// maxIfName is the longest Linux interface name (IFNAMSIZ less the NUL).
const maxIfName = 15

// Node is one guest node of the cluster.
type Node struct {
	// Name is the Node's name, the kubelet's --hostname-override.
	Name string
	// Tap is the host's tap device qemu connects the guest's NIC to.
	Tap string
	// MAC is the guest NIC's address (qemu's locally administered
	// 52:54:00 prefix).
	MAC string
	// IP is the node's address on the bridge: its eth0 and its Node's
	// InternalIP.
	IP netip.Addr
	// PodCIDR is the range the node's CNI gives its pods.
	PodCIDR netip.Prefix
}

// Plan is the whole network of one cluster boot.
type Plan struct {
	// Bridge is the host's bridge; Host is the host's address on it, with
	// the bridge's prefix length (NodeCIDR). The API server listens there.
	Bridge string
	Host   netip.Prefix
	// ClusterCIDR holds every node's PodCIDR (kube-proxy's clusterCIDR).
	ClusterCIDR netip.Prefix
	// ServiceCIDR is the API server's --service-cluster-ip-range.
	ServiceCIDR netip.Prefix
	// Nodes are the guests, the first the one that runs the scenarios.
	Nodes []Node
}

// The default plan's ranges. 10.88.0.0/16 is podman's and containerd's
// example CNI range and 10.0.2.0/24 qemu's user network, so neither is
// used: a developer machine may have them.
var (
	defaultHost        = netip.MustParsePrefix("10.213.0.1/24")
	defaultClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	defaultServiceCIDR = netip.MustParsePrefix("10.96.0.0/24")
)

// DefaultNodeName is the first node's name, as the kubelet's client
// certificate has it (system:node:cgd-vm).
const DefaultNodeName = "cgd-vm"

// NodeName is the name of node i (from 0): cgd-vm, cgd-vm2, cgd-vm3, ...
func NodeName(i int) string {
	if i == 0 {
		return DefaultNodeName
	}
	return DefaultNodeName + strconv.Itoa(i+1)
}

// KubeletKubeconfig is the name (without .kubeconfig) of the kubeconfig
// of node's kubelet, in the host's PKI directory and in the guest's
// /etc/kubernetes: "kubelet" for the first node, "kubelet-<node>" for the
// others.
func KubeletKubeconfig(node string) string {
	if node == DefaultNodeName {
		return "kubelet"
	}
	return "kubelet-" + node
}

// DefaultPlan is the plan of a cluster of n nodes: bridge cgdbr0 with the
// host at 10.213.0.1/24, node i (from 0) at 10.213.0.<i+2> on tap
// cgdtap<i+1> with pods in 10.244.<i+1>.0/24, services in 10.96.0.0/24.
func DefaultPlan(n int) Plan {
	p := Plan{Bridge: "cgdbr0", Host: defaultHost, ClusterCIDR: defaultClusterCIDR, ServiceCIDR: defaultServiceCIDR}
	for i := range n {
		p.Nodes = append(p.Nodes, Node{
			Name:    NodeName(i),
			Tap:     "cgdtap" + strconv.Itoa(i+1),
			MAC:     fmt.Sprintf("52:54:00:cd:00:%02x", i+1),
			IP:      netip.AddrFrom4([4]byte{10, 213, 0, byte(i + 2)}),
			PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 0}), 24),
		})
	}
	return p
}

// NodeCIDR is the bridge's network.
func (p Plan) NodeCIDR() netip.Prefix { return p.Host.Masked() }

// Node returns the node named name.
func (p Plan) Node(name string) (Node, error) {
	for _, n := range p.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return Node{}, fmt.Errorf("%w: no node named %q", ErrInvalidPlan, name)
}

// Validate reports every problem of the plan, each naming the field and
// its value.
func (p Plan) Validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s %q: %s", ErrInvalidPlan, field, fmt.Sprint(value), why))
	}
	ifName := func(field, name string) {
		if name == "" || len(name) > maxIfName || strings.ContainsAny(name, "/: \t\n") {
			bad(field, name, fmt.Sprintf("want an interface name of 1 to %d characters without '/', ':' or spaces", maxIfName))
		}
	}
	ifName("Bridge", p.Bridge)
	v4 := func(field string, pr netip.Prefix) bool {
		if !pr.IsValid() || !pr.Addr().Is4() || pr.Bits() > 30 {
			bad(field, pr, "want an IPv4 prefix of /30 or wider")
			return false
		}
		return true
	}
	hostOK := v4("Host", p.Host)
	if hostOK && p.Host.Addr() == p.Host.Masked().Addr() {
		bad("Host", p.Host, "the network's own address cannot be the host's")
	}
	clusterOK := v4("ClusterCIDR", p.ClusterCIDR) && p.ClusterCIDR == p.ClusterCIDR.Masked()
	if p.ClusterCIDR.IsValid() && p.ClusterCIDR != p.ClusterCIDR.Masked() {
		bad("ClusterCIDR", p.ClusterCIDR, "want a network address (host bits zero)")
	}
	serviceOK := v4("ServiceCIDR", p.ServiceCIDR)
	ranges := []struct {
		name string
		pr   netip.Prefix
		ok   bool
	}{{"Host", p.Host.Masked(), hostOK}, {"ClusterCIDR", p.ClusterCIDR, clusterOK}, {"ServiceCIDR", p.ServiceCIDR.Masked(), serviceOK}}
	for i, a := range ranges {
		for _, b := range ranges[i+1:] {
			if a.ok && b.ok && a.pr.Overlaps(b.pr) {
				bad(b.name, b.pr, "overlaps "+a.name+" "+a.pr.String())
			}
		}
	}
	if len(p.Nodes) == 0 {
		bad("Nodes", "[]", "want at least one node")
	}
	seen := map[string]string{p.Bridge: "Bridge"}
	for i, n := range p.Nodes {
		f := fmt.Sprintf("Nodes[%d]", i)
		if n.Name == "" || strings.ContainsAny(n.Name, "/ \t\n,") {
			bad(f+".Name", n.Name, "want a node name")
		}
		ifName(f+".Tap", n.Tap)
		for _, key := range []string{"name " + n.Name, "tap " + n.Tap, "ip " + n.IP.String(), "mac " + strings.ToLower(n.MAC), "pods " + n.PodCIDR.String()} {
			if other, dup := seen[key]; dup {
				bad(f, key, "also used by "+other)
			}
			seen[key] = f
		}
		if n.Tap == p.Bridge {
			bad(f+".Tap", n.Tap, "is the bridge's name")
		}
		if !validMAC(n.MAC) {
			bad(f+".MAC", n.MAC, "want a unicast MAC such as 52:54:00:cd:00:01")
		}
		if hostOK && (!n.IP.Is4() || !p.Host.Masked().Contains(n.IP) || n.IP == p.Host.Addr() ||
			n.IP == p.Host.Masked().Addr() || n.IP == lastAddr(p.Host.Masked())) {
			bad(f+".IP", n.IP, "want an address of "+p.NodeCIDR().String()+" other than the host's, the network's and the broadcast")
		}
		if !n.PodCIDR.IsValid() || !n.PodCIDR.Addr().Is4() || n.PodCIDR != n.PodCIDR.Masked() || n.PodCIDR.Bits() > 29 {
			bad(f+".PodCIDR", n.PodCIDR, "want an IPv4 network address of /29 or wider")
		} else if clusterOK && (!p.ClusterCIDR.Contains(n.PodCIDR.Addr()) || n.PodCIDR.Bits() < p.ClusterCIDR.Bits()) {
			bad(f+".PodCIDR", n.PodCIDR, "not inside ClusterCIDR "+p.ClusterCIDR.String())
		}
		for _, m := range p.Nodes[:i] {
			if n.PodCIDR.IsValid() && m.PodCIDR.IsValid() && n.PodCIDR != m.PodCIDR && n.PodCIDR.Overlaps(m.PodCIDR) {
				bad(f+".PodCIDR", n.PodCIDR, "overlaps node "+m.Name+"'s "+m.PodCIDR.String())
			}
		}
	}
	return errors.Join(errs...)
}

func validMAC(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) != 6 {
		return false
	}
	for i, h := range parts {
		b, err := strconv.ParseUint(h, 16, 8)
		if len(h) != 2 || err != nil || (i == 0 && b&1 == 1) {
			return false
		}
	}
	return true
}

// lastAddr is the broadcast address of an IPv4 network.
func lastAddr(pr netip.Prefix) netip.Addr {
	a := pr.Masked().Addr().As4()
	host := uint32(1)<<(32-pr.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Gateway is the first address of a node's pod CIDR: the node's own
// address on its CNI bridge, its pods' default gateway.
func (n Node) Gateway() netip.Addr { return n.PodCIDR.Masked().Addr().Next() }

// Conflicts reports the ranges of the plan the host already has: an
// address in use (inUse: the host's interface addresses) or a route
// (routes: the destinations of the host's main routing table, without the
// default route). The bridge's own, when it is up already, is excluded by
// the caller.
func (p Plan) Conflicts(inUse, routes []netip.Prefix) error {
	var errs []error
	mine := []struct {
		name string
		pr   netip.Prefix
	}{{"the node network", p.NodeCIDR()}, {"the pod network", p.ClusterCIDR}, {"the service network", p.ServiceCIDR.Masked()}}
	for _, m := range mine {
		for _, a := range inUse {
			if m.pr.Contains(a.Addr()) {
				errs = append(errs, fmt.Errorf("%w: %s %s holds the host's address %s", ErrConflict, m.name, m.pr, a))
			}
		}
		for _, r := range routes {
			if r.Bits() > 0 && m.pr.Overlaps(r) {
				errs = append(errs, fmt.Errorf("%w: %s %s overlaps the host's route to %s", ErrConflict, m.name, m.pr, r))
			}
		}
	}
	return errors.Join(errs...)
}

// HostUp is the host's side of the plan as ip(8) commands, in order: the
// bridge with the host's address, one tap per node in it (qemu opens it
// by name), every link up, and a route to each node's pod CIDR through
// the node, so the API server reaches pods (webhooks, the pods' replies
// to it without masquerading).
func (p Plan) HostUp() [][]string {
	cmds := [][]string{
		{"link", "add", "name", p.Bridge, "type", "bridge"},
		{"addr", "add", p.Host.String(), "dev", p.Bridge},
		{"link", "set", p.Bridge, "up"},
	}
	for _, n := range p.Nodes {
		cmds = append(cmds,
			[]string{"tuntap", "add", "dev", n.Tap, "mode", "tap"},
			[]string{"link", "set", n.Tap, "master", p.Bridge},
			[]string{"link", "set", n.Tap, "up"},
		)
	}
	for _, n := range p.Nodes {
		cmds = append(cmds, []string{"route", "add", n.PodCIDR.String(), "via", n.IP.String(), "dev", p.Bridge})
	}
	return cmds
}

// HostDown undoes HostUp: the taps, then the bridge (its address and
// routes go with it). Each command may fail when its link is already
// gone.
func (p Plan) HostDown() [][]string {
	var cmds [][]string
	for _, n := range p.Nodes {
		cmds = append(cmds, []string{"link", "del", n.Tap})
	}
	return append(cmds, []string{"link", "del", p.Bridge})
}

// GuestRoutes are the routes node self needs besides its own network: each
// other node's pod CIDR through that node.
func (p Plan) GuestRoutes(self string) ([][]string, error) {
	if _, err := p.Node(self); err != nil {
		return nil, err
	}
	var cmds [][]string
	for _, n := range p.Nodes {
		if n.Name != self {
			cmds = append(cmds, []string{"route", "add", n.PodCIDR.String(), "via", n.IP.String(), "dev", "eth0"})
		}
	}
	return cmds, nil
}

// Interfaces is the names of the plan's host links, for a check that none
// is left over.
func (p Plan) Interfaces() []string {
	names := []string{p.Bridge}
	for _, n := range p.Nodes {
		names = append(names, n.Tap)
	}
	return slices.Clip(names)
}
