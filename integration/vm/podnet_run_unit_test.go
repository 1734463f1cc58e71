//go:build integration_vm

package vm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/podnet"
	"github.com/cgdelegate/cgdelegate/integration/internal/workstation"
)

// inNetns re-runs the calling test in a new network and mount namespace
// (unshare --net --mount), so its links and network namespaces never touch
// the host's, and reports whether this is that run. It skips without root
// or unshare.
func inNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv("CGD_IN_NETNS") == t.Name() {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("lo up: %v: %s", err, out)
		}
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates links in a network namespace of its own")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1) for a network namespace of its own")
	}
	// A mount namespace too, private: ip netns add mounts under /run/netns.
	cmd := exec.Command("unshare", "--net", "--mount", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "CGD_IN_NETNS="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a new network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the run in a network namespace failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatal("the run in a network namespace did not pass")
	}
	return false
}

func ipOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestHostNetworkUpDown: in a network namespace of its own, the plan's
// bridge comes up with the host's address, a tap per node in it and a
// route to each node's pods; a second run cannot take it while it is up;
// down leaves no link; a killed run's leftover bridge is replaced; a range
// the host already uses is refused with nothing left behind.
func TestHostNetworkUpDown(t *testing.T) {
	if !inNetns(t) {
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	lock := filepath.Join(t.TempDir(), "net.lock")
	plan := podnet.DefaultPlan(2)

	h, err := upHostNetwork(log, plan, lock)
	if err != nil {
		t.Fatal(err)
	}
	if got := ipOut(t, "-4", "-o", "addr", "show", "dev", "cgdbr0"); !strings.Contains(got, "inet 10.213.0.1/24") {
		t.Errorf("bridge addresses: %s", got)
	}
	for _, tap := range []string{"cgdtap1", "cgdtap2"} {
		got := ipOut(t, "-o", "link", "show", "dev", tap)
		if !strings.Contains(got, "master cgdbr0") || !strings.Contains(got, "tun") && !strings.Contains(got, tap) {
			t.Errorf("%s: %s", tap, got)
		}
	}
	routes := ipOut(t, "-4", "route")
	for _, want := range []string{"10.244.1.0/24 via 10.213.0.2 dev cgdbr0", "10.244.2.0/24 via 10.213.0.3 dev cgdbr0"} {
		if !strings.Contains(routes, want) {
			t.Errorf("routes lack %q:\n%s", want, routes)
		}
	}
	if _, err := upHostNetwork(log, plan, lock); err == nil || !strings.Contains(err.Error(), "another run holds") {
		t.Errorf("a second run while the first is up: err %v", err)
	}
	h.down()
	if left := leftover(plan); len(left) != 0 {
		t.Errorf("links left after down: %v", left)
	}

	// A killed run's bridge (the lock is free again).
	ipOut(t, "link", "add", "name", "cgdbr0", "type", "bridge")
	h, err = upHostNetwork(log, plan, lock)
	if err != nil {
		t.Fatalf("over a leftover bridge: %v", err)
	}
	h.down()

	// The host already has the pod network's range.
	ipOut(t, "link", "add", "name", "other0", "type", "bridge")
	ipOut(t, "addr", "add", "10.244.1.5/24", "dev", "other0")
	_, err = upHostNetwork(log, plan, lock)
	if !errors.Is(err, podnet.ErrConflict) || !strings.Contains(err.Error(), "10.244.1.5/24") {
		t.Errorf("with 10.244.1.5/24 on the host: err %v, want ErrConflict naming it", err)
	}
	if left := leftover(plan); len(left) != 0 {
		t.Errorf("links left after a refused plan: %v", left)
	}
}

func TestHostNetworkInvalidPlan(t *testing.T) {
	plan := podnet.DefaultPlan(1)
	plan.Bridge = ""
	_, err := upHostNetwork(slog.New(slog.DiscardHandler), plan, filepath.Join(t.TempDir(), "lock"))
	if !errors.Is(err, podnet.ErrInvalidPlan) {
		t.Errorf("err %v, want ErrInvalidPlan", err)
	}
}

// fakeFile writes a small file at dir/name and returns its path.
func fakeFile(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSuiteFilesPodNet: a cluster boot's initramfs carries kube-proxy with
// its kubeconfig, the real CNI plugins and the netfilter modules where the
// guest's modprobe looks, and no null CNI network (which would shadow the
// node's); another boot keeps the null network.
func TestSuiteFilesPodNet(t *testing.T) {
	dir := t.TempDir()
	f := func(name string) string { return fakeFile(t, dir, name) }
	ctr := filepath.Dir(f("containerd/containerd"))
	f("containerd/ctr")
	f("containerd/containerd-shim-runc-v2")
	mods := filepath.Join(dir, "netfilter", "lib", "modules", "6.12.0-test")
	fakeFile(t, mods, "kernel/net/netfilter/nf_tables.ko.xz")
	pkiDir := filepath.Join(dir, "pki")
	for _, id := range clusterIdentities {
		fakeFile(t, pkiDir, id.File+".kubeconfig")
	}
	a := &artifacts{
		Runc: f("runc"), Kubelet: f("kubelet"), Plugin: f("cgdelegate"), Hook: f("cgdelegate-hook"),
		GuestTest: f("guest.test"), OverlayKO: f("overlay.ko"), ContainerdDropIn: f("cgdelegate.toml"), NullCNI: f("nullcni"),
		Containerd: map[string]string{"v2.4.2": ctr},
		Cluster: &clusterArtifacts{
			Bin: filepath.Dir(f("cp/kubectl")), Helm: f("helm"), Chart: filepath.Dir(f("chart/Chart.yaml")),
			PKI: clusterPKI{Dir: pkiDir, Port: 6443}, WorkstationPort: 20001, WorkstationToken: "0123456789abcdef",
		},
		NetModules: []string{f("net/failover.ko"), f("net/net_failover.ko"), f("net/virtio_net.ko")},
		PodNet: &podNetArtifacts{
			KubeProxy: f("kube-proxy"), CNIDir: filepath.Dir(f("cni/bridge")), Modules: mods, Release: "6.12.0-test",
		},
	}
	f("cni/host-local")
	f("cni/loopback")
	entries := func(boot bootKind) map[string]cpioEntry {
		t.Helper()
		var buf bytes.Buffer
		w := newCPIOWriter(&buf)
		if err := writeSuiteFiles(w, a, ctr, "v2.4.2", "cgd/overlay.ko", boot); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		m := map[string]cpioEntry{}
		for _, e := range readCPIO(t, buf.Bytes()) {
			m[e.name] = e
		}
		return m
	}
	cluster := entries(bootKind{containerd: "v2.4.2", systemd: true, kubelet: true, cluster: true})
	for name, data := range map[string]string{
		"usr/local/bin/kube-proxy":                                         "kube-proxy",
		"etc/kubernetes/kube-proxy.kubeconfig":                             "kube-proxy.kubeconfig",
		"etc/kubernetes/kubelet.kubeconfig":                                "kubelet.kubeconfig",
		"etc/kubernetes/kubelet-cgd-vm2.kubeconfig":                        "kubelet-cgd-vm2.kubeconfig",
		"opt/cni/bin/bridge":                                               "cni/bridge",
		"opt/cni/bin/host-local":                                           "cni/host-local",
		"opt/cni/bin/loopback":                                             "cni/loopback",
		"usr/lib/modules/6.12.0-test/kernel/net/netfilter/nf_tables.ko.xz": "kernel/net/netfilter/nf_tables.ko.xz",
	} {
		if e, ok := cluster[name]; !ok || e.data != data {
			t.Errorf("cluster boot: %s = %q (present %v), want %q", name, e.data, ok, data)
		}
	}
	if _, ok := cluster["etc/cni/net.d/10-null.conflist"]; ok {
		t.Error("the cluster boot carries the null CNI network")
	}
	// kubectl and helm run on the host's workstation, which the guest
	// is told of; they are not in the guest.
	var ep workstation.Endpoint
	if err := json.Unmarshal([]byte(cluster[workstation.File].data), &ep); err != nil || ep.URL != "http://"+clusterHostIP+":20001" || ep.Token != "0123456789abcdef" {
		t.Errorf("cluster boot: %s = %q (%v), want the host's bridge address, port 20001 and the token", workstation.File, cluster[workstation.File].data, err)
	}
	for _, name := range []string{"usr/local/bin/kubectl", "usr/local/bin/helm"} {
		if _, ok := cluster[name]; ok {
			t.Errorf("cluster boot: %s is in the guest; it runs on the workstation", name)
		}
	}
	plain := entries(bootKind{containerd: "v2.4.2", systemd: true})
	if _, ok := plain["etc/cni/net.d/10-null.conflist"]; !ok {
		t.Error("a boot without a cluster lacks the null CNI network")
	}
	if e := plain["opt/cni/bin/loopback"]; e.mode&cpioModeLink != cpioModeLink || e.data != "nullcni" {
		t.Errorf("a boot without a cluster: loopback %+v, want the link to nullcni", e)
	}
	if _, ok := plain["usr/local/bin/kube-proxy"]; ok {
		t.Error("a boot without a cluster carries kube-proxy")
	}
}

// debianCNIPlugins is a directory with Debian's bridge, host-local and
// loopback plugins: the cached ingredient, else the host's package.
func debianCNIPlugins(t *testing.T) string {
	t.Helper()
	cached, _ := filepath.Glob(filepath.Join(defaultCacheDir(), "cni", "*", "bridge"))
	for _, dir := range append(cached, "/usr/lib/cni/bridge") {
		dir = filepath.Dir(dir)
		if _, err := os.Stat(filepath.Join(dir, "host-local")); err == nil {
			return dir
		}
	}
	t.Skip("needs Debian's CNI plugins: the cni/ ingredient (make ingredients) or the containernetworking-plugins package")
	return ""
}

// TestCNIConfigWithDebianPlugins: the network list a node writes
// (podnet.CNIConfig) works with the CNI plugins the guest gets, run as
// containerd runs them: a pod's network namespace gets an address of the
// node's pod CIDR and a default route through the node's bridge, which
// holds the gateway address; DEL takes the address back.
func TestCNIConfigWithDebianPlugins(t *testing.T) {
	pluginDir := debianCNIPlugins(t)
	if !inNetns(t) {
		return
	}
	plan := podnet.DefaultPlan(2)
	node := plan.Nodes[1]
	raw, err := plan.CNIConfig(node.Name)
	if err != nil {
		t.Fatal(err)
	}
	// What libcni hands each plugin of a list: the plugin's config with
	// the list's name and version; the leases in a directory of the test.
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	conf := list.Plugins[0]
	conf["name"], conf["cniVersion"] = list.Name, list.CNIVersion
	conf["ipam"].(map[string]any)["dataDir"] = t.TempDir()
	stdin, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	// The pod's network namespace is a sleeping process's (ip netns add
	// would create /run/netns/<name> on the host's file system).
	pod := exec.Command("unshare", "--net", "sleep", "60")
	if err := pod.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pod.Process.Kill(); _ = pod.Wait() })
	podNS := fmt.Sprintf("/proc/%d/ns/net", pod.Process.Pid)
	if err := waitNetns(podNS); err != nil {
		t.Fatal(err)
	}
	inPod := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("nsenter", append([]string{"--net=" + podNS, "ip"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s in the pod: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	cni := func(command string) []byte {
		t.Helper()
		cmd := exec.Command(filepath.Join(pluginDir, "bridge"))
		cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID=cgdpod", "CNI_NETNS="+podNS,
			"CNI_IFNAME=eth0", "CNI_PATH="+pluginDir)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bridge %s: %v: %s", command, err, out)
		}
		return out
	}
	var result struct {
		IPs []struct {
			Address string `json:"address"`
			Gateway string `json:"gateway"`
		} `json:"ips"`
	}
	out := cni("ADD")
	if err := json.Unmarshal(out, &result); err != nil {
		t.Fatalf("ADD result %s: %v", out, err)
	}
	if len(result.IPs) != 1 {
		t.Fatalf("ADD result %s: want one address", out)
	}
	addr, err := netip.ParsePrefix(result.IPs[0].Address)
	if err != nil || !node.PodCIDR.Contains(addr.Addr()) || addr.Bits() != node.PodCIDR.Bits() || result.IPs[0].Gateway != node.Gateway().String() {
		t.Errorf("ADD gave %s via %s, want an address of %s via %s", result.IPs[0].Address, result.IPs[0].Gateway, node.PodCIDR, node.Gateway())
	}
	if got := ipOut(t, "-4", "-o", "addr", "show", "dev", podnet.CNIBridge); !strings.Contains(got, "inet "+node.Gateway().String()+"/24") {
		t.Errorf("%s: %s, want the gateway %s", podnet.CNIBridge, got, node.Gateway())
	}
	if got := inPod("-4", "route"); !strings.Contains(got, "default via "+node.Gateway().String()+" dev eth0") {
		t.Errorf("the pod's routes: %s", got)
	}
	if got := inPod("-4", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(got, "inet "+addr.String()) {
		t.Errorf("the pod's eth0: %s, want %s", got, addr)
	}
	cni("DEL")
	if got := inPod("-o", "link"); strings.Contains(got, "eth0") {
		t.Errorf("eth0 still in the pod after DEL: %s", got)
	}
}

// waitNetns waits until the network namespace at path is not the test's
// own any more (the unshare has happened).
func waitNetns(path string) error {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return err
	}
	for range 100 {
		if other, err := os.Readlink(path); err == nil && other != self {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s never became a network namespace of its own", path)
}

// TestKubeProxyConfigAccepted: the kube-proxy the guest runs reads the
// configuration a node writes (podnet.KubeProxyConfig) strictly, every
// field known, and keeps nftables mode. It needs the kubernetes/
// ingredient (make ingredients).
func TestKubeProxyConfigAccepted(t *testing.T) {
	bin := filepath.Join(defaultCacheDir(), kubernetesKey, "kube-proxy")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("needs the kube-proxy ingredient (make ingredients): %v", err)
	}
	dir := t.TempDir()
	cfg, err := podnet.DefaultPlan(2).KubeProxyConfig("cgd-vm2", "/etc/kubernetes/kube-proxy.kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	in, out := filepath.Join(dir, "in.yaml"), filepath.Join(dir, "out.yaml")
	if err := os.WriteFile(in, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := exec.Command(bin, "--config="+in, "--write-config-to="+out).CombinedOutput()
	if err != nil {
		t.Fatalf("kube-proxy --write-config-to: %v\n%s", err, log)
	}
	if strings.Contains(string(log), "strict decoding") {
		t.Errorf("kube-proxy did not read the configuration strictly:\n%s", log)
	}
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mode: nftables", "hostnameOverride: cgd-vm2", "clusterCIDR: 10.244.0.0/16", "maxPerCore: 0"} {
		if !strings.Contains(string(written), want) {
			t.Errorf("kube-proxy's configuration lacks %q:\n%s", want, written)
		}
	}
}
