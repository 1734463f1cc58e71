package cri

import (
	"context"
	"fmt"
	"maps"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerSpec describes a container in a Pod.
type ContainerSpec struct {
	// Name is the container name, unique in the pod.
	Name string
	// Image is the image reference (already present in the runtime).
	Image string
	// Command is the entrypoint with its arguments. Empty: the image's.
	Command []string
	// Annotations are added to the pod's annotations on the container.
	Annotations map[string]string
	// MemoryLimit in bytes; 0 means none. Ignored when Resources is set.
	MemoryLimit int64
	// Resources, if set, are sent as they are (CPU shares, quota, cpuset...).
	Resources *runtimeapi.LinuxContainerResources
	// Privileged runs the container privileged.
	Privileged bool
	// CapAdd are capabilities added to the runtime's default set, as a
	// pod's securityContext.capabilities.add ("SYS_ADMIN").
	CapAdd []string
	// SeccompRuntimeDefault asks for the runtime's default seccomp profile
	// (securityContext.seccompProfile.type: RuntimeDefault); false sends no
	// profile, which the runtime runs unconfined.
	SeccompRuntimeDefault bool
	// ProcMount is what a kubelet sends for securityContext.procMount:
	// ProcMountDefault (its masked and read-only /proc and /sys paths) or
	// ProcMountUnmasked (none); empty sends nothing.
	ProcMount string
}

// The values of ContainerSpec.ProcMount.
const (
	ProcMountDefault  = "Default"
	ProcMountUnmasked = "Unmasked"
)

// The paths a kubelet (v1.37, pkg/securitycontext) masks and makes
// read-only for procMount: Default, without the per-CPU thermal_throttle
// files it adds when the host has them.
var (
	kubeletMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	kubeletReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// securityContext is the container's security context as a kubelet would
// send it for spec.
func (spec ContainerSpec) securityContext(ns *runtimeapi.NamespaceOption) *runtimeapi.LinuxContainerSecurityContext {
	sc := &runtimeapi.LinuxContainerSecurityContext{Privileged: spec.Privileged, NamespaceOptions: ns}
	if len(spec.CapAdd) > 0 {
		sc.Capabilities = &runtimeapi.Capability{AddCapabilities: spec.CapAdd}
	}
	if spec.SeccompRuntimeDefault {
		sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	}
	switch spec.ProcMount {
	case ProcMountDefault:
		sc.MaskedPaths, sc.ReadonlyPaths = kubeletMaskedPaths, kubeletReadonlyPaths
	case ProcMountUnmasked:
		sc.MaskedPaths, sc.ReadonlyPaths = []string{}, []string{}
	}
	return sc
}

// Container is a created container.
type Container struct {
	ID   string
	Name string
	Pod  *Pod
	// Via, when set, runs Exec instead of the CRI's ExecSync: kubectl
	// exec through the API server and the kubelet, as a user does.
	Via Execer
}

// Execer runs argv in a container and returns what it printed and its
// exit status (a non-zero one is not an error), within timeout.
type Execer func(ctx context.Context, timeout time.Duration, argv ...string) (ExecResult, error)

// ExecResult is what ExecSync returned.
type ExecResult struct {
	Stdout, Stderr string
	ExitCode       int32
}

// String is a one-line summary for test messages.
func (r ExecResult) String() string {
	return fmt.Sprintf("exit=%d stdout=%q stderr=%q", r.ExitCode, r.Stdout, r.Stderr)
}

// CreateContainer creates (but does not start) a container in the pod.
func (p *Pod) CreateContainer(ctx context.Context, spec ContainerSpec) (*Container, error) {
	ann := maps.Clone(p.Spec.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	maps.Copy(ann, spec.Annotations)
	res := spec.Resources
	if res == nil {
		res = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: spec.MemoryLimit, CpuShares: 2}
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: spec.Name},
		Image:       &runtimeapi.ImageSpec{Image: spec.Image},
		Command:     spec.Command,
		LogPath:     spec.Name + ".log",
		Labels:      map[string]string{"cgdelegate.test/container": spec.Name},
		Annotations: ann,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       res,
			SecurityContext: spec.securityContext(p.Spec.namespaces()),
		},
	}
	resp, err := p.c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: p.ID, Config: cfg, SandboxConfig: p.Config,
	})
	if err != nil {
		return nil, fmt.Errorf("cri: CreateContainer %s/%s: %w", p.Spec.Name, spec.Name, err)
	}
	return &Container{ID: resp.GetContainerId(), Name: spec.Name, Pod: p}, nil
}

// Start starts a created container.
func (ct *Container) Start(ctx context.Context) error {
	if _, err := ct.Pod.c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ct.ID}); err != nil {
		return fmt.Errorf("cri: StartContainer %s/%s: %w", ct.Pod.Spec.Name, ct.Name, err)
	}
	return nil
}

// RunContainer creates and starts a container.
func (p *Pod) RunContainer(ctx context.Context, spec ContainerSpec) (*Container, error) {
	ct, err := p.CreateContainer(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := ct.Start(ctx); err != nil {
		return ct, err
	}
	return ct, nil
}

// Exec runs argv in the container with ExecSync (or Via). A non-zero exit
// status is not an error: it is in the result.
func (ct *Container) Exec(ctx context.Context, timeout time.Duration, argv ...string) (ExecResult, error) {
	if ct.Via != nil {
		return ct.Via(ctx, timeout, argv...)
	}
	resp, err := ct.Pod.c.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: ct.ID, Cmd: argv, Timeout: int64(timeout / time.Second),
	})
	if err != nil {
		return ExecResult{}, fmt.Errorf("cri: ExecSync %s/%s %q: %w", ct.Pod.Spec.Name, ct.Name, argv, err)
	}
	return ExecResult{
		Stdout: string(resp.GetStdout()), Stderr: string(resp.GetStderr()), ExitCode: resp.GetExitCode(),
	}, nil
}

// Sh runs a shell script in the container (sh -c) with a 60 s timeout.
func (ct *Container) Sh(ctx context.Context, script string) (ExecResult, error) {
	return ct.Exec(ctx, 60*time.Second, "sh", "-c", script)
}

// Status returns the container status.
func (ct *Container) Status(ctx context.Context) (*runtimeapi.ContainerStatus, error) {
	resp, err := ct.Pod.c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ct.ID})
	if err != nil {
		return nil, fmt.Errorf("cri: ContainerStatus %s/%s: %w", ct.Pod.Spec.Name, ct.Name, err)
	}
	return resp.GetStatus(), nil
}

// Stop stops the container (timeout in seconds before SIGKILL).
func (ct *Container) Stop(ctx context.Context, timeout int64) error {
	if _, err := ct.Pod.c.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ct.ID, Timeout: timeout}); err != nil {
		return fmt.Errorf("cri: StopContainer %s/%s: %w", ct.Pod.Spec.Name, ct.Name, err)
	}
	return nil
}

// Remove removes the container (stop it first, as a kubelet does).
func (ct *Container) Remove(ctx context.Context) error {
	if _, err := ct.Pod.c.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ct.ID}); err != nil {
		return fmt.Errorf("cri: RemoveContainer %s/%s: %w", ct.Pod.Spec.Name, ct.Name, err)
	}
	return nil
}
