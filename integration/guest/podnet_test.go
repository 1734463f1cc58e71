//go:build integration_guest

package guest

// The cluster's pod network on the node (integration/internal/podnet):
// which node of the plan this guest is (its cgdnet.* kernel parameters),
// the kernel modules and sysctls a node needs, the routes to the other
// nodes' pods, the CNI network list (written before containerd starts) and
// kube-proxy (started once the node is registered), as a kubeadm node has
// them from its CNI's and kube-proxy's DaemonSets.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
	"github.com/cgdelegate/cgdelegate/integration/internal/podnet"
)

// Where the node keeps the pod network's files (integration/vm writes the
// binaries and the kubeconfig there).
const (
	cniConfPath         = "/etc/cni/net.d/10-cgd-pods.conflist"
	kubeProxyBinary     = "/usr/local/bin/kube-proxy"
	kubeProxyKubeconfig = "/etc/kubernetes/kube-proxy.kubeconfig"
	kubeProxyConfigPath = "/etc/kubernetes/kube-proxy.yaml"
	kubeProxyLog        = "/var/log/kube-proxy.log"
)

// podNetwork is this node's part of the pod network.
type podNetwork struct {
	plan podnet.Plan
	node podnet.Node
	// proxy is kube-proxy, once startKubeProxy has run.
	proxy *daemon
	// proxyReady is how long kube-proxy took to answer /healthz.
	proxyReady time.Duration
}

