package cri

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSpec describes a pod sandbox (host network unless PodNetwork).
type PodSpec struct {
	// Name is the pod name; it must be unique among live pods.
	Name string
	// Namespace is the Kubernetes namespace (default "default").
	Namespace string
	// UID is the pod UID. Empty means one derived from Name and the time.
	UID string
	// Annotations are set on the sandbox config, and copied onto every
	// container of the pod (as a kubelet would not, but a careful test does).
	Annotations map[string]string
	// CgroupParent is the pod cgroup. Empty means the one a kubelet gives
	// the pod's QoS class: a Burstable pod /kubepods/burstable/pod<UID> for
	// the cgroupfs driver (kubepods-burstable-pod<UID>.slice with
	// SystemdCgroup), a Guaranteed one (Guaranteed, or Guaranteed
	// Resources) /kubepods/pod<UID> (kubepods-pod<UID>.slice).
	CgroupParent string
	// Guaranteed says the pod is Guaranteed (its containers' requests equal
	// their limits) without pod-level Resources to tell it.
	Guaranteed bool
	// SystemdCgroup says the runtime uses the systemd cgroup driver, so the
	// default CgroupParent is a slice name.
	SystemdCgroup bool
	// RuntimeHandler selects a containerd runtime (empty: the default).
	RuntimeHandler string
	// PodNetwork gives the pod its own network namespace (through CNI)
	// instead of the host's.
	PodNetwork bool
	// UserNS, if set, runs the pod in a user namespace (hostUsers: false).
	UserNS *runtimeapi.UserNamespace
	// Resources are the pod-level resources (KEP-2837), as a kubelet sends
	// them in LinuxPodSandboxConfig.Resources; nil means none.
	Resources *runtimeapi.LinuxContainerResources
	// LogRoot is the directory under which the pod log directory is made
	// (default /var/log/pods).
	LogRoot string
}

// Pod is a running pod sandbox.
type Pod struct {
	ID     string
	Spec   PodSpec
	Config *runtimeapi.PodSandboxConfig
	c      *Client
}

// PodCgroupParent is the cgroup parent a kubelet gives a pod of the QoS
// class ("burstable", "besteffort"; "" for Guaranteed, which sits directly
// below kubepods): /kubepods/<qos>/pod<uid> for the cgroupfs driver, or,
// for the systemd driver, the slice kubepods-<qos>-pod<uid>.slice, where
// the kubelet escapes the UID's dashes, systemd's hierarchy separator, as
// underscores.
func PodCgroupParent(systemd bool, qos, uid string) string {
	if !systemd {
		return path.Join("/kubepods", qos, "pod"+uid)
	}
	parts := []string{"kubepods"}
	if qos != "" {
		parts = append(parts, qos)
	}
	parts = append(parts, "pod"+strings.ReplaceAll(uid, "-", "_"))
	return strings.Join(parts, "-") + ".slice"
}

// guaranteed says pod-level resources r are Guaranteed: a CPU request
// (shares) equal to the CPU limit (quota), and a memory limit.
func guaranteed(r *runtimeapi.LinuxContainerResources) bool {
	if r == nil || r.GetCpuQuota() <= 0 || r.GetMemoryLimitInBytes() <= 0 {
		return false
	}
	period := r.GetCpuPeriod()
	if period <= 0 {
		period = 100000
	}
	return r.GetCpuShares()*1000/1024 == r.GetCpuQuota()*1000/period
}

// UserNSPod returns the user-namespace options of a pod whose root maps to
// host id base, with a 65536-wide range, as the kubelet allocates them.
func UserNSPod(base uint32) *runtimeapi.UserNamespace {
	m := []*runtimeapi.IDMapping{{HostId: base, ContainerId: 0, Length: 65536}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}
}

func (s *PodSpec) defaults() {
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	if s.UID == "" {
		s.UID = fmt.Sprintf("%s-%d", s.Name, time.Now().UnixNano())
	}
	if s.CgroupParent == "" {
		qos := "burstable"
		if s.Guaranteed || guaranteed(s.Resources) {
			qos = ""
		}
		s.CgroupParent = PodCgroupParent(s.SystemdCgroup, qos, s.UID)
	}
	if s.LogRoot == "" {
		s.LogRoot = "/var/log/pods"
	}
}

func (s *PodSpec) namespaces() *runtimeapi.NamespaceOption {
	network := runtimeapi.NamespaceMode_NODE
	if s.PodNetwork {
		network = runtimeapi.NamespaceMode_POD
	}
	return &runtimeapi.NamespaceOption{
		Network:       network,
		Pid:           runtimeapi.NamespaceMode_CONTAINER,
		Ipc:           runtimeapi.NamespaceMode_POD,
		UsernsOptions: s.UserNS,
	}
}

// RunPod creates and starts a pod sandbox. The log directory is created on
// this machine: the client must run where the runtime runs.
func (c *Client) RunPod(ctx context.Context, spec PodSpec) (*Pod, error) {
	spec.defaults()
	logDir := filepath.Join(spec.LogRoot, fmt.Sprintf("%s_%s_%s", spec.Namespace, spec.Name, spec.UID))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("cri: pod %s: log dir: %w", spec.Name, err)
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: spec.Name, Uid: spec.UID, Namespace: spec.Namespace,
		},
		LogDirectory: logDir,
		Labels:       map[string]string{"cgdelegate.test/pod": spec.Name},
		Annotations:  maps.Clone(spec.Annotations),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: spec.CgroupParent,
			Resources:    spec.Resources,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: spec.namespaces(),
			},
		},
	}
	resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{
		Config: cfg, RuntimeHandler: spec.RuntimeHandler,
	})
	if err != nil {
		return nil, fmt.Errorf("cri: RunPodSandbox %s: %w", spec.Name, err)
	}
	return &Pod{ID: resp.GetPodSandboxId(), Spec: spec, Config: cfg, c: c}, nil
}

// Remove stops and removes the pod and all its containers. It uses a fresh
// context so that it also works from a test cleanup after a timeout.
func (p *Pod) Remove() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := p.c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.ID}); err != nil {
		return fmt.Errorf("cri: StopPodSandbox %s: %w", p.Spec.Name, err)
	}
	if _, err := p.c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.ID}); err != nil {
		return fmt.Errorf("cri: RemovePodSandbox %s: %w", p.Spec.Name, err)
	}
	return nil
}

// Adopt returns a Pod for a sandbox that someone else (a kubelet) made, so
// that its containers can be inspected and exec'd into with this client.
// Only ID and Spec.Name are set; Remove works, the config is unknown.
func (c *Client) Adopt(podID, name string) *Pod {
	return &Pod{ID: podID, Spec: PodSpec{Name: name}, c: c}
}
