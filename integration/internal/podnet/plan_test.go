package podnet

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestDefaultPlan(t *testing.T) {
	p := DefaultPlan(2)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []Node{
		{Name: "cgd-vm", Tap: "cgdtap1", MAC: "52:54:00:cd:00:01", IP: netip.MustParseAddr("10.213.0.2"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24")},
		{Name: "cgd-vm2", Tap: "cgdtap2", MAC: "52:54:00:cd:00:02", IP: netip.MustParseAddr("10.213.0.3"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24")},
	}
	if !slices.Equal(p.Nodes, want) {
		t.Errorf("nodes %+v, want %+v", p.Nodes, want)
	}
	if got := p.Host.String(); got != "10.213.0.1/24" {
		t.Errorf("host %s", got)
	}
	if got := p.Nodes[1].Gateway().String(); got != "10.244.2.1" {
		t.Errorf("gateway of %s: %s", p.Nodes[1].Name, got)
	}
	if err := DefaultPlan(200).Validate(); err != nil {
		t.Errorf("200 nodes: %v", err)
	}
}

func TestPlanValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Plan)
		words  []string
	}{
		{"bridge name too long", func(p *Plan) { p.Bridge = "a-very-long-bridge" }, []string{"Bridge", `"a-very-long-bridge"`}},
		{"tap is the bridge", func(p *Plan) { p.Nodes[0].Tap = p.Bridge }, []string{"Nodes[0].Tap", "bridge"}},
		{"host is the network", func(p *Plan) { p.Host = netip.MustParsePrefix("10.213.0.0/24") }, []string{"Host", "network's own address"}},
		{"IPv6 host", func(p *Plan) { p.Host = netip.MustParsePrefix("fd00::1/64") }, []string{"Host", "IPv4"}},
		{"node outside the network", func(p *Plan) { p.Nodes[1].IP = netip.MustParseAddr("10.214.0.3") }, []string{"Nodes[1].IP", "10.214.0.3"}},
		{"node on the host's address", func(p *Plan) { p.Nodes[0].IP = p.Host.Addr() }, []string{"Nodes[0].IP", "other than the host's"}},
		{"node on the broadcast", func(p *Plan) { p.Nodes[0].IP = netip.MustParseAddr("10.213.0.255") }, []string{"Nodes[0].IP"}},
		{"same IP twice", func(p *Plan) { p.Nodes[1].IP = p.Nodes[0].IP }, []string{"Nodes[1]", "also used by Nodes[0]"}},
		{"same name twice", func(p *Plan) { p.Nodes[1].Name = p.Nodes[0].Name }, []string{"Nodes[1]", "name cgd-vm"}},
		{"multicast MAC", func(p *Plan) { p.Nodes[0].MAC = "01:54:00:cd:00:01" }, []string{"Nodes[0].MAC", "01:54:00:cd:00:01"}},
		{"pod CIDR outside the cluster", func(p *Plan) { p.Nodes[0].PodCIDR = netip.MustParsePrefix("10.245.1.0/24") }, []string{"Nodes[0].PodCIDR", "ClusterCIDR"}},
		{"pod CIDRs overlap", func(p *Plan) { p.Nodes[1].PodCIDR = netip.MustParsePrefix("10.244.0.0/23") }, []string{"Nodes[1].PodCIDR", "overlaps node cgd-vm"}},
		{"pod CIDR not a network", func(p *Plan) { p.Nodes[0].PodCIDR = netip.MustParsePrefix("10.244.1.7/24") }, []string{"Nodes[0].PodCIDR", "network address"}},
		{"services in the pods", func(p *Plan) { p.ServiceCIDR = netip.MustParsePrefix("10.244.200.0/24") }, []string{"ServiceCIDR", "overlaps ClusterCIDR"}},
		{"no nodes", func(p *Plan) { p.Nodes = nil }, []string{"Nodes", "at least one"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPlan(2)
			tc.modify(&p)
			err := p.Validate()
			if !errors.Is(err, ErrInvalidPlan) {
				t.Fatalf("err %v, want ErrInvalidPlan", err)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not say %q", err, w)
				}
			}
		})
	}
}

