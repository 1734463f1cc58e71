package vm

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseRoutes(t *testing.T) {
	out := `default via 192.0.2.1 dev eth0
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
10.9.9.9 via 192.0.2.1 dev eth0
unreachable 10.50.0.0/16
`
	got, err := parseRoutes(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("10.9.9.9/32"), netip.MustParsePrefix("10.50.0.0/16")}
	if !slices.Equal(got, want) {
		t.Errorf("routes %v, want %v", got, want)
	}
	if _, err := parseRoutes(strings.NewReader("nonsense/99 dev x\n")); err == nil || !strings.Contains(err.Error(), `"nonsense/99 dev x"`) {
		t.Errorf("bad line: err %v, want one quoting it", err)
	}
}

// TestNetfilterTarPatterns: every module the guest's nftables kube-proxy
// and bridge CNI need matches a pattern, and nothing else of the kernel
// does (the guest carries no more than it uses).
func TestNetfilterTarPatterns(t *testing.T) {
	match := func(name string) bool {
		for _, p := range netfilterTarPatterns() {
			prefix, _, _ := strings.Cut(strings.TrimPrefix(p, "*/kernel/"), "*")
			if strings.HasPrefix(strings.TrimPrefix(name, "./lib/modules/6.12.117+deb12-amd64/kernel/"), prefix) {
				return true
			}
		}
		return false
	}
	for _, m := range []string{
		"net/netfilter/nf_tables.ko.xz", "net/netfilter/nft_numgen.ko.xz", "net/netfilter/nf_conntrack.ko.xz",
		"net/ipv4/netfilter/nf_defrag_ipv4.ko.xz", "net/ipv6/netfilter/nf_defrag_ipv6.ko.xz",
		"net/bridge/bridge.ko.xz", "net/bridge/br_netfilter.ko.xz", "net/802/stp.ko.xz", "net/llc/llc.ko.xz",
		"drivers/net/veth.ko.xz", "lib/libcrc32c.ko.xz", "crypto/crc32c_generic.ko.xz",
	} {
		if !match("./lib/modules/6.12.117+deb12-amd64/kernel/" + m) {
			t.Errorf("%s is not extracted", m)
		}
	}
	for _, m := range []string{"drivers/net/vxlan/vxlan.ko.xz", "fs/btrfs/btrfs.ko.xz", "lib/crc8.ko.xz"} {
		if match("./lib/modules/6.12.117+deb12-amd64/kernel/" + m) {
			t.Errorf("%s is extracted", m)
		}
	}
	if got := guestModulesDir("6.12.117+deb12-amd64"); got != "usr/lib/modules/6.12.117+deb12-amd64" {
		t.Errorf("guestModulesDir = %s", got)
	}
}
