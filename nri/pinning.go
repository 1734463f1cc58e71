package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cgroupfs"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/kubeletcpu"
	"github.com/cgdelegate/cgdelegate/internal/podres"
	"github.com/cgdelegate/cgdelegate/internal/policy"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/internal/topology"
)

// LifecycleAnnotationPrefix followed by a container name is the pod
// annotation that marks an init container for the CPU policy: "init" for a
// plain init container (its CPUs are reused by the app containers once the
// first one is created), "sidecar" for a restartable init container (keeps
// its CPUs), "regular" or absent for an app container. NRI does not say which
// containers are init containers, so without it every container is regular.
const LifecycleAnnotationPrefix = "lifecycle.cgdelegate.io/container."

// pinningEvents are the events the CPU policy needs besides CreateContainer
// (Synchronize is always delivered).
const pinningEvents = "RunPodSandbox,StopContainer,RemoveContainer,RemovePodSandbox"

// pinning is the CPU pinning state built from one config. A nil *pinning
// means cpuPinning is off.
type pinning struct {
	// reason says why pinning is inactive; "" when active.
	reason string
	policy *policy.Policy
}

func (pn *pinning) active() bool { return pn != nil && pn.policy != nil }

// newPinning builds the policy for cfg, or says why it can not pin. It
// never fails: a node where pinning is inactive still gets writable cgroups.
func newPinning(cfg config.Config, log *slog.Logger) *pinning {
	if !cfg.CPUPinning {
		return nil
	}
	if reason := kubeletConflict(cfg); reason != "" {
		log.Error("CPU pinning is INACTIVE", "reason", reason)
		return &pinning{reason: reason}
	}
	if cfg.AllowKubeletStaticCPUManager {
		log.Warn("allowKubeletStaticCPUManager is set: pinning even if the kubelet's static CPU manager is active", "state", cfg.KubeletCPUManagerState)
	}
	topo, err := topology.Discover(cfg.SysfsRoot)
	if err != nil {
		reason := fmt.Sprintf("cannot discover the CPU topology under %s: %v", cfg.SysfsRoot, err)
		log.Error("CPU pinning is INACTIVE", "reason", reason)
		return &pinning{reason: reason}
	}
	pol, err := policy.New(topo, policy.Options{Scope: cfg.TopologyScope, Reserved: cfg.Reserved()})
	if err != nil {
		reason := fmt.Sprintf("cannot build the CPU policy: %v", err)
		log.Error("CPU pinning is INACTIVE", "reason", reason)
		return &pinning{reason: reason}
	}
	snap := pol.Snapshot()
	log.Info("CPU pinning active", "scope", snap.Scope, "usableCPUs", snap.UsableCPUs, "reservedCPUs", snap.ReservedCPUs)
	return &pinning{policy: pol}
}

// kubeletConflict returns why the kubelet's CPU manager forbids pinning, or
// "" when it does not.
func kubeletConflict(cfg config.Config) string {
	path := cfg.KubeletCPUManagerState
	st, found, err := kubeletcpu.Read(path)
	switch {
	case cfg.AllowKubeletStaticCPUManager:
		return ""
	case err != nil:
		return fmt.Sprintf("cannot tell whether the kubelet's static CPU manager is active (%v); "+
			"set allowKubeletStaticCPUManager: true to pin anyway", err)
	case found && st.Static():
		return fmt.Sprintf("the kubelet's static CPU manager is active (policyName %q in %s): it and cgdelegate would fight over cpusets; "+
			"set the kubelet's cpuManagerPolicy to none, or allowKubeletStaticCPUManager: true to pin anyway", st.PolicyName, path)
	}
	return ""
}

// report is the Pinning part of the status report.
func (pn *pinning) report() *status.Pinning {
	if pn == nil {
		return nil
	}
	if !pn.active() {
		return &status.Pinning{Active: false, Reason: pn.reason}
	}
	return &status.Pinning{Active: true, Allocations: pn.policy.Snapshot()}
}

// eventLog is a logger for one event; the plugin's logger is never changed.
func (p *Plugin) eventLog(pod *api.PodSandbox, ctr *api.Container) *slog.Logger {
	l := p.log.With("pod", pod.GetNamespace()+"/"+pod.GetName())
	if ctr != nil {
		l = l.With("container", ctr.GetName())
	}
	return l
}

// RunPodSandbox gives a pod with a CPU budget its bubble. A bad budget or
// no room for the bubble fails the pod.
func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) (err error) {
	pn := p.pin.Load()
	if pod == nil || !pn.active() {
		return nil
	}
	l := p.eventLog(pod, nil)
	spec, err := podSpec(pod)
	if err == nil {
		var upd []policy.Assignment
		upd, err = pn.policy.AddPod(spec)
		if errors.Is(err, policy.ErrExists) {
			return nil
		}
		if err == nil {
			l.Debug("pod placed", "budget", spec.Budget.String(), "nodeUpdates", len(upd))
			p.send.enqueue(upd)
			return nil
		}
	}
	l.Error("pod refused", "error", err)
	return fmt.Errorf("%w %s/%s: %w", ErrRefused, pod.GetNamespace(), pod.GetName(), err)
}