func TestConflicts(t *testing.T) {
	p := DefaultPlan(2)
	pfx := netip.MustParsePrefix
	tests := []struct {
		name          string
		inUse, routes []netip.Prefix
		words         []string
	}{
		{"a host like this one", []netip.Prefix{pfx("127.0.0.1/8"), pfx("192.0.2.2/24")}, []netip.Prefix{pfx("0.0.0.0/0"), pfx("192.0.2.0/24")}, nil},
		{"qemu's and podman's ranges are fine", []netip.Prefix{pfx("10.88.0.1/16"), pfx("10.0.2.15/24")}, []netip.Prefix{pfx("10.88.0.0/16")}, nil},
		{"an address on the node network", []netip.Prefix{pfx("10.213.0.9/24")}, nil, []string{"node network 10.213.0.0/24", "10.213.0.9/24"}},
		{"a route over the pods", nil, []netip.Prefix{pfx("10.0.0.0/8")}, []string{"pod network 10.244.0.0/16", "route to 10.0.0.0/8", "node network"}},
		{"a flannel on the host", []netip.Prefix{pfx("10.244.0.1/24")}, []netip.Prefix{pfx("10.244.0.0/24")}, []string{"pod network", "10.244.0.1/24"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Conflicts(tc.inUse, tc.routes)
			if tc.words == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrConflict) {
				t.Fatalf("err %v, want ErrConflict", err)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not say %q", err, w)
				}
			}
		})
	}
}

func TestHostUpDown(t *testing.T) {
	p := DefaultPlan(2)
	up := p.HostUp()
	joined := make([]string, len(up))
	for i, c := range up {
		joined[i] = strings.Join(c, " ")
	}
	want := []string{
		"link add name cgdbr0 type bridge",
		"addr add 10.213.0.1/24 dev cgdbr0",
		"link set cgdbr0 up",
		"tuntap add dev cgdtap1 mode tap",
		"link set cgdtap1 master cgdbr0",
		"link set cgdtap1 up",
		"tuntap add dev cgdtap2 mode tap",
		"link set cgdtap2 master cgdbr0",
		"link set cgdtap2 up",
		"route add 10.244.1.0/24 via 10.213.0.2 dev cgdbr0",
		"route add 10.244.2.0/24 via 10.213.0.3 dev cgdbr0",
	}
	if !slices.Equal(joined, want) {
		t.Errorf("HostUp:\n%s\nwant\n%s", strings.Join(joined, "\n"), strings.Join(want, "\n"))
	}
	var down []string
	for _, c := range p.HostDown() {
		down = append(down, strings.Join(c, " "))
	}
	if want := []string{"link del cgdtap1", "link del cgdtap2", "link del cgdbr0"}; !slices.Equal(down, want) {
		t.Errorf("HostDown %q, want %q", down, want)
	}
	if got := p.Interfaces(); !slices.Equal(got, []string{"cgdbr0", "cgdtap1", "cgdtap2"}) {
		t.Errorf("Interfaces %q", got)
	}
}

func TestGuestRoutes(t *testing.T) {
	p := DefaultPlan(3)
	got, err := p.GuestRoutes("cgd-vm2")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range got {
		lines = append(lines, strings.Join(c, " "))
	}
	want := []string{"route add 10.244.1.0/24 via 10.213.0.2 dev eth0", "route add 10.244.3.0/24 via 10.213.0.4 dev eth0"}
	if !slices.Equal(lines, want) {
		t.Errorf("routes %q, want %q", lines, want)
	}
	if r, err := DefaultPlan(1).GuestRoutes("cgd-vm"); err != nil || len(r) != 0 {
		t.Errorf("one node: %q, %v; want no route", r, err)
	}
	if _, err := p.GuestRoutes("cgd-vm9"); !errors.Is(err, ErrInvalidPlan) || !strings.Contains(err.Error(), `"cgd-vm9"`) {
		t.Errorf("unknown node: %v", err)
	}
}

