package podnet

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// NetworkName is the CNI network's name, in the conflist and in the CNI
// plugins' state (host-local keeps its leases under
// /var/lib/cni/networks/<name>).
const NetworkName = "cgd-pods"

// CNIBridge is the bridge inside a node that its pods' veths join.
const CNIBridge = "cni0"

// CNIConfig is the CNI network list of node: the bridge plugin (the node
// is its pods' gateway, hairpin mode so a pod reaches itself through a
// Service), addresses from the node's pod CIDR by host-local, a default
// route through the node. No masquerading: the host and the other nodes
// route to every pod CIDR (HostUp, GuestRoutes), so pods keep their
// addresses across nodes as Kubernetes' network model wants.
func (p Plan) CNIConfig(node string) ([]byte, error) {
	n, err := p.Node(node)
	if err != nil {
		return nil, err
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       NetworkName,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      CNIBridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": n.PodCIDR.String(), "gateway": n.Gateway().String()}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("CNI config of %s: %w", node, err)
	}
	return append(b, '\n'), nil
}

// kubeProxyConfiguration is the subset of kubeproxy.config.k8s.io/v1alpha1
// KubeProxyConfiguration the harness writes.
type kubeProxyConfiguration struct {
	APIVersion       string `json:"apiVersion"`
	Kind             string `json:"kind"`
	ClientConnection struct {
		Kubeconfig string `json:"kubeconfig"`
	} `json:"clientConnection"`
	HostnameOverride   string `json:"hostnameOverride"`
	BindAddress        string `json:"bindAddress"`
	HealthzBindAddress string `json:"healthzBindAddress"`
	MetricsBindAddress string `json:"metricsBindAddress"`
	Mode               string `json:"mode"`
	ClusterCIDR        string `json:"clusterCIDR"`
	DetectLocalMode    string `json:"detectLocalMode"`
	Conntrack          struct {
		MaxPerCore *int32 `json:"maxPerCore"`
	} `json:"conntrack"`
}

// KubeProxyHealthzPort is where kube-proxy answers /healthz on the node's
// loopback.
const KubeProxyHealthzPort = 10256

// KubeProxyConfig is kube-proxy's configuration on node: nftables mode
// (the kernel's nf_tables and the nft command; no iptables in the node),
// the node's name as its Node has it, local traffic told apart by the
// cluster CIDR, health and metrics on loopback only, and conntrack's table
// size left as the kernel sets it (maxPerCore 0), as kind does: the node
// is a VM, and kube-proxy's sysctl writes buy nothing there.
func (p Plan) KubeProxyConfig(node, kubeconfig string) ([]byte, error) {
	n, err := p.Node(node)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(kubeconfig, "/") {
		return nil, fmt.Errorf("%w: kube-proxy kubeconfig %q: want an absolute path", ErrInvalidPlan, kubeconfig)
	}
	c := kubeProxyConfiguration{
		APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration",
		HostnameOverride: n.Name, BindAddress: "0.0.0.0",
		HealthzBindAddress: "127.0.0.1:" + strconv.Itoa(KubeProxyHealthzPort),
		MetricsBindAddress: "127.0.0.1:10249",
		Mode:               "nftables", ClusterCIDR: p.ClusterCIDR.String(), DetectLocalMode: "ClusterCIDR",
	}
	c.ClientConnection.Kubeconfig = kubeconfig
	zero := int32(0)
	c.Conntrack.MaxPerCore = &zero
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy config of %s: %w", node, err)
	}
	return b, nil
}