// pinContainer places a container and adds its cpuset, memory nodes, quota
// and stamp to adj. It returns the updates for the other containers whose
// pool shrank. On error nothing changed.
func (p *Plugin) pinContainer(l *slog.Logger, pod *api.PodSandbox, ctr *api.Container, adj *api.ContainerAdjustment) ([]*api.ContainerUpdate, error) {
	pn := p.pin.Load()
	if !pn.active() {
		return nil, nil
	}
	spec, err := containerSpec(pod, ctr)
	if err != nil {
		return nil, err
	}
	a, upd, err := pn.policy.AddContainer(spec)
	var podUpd []policy.Assignment
	if errors.Is(err, policy.ErrUnknownPod) {
		// The pod started before this plugin (or before pinning was on)
		// and Synchronize did not list it: record it now.
		var ps policy.PodSpec
		if ps, err = podSpec(pod); err != nil {
			return nil, err
		}
		if podUpd, err = pn.policy.AddPod(ps); err != nil {
			return nil, err
		}
		if a, upd, err = pn.policy.AddContainer(spec); err != nil {
			pn.policy.RemovePod(ps.ID)
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	adj.SetLinuxCPUSetCPUs(a.CPUs.String())
	adj.SetLinuxCPUSetMems(a.Mems.String())
	if a.QuotaDisabled() {
		adj.SetLinuxCPUQuota(-1)
	}
	adj.AddAnnotation(policy.StampAnnotation, a.Stamp())
	l.Info("cpus assigned", "pool", a.Pool, "cpus", a.CPUs.String(), "mems", a.Mems.String(), "updates", len(podUpd)+len(upd))
	return containerUpdates(append(podUpd, upd...)), nil
}

// StopContainer returns a stopped container's CPUs to its pool and widens
// the containers there.
func (p *Plugin) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	pn := p.pin.Load()
	if ctr == nil || !pn.active() {
		return nil, nil
	}
	upd := pn.policy.RemoveContainer(ctr.GetId())
	if len(upd) > 0 {
		p.eventLog(pod, ctr).Info("cpus released", "updates", len(upd))
	}
	return containerUpdates(upd), nil
}

// RemoveContainer is StopContainer for a container removed without a stop;
// it cannot return updates, so they are sent with UpdateContainers.
func (p *Plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	pn := p.pin.Load()
	if ctr == nil || !pn.active() {
		return nil
	}
	p.send.enqueue(pn.policy.RemoveContainer(ctr.GetId()))
	return nil
}

// RemovePodSandbox returns a pod's bubble to the node shared pool; the
// widened containers are updated with UpdateContainers.
func (p *Plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if pod == nil {
		return nil
	}
	if rel, err := cgroupfs.PodPath(pod.GetLinux().GetCgroupParent()); err == nil {
		h := p.h.Load()
		h.bounds.forget(h.fs.Dir(rel))
	}
	pn := p.pin.Load()
	if !pn.active() {
		return nil
	}
	upd := pn.policy.RemovePod(pod.GetId())
	if len(upd) > 0 {
		p.eventLog(pod, nil).Info("pod cpus released", "updates", len(upd))
	}
	p.send.enqueue(upd)
	return nil
}

// Synchronize rebuilds the allocation state from the runtime's pods and
// containers (the truth after a plugin or runtime restart) and returns the
// updates that repair every container whose cpuset disagrees.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	pn := p.pin.Load()
	if !pn.active() {
		return nil, nil
	}
	specs, states := p.snapshot(pods, ctrs)
	res := pn.policy.Rebuild(specs, states)
	for _, c := range res.Conflicts {
		p.log.Warn("synchronize: conflict repaired", "conflict", c)
	}
	p.log.Info("synchronized", "pods", len(specs), "containers", len(states), "conflicts", len(res.Conflicts), "updates", len(res.Updates))
	return containerUpdates(res.Updates), nil
}