func TestCNIConfig(t *testing.T) {
	p := DefaultPlan(2)
	raw, err := p.CNIConfig("cgd-vm2")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []struct {
			Type        string `json:"type"`
			Bridge      string `json:"bridge"`
			IsGateway   bool   `json:"isGateway"`
			IPMasq      bool   `json:"ipMasq"`
			HairpinMode bool   `json:"hairpinMode"`
			IPAM        struct {
				Type   string `json:"type"`
				Ranges [][]struct {
					Subnet  string `json:"subnet"`
					Gateway string `json:"gateway"`
				} `json:"ranges"`
				Routes []struct {
					Dst string `json:"dst"`
				} `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&conf); err != nil {
		t.Fatalf("%v:\n%s", err, raw)
	}
	if conf.CNIVersion != "1.0.0" || conf.Name != NetworkName || len(conf.Plugins) != 1 {
		t.Fatalf("conflist %s", raw)
	}
	b := conf.Plugins[0]
	if b.Type != "bridge" || b.Bridge != CNIBridge || !b.IsGateway || b.IPMasq || !b.HairpinMode || b.IPAM.Type != "host-local" {
		t.Errorf("bridge plugin %+v", b)
	}
	if len(b.IPAM.Ranges) != 1 || len(b.IPAM.Ranges[0]) != 1 || b.IPAM.Ranges[0][0].Subnet != "10.244.2.0/24" || b.IPAM.Ranges[0][0].Gateway != "10.244.2.1" {
		t.Errorf("ranges %+v, want node cgd-vm2's 10.244.2.0/24 with gateway 10.244.2.1", b.IPAM.Ranges)
	}
	if len(b.IPAM.Routes) != 1 || b.IPAM.Routes[0].Dst != "0.0.0.0/0" {
		t.Errorf("routes %+v, want the default route", b.IPAM.Routes)
	}
	if _, err := p.CNIConfig("nope"); !errors.Is(err, ErrInvalidPlan) {
		t.Errorf("unknown node: %v", err)
	}
}

func TestKubeProxyConfig(t *testing.T) {
	p := DefaultPlan(2)
	raw, err := p.KubeProxyConfig("cgd-vm2", "/etc/kubernetes/kube-proxy.kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]any{
		"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
		"mode": "nftables", "hostnameOverride": "cgd-vm2", "clusterCIDR": "10.244.0.0/16",
		"detectLocalMode": "ClusterCIDR", "healthzBindAddress": "127.0.0.1:10256",
		"clientConnection.kubeconfig": "/etc/kubernetes/kube-proxy.kubeconfig", "conntrack.maxPerCore": float64(0),
	} {
		v := any(got)
		for _, k := range strings.Split(path, ".") {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		if v != want {
			t.Errorf("%s = %v (%T), want %v:\n%s", path, v, v, want, raw)
		}
	}
	if _, err := p.KubeProxyConfig("cgd-vm2", "relative"); !errors.Is(err, ErrInvalidPlan) || !strings.Contains(err.Error(), `"relative"`) {
		t.Errorf("relative kubeconfig: %v", err)
	}
}

func TestKernelParams(t *testing.T) {
	p := DefaultPlan(2)
	params, err := p.KernelParams("cgd-vm2")
	if err != nil {
		t.Fatal(err)
	}
	if want := "cgdnet.nodes=2 cgdnet.node=cgd-vm2 cgdnet.ip=10.213.0.3/24 cgdnet.host=10.213.0.1"; params != want {
		t.Errorf("params %q, want %q", params, want)
	}
	got, n, err := FromKernelParams("console=ttyS0 cgd.variant=x " + params + " quiet")
	if err != nil {
		t.Fatal(err)
	}
	if n != p.Nodes[1] || len(got.Nodes) != 2 {
		t.Errorf("node %+v of %d, want %+v", n, len(got.Nodes), p.Nodes[1])
	}
	for _, tc := range []struct{ name, cmdline, word string }{
		{"none", "console=ttyS0 cgd.cluster=1", "none on the command line"},
		{"bad count", "cgdnet.nodes=x cgdnet.node=cgd-vm", `cgdnet.nodes="x"`},
		{"unknown node", "cgdnet.nodes=1 cgdnet.node=cgd-vm2", `cgdnet.node="cgd-vm2"`},
		{"address not the plan's", "cgdnet.nodes=2 cgdnet.node=cgd-vm2 cgdnet.ip=10.213.0.9/24 cgdnet.host=10.213.0.1", `cgdnet.ip="10.213.0.9/24"`},
		{"twice", params + " cgdnet.node=cgd-vm", "given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := FromKernelParams(tc.cmdline)
			if !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), tc.word) {
				t.Errorf("err %v, want ErrParams saying %q", err, tc.word)
			}
		})
	}
}

func TestKubeletKubeconfig(t *testing.T) {
	for node, want := range map[string]string{"cgd-vm": "kubelet", "cgd-vm2": "kubelet-cgd-vm2"} {
		if got := KubeletKubeconfig(node); got != want {
			t.Errorf("KubeletKubeconfig(%s) = %s, want %s", node, got, want)
		}
	}
}
