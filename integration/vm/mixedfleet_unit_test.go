//go:build integration_vm

package vm

import (
	"slices"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/internal/podnet"
	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// clusterVariant is the cluster boot with the second node (Extended's).
func clusterVariant(t *testing.T) variant.Variant {
	t.Helper()
	for _, v := range append(variant.Suite(), variant.Extended()...) {
		if v.Cluster && slices.Contains(v.Scenarios, variant.ClusterMixedFleet) {
			return v
		}
	}
	t.Fatal("no cluster boot runs ClusterMixedFleet")
	return variant.Variant{}
}

// TestWithFollowers: prepare packs the second node's initramfs only for a
// cluster boot that runs ClusterMixedFleet, once, and without the engines
// image the first node's user stories need.
func TestWithFollowers(t *testing.T) {
	leader := clusterVariant(t)
	got := withFollowers([]variant.Variant{leader, leader})
	if len(got) != 3 || got[2].Name == leader.Name || !slices.Equal(got[2].Scenarios, []variant.Scenario{variant.ClusterMixedFleetNode}) {
		t.Fatalf("withFollowers(cluster, cluster) = %d variants, last %+v; want the two and one second node", len(got), got[len(got)-1])
	}
	k := bootOf(got[2])
	if !k.cluster || !k.kubelet || k.engines || k.release || k.containerd != leader.Containerd {
		t.Errorf("the second node boots %s; want a cluster node with a kubelet, no engines image, no release archive", k)
	}
	without := leader
	without.Scenarios = []variant.Scenario{variant.ClusterNodeReady, variant.ClusterNodeLabel}
	if n := len(withFollowers([]variant.Variant{without})); n != 1 {
		t.Errorf("a cluster boot without %s gets %d boots, want itself only", variant.ClusterMixedFleet, n)
	}
}

// TestFollowerSpec: the second node boots on the plan's second tap and
// MAC, with one CPU, no NUMA, followerMemoryMiB, cgroup2 without
// nsdelegate and its own cgdnet.* parameters after the variant's.
func TestFollowerSpec(t *testing.T) {
	f, ok := variant.MixedFleetNode(clusterVariant(t))
	if !ok {
		t.Fatal("the cluster boot has no second node")
	}
	plan := podnet.DefaultPlan(2)
	spec, err := followerSpec("vmlinuz", "node2.cpio", "", plan, "cgd-vm2", f)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(spec.args(), " ")
	for _, want := range []string{
		"-smp 1", "-m 3072", "-initrd node2.cpio",
		"-netdev tap,id=n0,ifname=cgdtap2,script=no,downscript=no", "virtio-net-pci,netdev=n0,mac=52:54:00:cd:00:02",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %s; want %q", args, want)
		}
	}
	if strings.Contains(args, "-numa") || strings.Contains(args, "cgdtap1") {
		t.Errorf("args %s; want no NUMA and not the first node's tap", args)
	}
	for _, want := range []string{"cgd.nsdelegate=0", "cgd.cluster=1", "cgdnet.nodes=2", "cgdnet.node=cgd-vm2", "cgdnet.ip=10.213.0.3/24", "cgdnet.host=10.213.0.1"} {
		if !slices.Contains(strings.Fields(spec.Cmdline), want) {
			t.Errorf("cmdline %q; want %s", spec.Cmdline, want)
		}
	}
	if _, n, err := podnet.FromKernelParams(spec.Cmdline); err != nil || n.Name != "cgd-vm2" {
		t.Errorf("the guest reads node %q from the cmdline (%v), want cgd-vm2", n.Name, err)
	}
	v, err := variant.Decode(spec.Cmdline)
	if err != nil || v.Name != f.Name || v.NSDelegate {
		t.Errorf("the guest decodes variant %+v (%v), want %s without nsdelegate", v, err, f.Name)
	}
	for _, tc := range []struct {
		name, node, initrd, want string
	}{
		{"unknown node", "cgd-vm9", "node2.cpio", `"cgd-vm9"`},
		{"no initramfs", "cgd-vm2", "", "no initramfs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := followerSpec("vmlinuz", tc.initrd, "", plan, tc.node, f); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one with %s", err, tc.want)
			}
		})
	}
}

// TestClusterPlanHasSecondNode: the cluster boot's plan (bridge, taps,
// PKI, initramfs kubeconfigs) has the second node ClusterMixedFleet
// boots.
func TestClusterPlanHasSecondNode(t *testing.T) {
	if err := clusterPlan.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(clusterPlan.Nodes) != 2 || clusterPlan.Nodes[1].Name != "cgd-vm2" {
		t.Fatalf("cluster plan nodes %+v, want cgd-vm and cgd-vm2", clusterPlan.Nodes)
	}
	if !slices.ContainsFunc(clusterIdentities, func(id clusterIdentity) bool { return id.User == "system:node:cgd-vm2" }) {
		t.Error("no kubelet identity for cgd-vm2")
	}
}