// snapshot translates a Synchronize snapshot for policy.Rebuild. Values
// that do not parse are logged and dropped rather than failing the whole
// synchronization.
func (p *Plugin) snapshot(pods []*api.PodSandbox, ctrs []*api.Container) ([]policy.PodSpec, []policy.ContainerState) {
	byID := make(map[string]*api.PodSandbox, len(pods))
	specs := make([]policy.PodSpec, 0, len(pods))
	for _, pod := range pods {
		if pod == nil {
			continue
		}
		byID[pod.GetId()] = pod
		spec, err := podSpec(pod)
		if err != nil {
			p.eventLog(pod, nil).Error("synchronize: pod budget ignored", "error", err)
			spec = policy.PodSpec{ID: pod.GetId(), Name: pod.GetNamespace() + "/" + pod.GetName()}
		}
		specs = append(specs, spec)
	}
	states := make([]policy.ContainerState, 0, len(ctrs))
	for _, ctr := range ctrs {
		switch ctr.GetState() {
		case api.ContainerState_CONTAINER_CREATED, api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
		default:
			continue // a stopped container holds no CPUs
		}
		pod := byID[ctr.GetPodSandboxId()]
		l := p.eventLog(pod, ctr)
		st := policy.ContainerState{Stamp: ctr.GetAnnotations()[policy.StampAnnotation]}
		spec, err := containerSpec(pod, ctr)
		if err != nil {
			l.Error("synchronize: container resources ignored", "error", err)
			spec = policy.ContainerSpec{ID: ctr.GetId(), PodID: ctr.GetPodSandboxId(), Name: ctr.GetName()}
		}
		cpu := ctr.GetLinux().GetResources().GetCpu()
		st.Spec, st.CPUQuota = spec, cpu.GetQuota().GetValue()
		st.CPUs = parseSet(l, "cpus", cpu.GetCpus())
		st.Mems = parseSet(l, "mems", cpu.GetMems())
		states = append(states, st)
	}
	return specs, states
}

func parseSet(l *slog.Logger, what, s string) cpuset.CPUSet {
	set, err := cpuset.Parse(s)
	if err != nil {
		l.Warn("synchronize: unparsable cpuset treated as unset", "field", what, "value", s, "error", err)
		return cpuset.New()
	}
	return set
}

func podSpec(pod *api.PodSandbox) (policy.PodSpec, error) {
	b, err := podres.PodBudget(pod)
	if err != nil {
		return policy.PodSpec{}, fmt.Errorf("pod budget: %w", err)
	}
	return policy.PodSpec{ID: pod.GetId(), Name: pod.GetNamespace() + "/" + pod.GetName(), Budget: b}, nil
}

// ErrLifecycle marks a bad lifecycle annotation.
var ErrLifecycle = errors.New("invalid lifecycle annotation")

func containerSpec(pod *api.PodSandbox, ctr *api.Container) (policy.ContainerSpec, error) {
	res, err := podres.ContainerResources(pod, ctr)
	if err != nil {
		return policy.ContainerSpec{}, fmt.Errorf("container resources: %w", err)
	}
	lc, err := lifecycle(pod, ctr.GetName())
	if err != nil {
		return policy.ContainerSpec{}, err
	}
	return policy.ContainerSpec{
		ID:        ctr.GetId(),
		PodID:     ctr.GetPodSandboxId(),
		Name:      ctr.GetName(),
		Resources: res,
		Lifecycle: lc,
	}, nil
}

// lifecycle reads the LifecycleAnnotationPrefix annotation of a container.
func lifecycle(pod *api.PodSandbox, name string) (policy.Lifecycle, error) {
	key := LifecycleAnnotationPrefix + name
	v, ok := pod.GetAnnotations()[key]
	if !ok {
		return policy.LifecycleRegular, nil
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "regular":
		return policy.LifecycleRegular, nil
	case "init":
		return policy.LifecycleInit, nil
	case "sidecar":
		return policy.LifecycleSidecar, nil
	}
	return "", fmt.Errorf("%w: %s=%q (want init, sidecar or regular)", ErrLifecycle, key, v)
}

// containerUpdates turns assignments into NRI updates. A later assignment
// for the same container wins.
func containerUpdates(as []policy.Assignment) []*api.ContainerUpdate {
	if len(as) == 0 {
		return nil
	}
	out := make([]*api.ContainerUpdate, 0, len(as))
	idx := make(map[string]int, len(as))
	var str setStrings
	for _, a := range as {
		cpu := &api.LinuxCPU{Cpus: str.of(a.CPUs), Mems: str.of(a.Mems)}
		if a.QuotaDisabled() {
			cpu.Quota = api.Int64(-1)
		}
		u := &api.ContainerUpdate{
			ContainerId: a.ContainerID,
			Linux:       &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: cpu}},
		}
		if i, ok := idx[a.ContainerID]; ok {
			out[i] = u
			continue
		}
		idx[a.ContainerID] = len(out)
		out = append(out, u)
	}
	return out
}

// setStrings memoizes cpuset.String: the containers of one pool share their
// sets, and formatting dominates a 50-container update otherwise.
type setStrings []struct {
	set cpuset.CPUSet
	s   string
}

func (c *setStrings) of(set cpuset.CPUSet) string {
	for _, e := range *c {
		// Size and subset, not Equals: Equals is reflect.DeepEqual.
		if e.set.Size() == set.Size() && e.set.IsSubsetOf(set) {
			return e.s
		}
	}
	s := set.String()
	if len(*c) < 8 {
		*c = append(*c, struct {
			set cpuset.CPUSet
			s   string
		}{set, s})
	}
	return s
}
