//go:build integration_vm

package vm

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/internal/podnet"
)

// inNetns re-runs the calling test in a new network namespace (unshare
// --net), so its links never touch the host's, and reports whether this
// is that run. It skips without root or unshare.
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
	cmd := exec.Command("unshare", "--net", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
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
			PKI: clusterPKI{Dir: pkiDir, Port: 6443},
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
		"usr/local/bin/kube-proxy":             "kube-proxy",
		"etc/kubernetes/kube-proxy.kubeconfig": "kube-proxy.kubeconfig",
		"opt/cni/bin/bridge":                   "cni/bridge",
		"opt/cni/bin/host-local":               "cni/host-local",
		"opt/cni/bin/loopback":                 "cni/loopback",
		"usr/lib/modules/6.12.0-test/kernel/net/netfilter/nf_tables.ko.xz": "kernel/net/netfilter/nf_tables.ko.xz",
	} {
		if e, ok := cluster[name]; !ok || e.data != data {
			t.Errorf("cluster boot: %s = %q (present %v), want %q", name, e.data, ok, data)
		}
	}
	if _, ok := cluster["etc/cni/net.d/10-null.conflist"]; ok {
		t.Error("the cluster boot carries the null CNI network")
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
