package kubelet

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"
	"sigs.k8s.io/yaml"
)

// CgroupDriver is the kubelet's (and the runtime's) cgroup driver.
type CgroupDriver string

// The cgroup drivers.
const (
	CgroupFS CgroupDriver = "cgroupfs"
	Systemd  CgroupDriver = "systemd"
)

// ErrInvalidConfig is wrapped by every Config.Validate problem.
var ErrInvalidConfig = errors.New("invalid kubelet config")

// Config is what the suite varies in the KubeletConfiguration; everything
// else is fixed by what a standalone kubelet on a tmpfs root needs (see
// YAML).
type Config struct {
	// CgroupDriver must match the runtime's (SystemdCgroup in containerd).
	CgroupDriver CgroupDriver
	// StaticPodPath is the directory of static pod manifests.
	StaticPodPath string
	// RuntimeEndpoint is the CRI socket, e.g.
	// unix:///run/containerd/containerd.sock.
	RuntimeEndpoint string
	// CPUManagerPolicy is "none" or "static"; empty means "none", the
	// policy that leaves cpusets to cgdelegate.
	CPUManagerPolicy string
	// ReadOnlyPort serves /pods and /healthz over plain HTTP; 0 means
	// DefaultReadOnlyPort.
	ReadOnlyPort int
	// FeatureGates are passed as they are.
	FeatureGates map[string]bool
	// ReservedSystemCPUs is the kubelet's reservedSystemCPUs (a Linux CPU
	// list); the static CPU manager needs it (or CPUs reserved otherwise,
	// which this harness does not write).
	ReservedSystemCPUs string
	// TopologyManagerPolicy is none, best-effort, restricted or
	// single-numa-node; empty leaves the kubelet's default (none).
	TopologyManagerPolicy string
	// TopologyManagerScope is container or pod; empty leaves the default
	// (container).
	TopologyManagerScope string
	// MemoryManagerPolicy is None or Static; empty leaves the default
	// (None). Static needs ReservedMemory.
	MemoryManagerPolicy string
	// ReservedMemory is the memory each NUMA node keeps back for the
	// system (the kubelet's reservedMemory). The kubelet requires the sum
	// to equal its node allocatable reservation, so YAML also writes it
	// as systemReserved memory (every eviction threshold is 0%).
	ReservedMemory []MemoryReservation
}

// MemoryReservation is the memory one NUMA node keeps back.
type MemoryReservation struct {
	// NUMANode is the node's number.
	NUMANode int
	// Memory is a Kubernetes quantity, e.g. "128Mi".
	Memory string
}

// DefaultReadOnlyPort is the kubelet's traditional read-only port.
const DefaultReadOnlyPort = 10255

func (c Config) withDefaults() Config {
	if c.CPUManagerPolicy == "" {
		c.CPUManagerPolicy = "none"
	}
	if c.ReadOnlyPort == 0 {
		c.ReadOnlyPort = DefaultReadOnlyPort
	}
	return c
}

// Validate reports every problem of the config, each naming the field and
// its value.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s %q: %s", ErrInvalidConfig, field, fmt.Sprint(value), why))
	}
	if c.CgroupDriver != CgroupFS && c.CgroupDriver != Systemd {
		bad("CgroupDriver", c.CgroupDriver, "want cgroupfs or systemd")
	}
	if !strings.HasPrefix(c.StaticPodPath, "/") {
		bad("StaticPodPath", c.StaticPodPath, "want an absolute directory")
	}
	if !strings.HasPrefix(c.RuntimeEndpoint, "unix:///") {
		bad("RuntimeEndpoint", c.RuntimeEndpoint, "want unix:///path")
	}
	if !slices.Contains([]string{"none", "static"}, c.CPUManagerPolicy) {
		bad("CPUManagerPolicy", c.CPUManagerPolicy, "want none or static")
	}
	if c.ReadOnlyPort < 1 || c.ReadOnlyPort > 65535 {
		bad("ReadOnlyPort", c.ReadOnlyPort, "want a TCP port")
	}
	if c.ReservedSystemCPUs != "" {
		if _, err := cpuset.Parse(c.ReservedSystemCPUs); err != nil {
			bad("ReservedSystemCPUs", c.ReservedSystemCPUs, "want a Linux CPU list: "+err.Error())
		}
	} else if c.CPUManagerPolicy == "static" {
		bad("ReservedSystemCPUs", c.ReservedSystemCPUs, "the static CPU manager needs reserved CPUs")
	}
	if !slices.Contains([]string{"", "none", "best-effort", "restricted", "single-numa-node"}, c.TopologyManagerPolicy) {
		bad("TopologyManagerPolicy", c.TopologyManagerPolicy, "want none, best-effort, restricted or single-numa-node")
	}
	if !slices.Contains([]string{"", "container", "pod"}, c.TopologyManagerScope) {
		bad("TopologyManagerScope", c.TopologyManagerScope, "want container or pod")
	}
	if !slices.Contains([]string{"", "None", "Static"}, c.MemoryManagerPolicy) {
		bad("MemoryManagerPolicy", c.MemoryManagerPolicy, "want None or Static")
	}
	if c.MemoryManagerPolicy == "Static" && len(c.ReservedMemory) == 0 {
		bad("ReservedMemory", "[]", "the Static memory manager needs memory reserved on some NUMA node")
	}
	nodes := map[int]bool{}
	for i, r := range c.ReservedMemory {
		field := fmt.Sprintf("ReservedMemory[%d]", i)
		if q, err := resource.ParseQuantity(r.Memory); err != nil || q.Sign() <= 0 {
			bad(field+".Memory", r.Memory, "want a positive quantity such as 128Mi")
		}
		if r.NUMANode < 0 || nodes[r.NUMANode] {
			bad(field+".NUMANode", r.NUMANode, "want a node number, each node once")
		}
		nodes[r.NUMANode] = true
	}
	return errors.Join(errs...)
}