// setupPodNetwork prepares the node before containerd starts: the module
// index of the modules integration/vm shipped (the kernel then loads what
// nft and the CNI plugins ask for), br_netfilter, forwarding, the routes
// to the other nodes' pods and the CNI network list.
func (e *guestEnv) setupPodNetwork() error {
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	plan, node, err := podnet.FromKernelParams(string(cmdline))
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	start := time.Now()
	run := func(name string, args ...string) error {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("pod network: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := run("depmod", "-a"); err != nil {
		return err
	}
	// kube-proxy needs bridged traffic through netfilter: a pod reaching a
	// Service whose endpoint is on the same bridge gets its reply un-NATed.
	// kube-proxy writes conntrack's sysctls at its start, which exist only
	// once nf_conntrack is loaded.
	for _, m := range []string{"br_netfilter", "nf_conntrack"} {
		if err := run("modprobe", m); err != nil {
			return err
		}
	}
	for path, value := range map[string]string{
		"/proc/sys/net/ipv4/ip_forward":                 "1",
		"/proc/sys/net/bridge/bridge-nf-call-iptables":  "1",
		"/proc/sys/net/bridge/bridge-nf-call-ip6tables": "1",
	} {
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("pod network: %w", err)
		}
	}
	routes, err := plan.GuestRoutes(node.Name)
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	for _, r := range routes {
		if err := run("ip", r...); err != nil {
			return err
		}
	}
	conf, err := plan.CNIConfig(node.Name)
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	if err := writeFile(cniConfPath, string(conf)); err != nil {
		return err
	}
	// The node's host name is its Node's, as on a kubeadm node.
	if err := os.WriteFile("/proc/sys/kernel/hostname", []byte(node.Name), 0o644); err != nil {
		return fmt.Errorf("pod network: host name %s: %w", node.Name, err)
	}
	e.podnet = &podNetwork{plan: plan, node: node}
	e.log.Info("pod network set up", "node", node.Name, "ip", node.IP, "pods", node.PodCIDR, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// startKubeProxy writes kube-proxy's configuration, starts it and waits
// until it has programmed the Services (its /healthz answers 200).
func (e *guestEnv) startKubeProxy(ctx context.Context) error {
	pn := e.podnet
	if pn == nil {
		return errors.New("kube-proxy: the pod network was not set up")
	}
	cfg, err := pn.plan.KubeProxyConfig(pn.node.Name, kubeProxyKubeconfig)
	if err != nil {
		return err
	}
	if err := writeFile(kubeProxyConfigPath, string(cfg)); err != nil {
		return err
	}
	pn.proxy = &daemon{name: "kube-proxy", path: kubeProxyBinary, args: []string{"--config=" + kubeProxyConfigPath, "--v=1"}, logPath: kubeProxyLog}
	start := time.Now()
	if err := pn.proxy.Start(); err != nil {
		return err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(podnet.KubeProxyHealthzPort) + "/healthz"
	c := &http.Client{Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last error
	if err := poll(ctx, 500*time.Millisecond, func() (bool, error) {
		if !pn.proxy.Running() {
			return false, fmt.Errorf("kube-proxy exited:\n%s", fileTail(kubeProxyLog, 40))
		}
		resp, err := c.Get(url)
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		last = fmt.Errorf("HTTP %d", resp.StatusCode)
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return fmt.Errorf("kube-proxy %s: %w (last: %w)\n%s", url, err, last, fileTail(kubeProxyLog, 40))
	}
	pn.proxyReady = time.Since(start)
	e.log.Info("kube-proxy ready", "took", pn.proxyReady.Round(100*time.Millisecond))
	return nil
}

// netServerText is what the pod network scenario's web server serves and
// first prints.
const netServerText = "cgd-pod-network"

// clusterPodNetwork: see variant.ClusterPodNetwork.
func clusterPodNetwork(t *testing.T, e *guestEnv) {
	c := e.requireCluster(t)
	ctx := scenarioCtx(t)
	pn := e.podnet
	if pn == nil || pn.proxy == nil {
		t.Fatal("the node has no pod network or kube-proxy")
	}
	if !pn.proxy.Running() {
		t.Fatalf("kube-proxy has exited:\n%s", fileTail(kubeProxyLog, 40))
	}

	raw, err := clusterManifests.ReadFile("testdata/cluster/net-server-service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubectl(ctx, raw, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := kubectl(ctx, raw, "delete", "-f", "-", "--wait=false"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	name, applied := applyPod(ctx, t, "cluster-net-server.yaml")
	p := waitClusterPod(ctx, t, name, "running on the pod network", 3*time.Minute, func(p *corev1.Pod) bool {
		return p.Status.PodIP != "" && kubelet.Running(p, "web")
	})
	running := time.Since(applied)
	podIP, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil || !pn.node.PodCIDR.Contains(podIP) {
		t.Fatalf("pod %s: address %q (%v), want one of node %s's pod CIDR %s", name, p.Status.PodIP, err, pn.node.Name, pn.node.PodCIDR)
	}
	if p.Spec.HostNetwork {
		t.Fatalf("pod %s runs on the host network", name)
	}

	// kubectl logs and exec: the API server reaches the kubelet at the
	// node's address.
	start := time.Now()
	logs, err := kubectl(ctx, nil, "-n", clusterNamespace, "logs", name, "-c", "web")
	logsTook := time.Since(start)
	if err != nil || !strings.Contains(string(logs), netServerText) {
		t.Errorf("kubectl logs %s: %q, %v; want %q", name, logs, err, netServerText)
	}
	start = time.Now()
	hostname, err := kubectl(ctx, nil, "-n", clusterNamespace, "exec", name, "-c", "web", "--", "hostname")
	execTook := time.Since(start)
	if err != nil || strings.TrimSpace(string(hostname)) != name {
		t.Errorf("kubectl exec %s -- hostname: %q, %v; want %q", name, hostname, err, name)
	}

	// The pod's Service's ClusterIP from the node (kube-proxy's DNAT in
	// the node's output path), and the API server through the kubernetes
	// Service from inside the pod (the path the plugin's node label
	// takes). A pod reaching its own Service (hairpin) timed out here and
	// is not checked: see docs/limitations.md.
	svcIP, err := kubectl(ctx, nil, "-n", clusterNamespace, "get", "service", "cgd-net-server", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		t.Fatal(err)
	}
	var body string
	var lastErr error
	start = time.Now()
	// kube-proxy programs a new Service within a second or two.
	svcCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := poll(svcCtx, time.Second, func() (bool, error) {
		body, lastErr = httpGet(svcCtx, "http://"+strings.TrimSpace(string(svcIP))+"/")
		return lastErr == nil && strings.Contains(body, netServerText), nil
	}); err != nil {
		t.Errorf("the Service %s from the node: %q, %v (last: %v)\n%s", svcIP, body, err, lastErr, e.describeNetwork(ctx))
	}
	serviceTook := time.Since(start)
	ip, port, _ := strings.Cut(kubernetesService, ":")
	if out, err := kubectl(ctx, nil, "-n", clusterNamespace, "exec", name, "-c", "web", "--", "nc", "-w", "5", ip, port, "-e", "true"); err != nil {
		t.Errorf("the kubernetes Service %s from the pod: %q, %v\n%s", kubernetesService, out, err, e.describeNetwork(ctx))
	}
	// From the node: the pod's own address, through the node's bridge.
	if got, err := httpGet(ctx, "http://"+netip.AddrPortFrom(podIP, 8080).String()+"/"); err != nil || !strings.Contains(got, netServerText) {
		t.Errorf("the pod's address %s from the node: %q, %v", podIP, got, err)
	}
	t.Logf("pod %s at %s running after %s; kubectl logs %s, exec %s; its Service answered the node after %s; kube-proxy ready %s after its start",
		name, podIP, running.Round(100*time.Millisecond), logsTook.Round(10*time.Millisecond), execTook.Round(10*time.Millisecond),
		serviceTook.Round(10*time.Millisecond), pn.proxyReady.Round(100*time.Millisecond))
	clusterMetric(t, "ClusterPodNetwork", "cluster_pod_network", map[string]float64{
		"pod_running_seconds": seconds(running), "kubectl_logs_seconds": seconds(logsTook), "kubectl_exec_seconds": seconds(execTook),
		"service_seconds": seconds(serviceTook), "kube_proxy_ready_seconds": seconds(pn.proxyReady),
		"node_ready_seconds": seconds(c.ready),
	})
}

// httpGet is the body of a GET of url, within five seconds.
func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return string(b), nil
}

// describeNetwork is the node's addresses, routes and nftables ruleset
// and kube-proxy's log tail, for failures.
func (e *guestEnv) describeNetwork(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var b strings.Builder
	for _, args := range [][]string{{"ip", "-br", "addr"}, {"ip", "route"}, {"nft", "list", "ruleset"}} {
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		fmt.Fprintf(&b, "--- %s (%v) ---\n%s\n", strings.Join(args, " "), err, tail(string(out), 60))
	}
	fmt.Fprintf(&b, "--- %s ---\n%s", filepath.Base(kubeProxyLog), fileTail(kubeProxyLog, 30))
	return b.String()
}

// clusterNodeIP is the node's address on the cluster's bridge, its Node's
// InternalIP (the kubelet's --node-ip).
func (e *guestEnv) clusterNodeIP() string {
	if e.podnet == nil {
		return ""
	}
	return e.podnet.node.IP.String()
}

// nodeName is this node's name: the pod network plan's in a cluster boot
// (cgd-vm for the first node, cgd-vm2 for the second), kubeletNode for the
// standalone kubelet.
func (e *guestEnv) nodeName() string {
	if e.podnet != nil {
		return e.podnet.node.Name
	}
	return kubeletNode
}

// kubeletKubeconfig is the node's kubelet kubeconfig (client certificate
// system:node:<node>), written by integration/vm into the initramfs.
func (e *guestEnv) kubeletKubeconfig() string {
	name := podnet.DefaultNodeName
	if e.podnet != nil {
		name = e.podnet.node.Name
	}
	return "/etc/kubernetes/" + podnet.KubeletKubeconfig(name) + ".kubeconfig"
}