// kubeletConfiguration is the subset of kubelet.config.k8s.io/v1beta1
// KubeletConfiguration the suite writes (field names as the kubelet
// spells them).
type kubeletConfiguration struct {
	APIVersion                    string            `json:"apiVersion"`
	Kind                          string            `json:"kind"`
	StaticPodPath                 string            `json:"staticPodPath"`
	ContainerRuntimeEndpoint      string            `json:"containerRuntimeEndpoint"`
	CgroupDriver                  CgroupDriver      `json:"cgroupDriver"`
	FailSwapOn                    bool              `json:"failSwapOn"`
	Authentication                authentication    `json:"authentication"`
	Authorization                 authorization     `json:"authorization"`
	ReadOnlyPort                  int               `json:"readOnlyPort"`
	LocalStorageCapacityIsolation bool              `json:"localStorageCapacityIsolation"`
	EvictionHard                  map[string]string `json:"evictionHard"`
	ImageGCHighThresholdPercent   int               `json:"imageGCHighThresholdPercent"`
	ImageGCLowThresholdPercent    int               `json:"imageGCLowThresholdPercent"`
	CPUManagerPolicy              string            `json:"cpuManagerPolicy"`
	FileCheckFrequency            string            `json:"fileCheckFrequency"`
	FeatureGates                  map[string]bool   `json:"featureGates,omitempty"`
	ReservedSystemCPUs            string            `json:"reservedSystemCPUs,omitempty"`
	TopologyManagerPolicy         string            `json:"topologyManagerPolicy,omitempty"`
	TopologyManagerScope          string            `json:"topologyManagerScope,omitempty"`
	MemoryManagerPolicy           string            `json:"memoryManagerPolicy,omitempty"`
	SystemReserved                map[string]string `json:"systemReserved,omitempty"`
	ReservedMemory                []reservedMemory  `json:"reservedMemory,omitempty"`
}

type reservedMemory struct {
	NUMANode int               `json:"numaNode"`
	Limits   map[string]string `json:"limits"`
}

type authentication struct {
	Anonymous struct {
		Enabled bool `json:"enabled"`
	} `json:"anonymous"`
	Webhook struct {
		Enabled bool `json:"enabled"`
	} `json:"webhook"`
}

type authorization struct {
	Mode string `json:"mode"`
}

// YAML renders the KubeletConfiguration. Besides the Config fields it
// fixes what a kubelet without an API server, on a VM whose root is a
// tmpfs, needs:
//   - swap is allowed (failSwapOn: false);
//   - anonymous requests are allowed (AlwaysAllow), and /pods is served on
//     the read-only port;
//   - no local storage accounting, and every eviction threshold is "0%"
//     (the kubelet ignores a 0% threshold), so a small tmpfs never evicts;
//   - image GC only at 100% disk use: the images are imported, never
//     pulled, and must stay;
//   - the manifest directory is also re-listed every second, on top of the
//     kubelet's inotify watch;
//   - ReservedMemory, summed, is also systemReserved memory, so that it
//     equals the node allocatable reservation as the memory manager
//     requires.
func (c Config) YAML() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	kc := kubeletConfiguration{
		APIVersion:                    "kubelet.config.k8s.io/v1beta1",
		Kind:                          "KubeletConfiguration",
		StaticPodPath:                 c.StaticPodPath,
		ContainerRuntimeEndpoint:      c.RuntimeEndpoint,
		CgroupDriver:                  c.CgroupDriver,
		FailSwapOn:                    false,
		ReadOnlyPort:                  c.ReadOnlyPort,
		LocalStorageCapacityIsolation: false,
		EvictionHard: map[string]string{
			"memory.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%",
			"imagefs.available": "0%", "imagefs.inodesFree": "0%",
		},
		ImageGCHighThresholdPercent: 100,
		ImageGCLowThresholdPercent:  99,
		CPUManagerPolicy:            c.CPUManagerPolicy,
		FileCheckFrequency:          "1s",
		FeatureGates:                c.FeatureGates,
		ReservedSystemCPUs:          c.ReservedSystemCPUs,
		TopologyManagerPolicy:       c.TopologyManagerPolicy,
		TopologyManagerScope:        c.TopologyManagerScope,
		MemoryManagerPolicy:         c.MemoryManagerPolicy,
	}
	if len(c.ReservedMemory) > 0 {
		total := resource.Quantity{}
		for _, r := range c.ReservedMemory {
			q := resource.MustParse(r.Memory) // checked by Validate
			total.Add(q)
			kc.ReservedMemory = append(kc.ReservedMemory, reservedMemory{NUMANode: r.NUMANode, Limits: map[string]string{"memory": q.String()}})
		}
		kc.SystemReserved = map[string]string{"memory": total.String()}
	}
	kc.Authentication.Anonymous.Enabled = true
	kc.Authorization.Mode = "AlwaysAllow"
	b, err := yaml.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("kubelet config: %w", err)
	}
	return b, nil
}
