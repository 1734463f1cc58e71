package cpumanager

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// Sentinel errors. Callers check them with errors.Is.
var (
	// ErrLifecycle marks a bad lifecycle annotation (a refusal of cause
	// refusal.BadAnnotation).
	ErrLifecycle = refusal.New(refusal.BadAnnotation, errors.New("invalid lifecycle annotation"))
	// ErrPodRefused is wrapped by every error that refuses a pod at
	// RunPodSandbox. containerd (2.3, 2.4: internal/cri/server/sandbox_run.go)
	// fails the sandbox with "NRI RunPodSandbox failed: <this error>", and
	// the kubelet reports it as the pod's FailedCreatePodSandBox event.
	ErrPodRefused = errors.New("cgdelegate refused the pod")
)

// Manager is the CPU pinning state built from one config.
type Manager struct {
	// reason says why pinning is inactive; "" when active.
	reason string
	policy *policy.Policy
	// kubelet watches the kubelet's CPU manager state while pinning is
	// active (nil when allowKubeletStaticCPUManager is set).
	kubelet *kubeletWatch
	// suspended says why pinning stopped after it started; nil while it
	// runs. A suspended Manager never resumes: its state is stale.
	suspended atomic.Pointer[string]
}

// kubeletWatch is the kubelet state file and its watcher.
type kubeletWatch struct {
	mu   sync.Mutex
	path string
	w    *stateWatcher
}

// New builds the policy for cfg, or a Manager that says why it can not pin;
// nil when cpuPinning is off. It never fails: a node where pinning is
// inactive still gets writable cgroups.
func New(cfg config.Config, log *slog.Logger) *Manager {
	if !cfg.CPUPinning {
		return nil
	}
	inactive := func(reason string) *Manager {
		log.Error("CPU pinning is INACTIVE", "reason", reason)
		return &Manager{reason: reason}
	}
	// Look at the file before reading it, so a write after the read shows.
	var kw *kubeletWatch
	if !cfg.AllowKubeletStaticCPUManager {
		kw = &kubeletWatch{path: cfg.KubeletCPUManagerState, w: newStateWatcher(cfg.KubeletCPUManagerState)}
	}
	if reason := kubeletConflict(cfg.KubeletCPUManagerState, cfg.AllowKubeletStaticCPUManager); reason != "" {
		return inactive(reason)
	}
	if cfg.AllowKubeletStaticCPUManager {
		log.Warn("allowKubeletStaticCPUManager is set: pinning even if the kubelet's static CPU manager is active", "state", cfg.KubeletCPUManagerState)
	}
	topo, err := topology.Discover(cfg.SysfsRoot)
	if err != nil {
		return inactive(fmt.Sprintf("cannot discover the CPU topology under %s: %v", cfg.SysfsRoot, err))
	}
	pol, err := policy.New(topo, policy.Options{
		Scope: cfg.TopologyScope, Reserved: cfg.Reserved(), StrictReservation: cfg.StrictCPUReservation,
		ReservedMemory: cfg.ReservedMemoryBytes(),
	})
	if err != nil {
		return inactive(fmt.Sprintf("cannot build the CPU policy: %v", err))
	}
	snap := pol.Snapshot()
	log.Info("CPU pinning active", "scope", snap.Scope, "usableCPUs", snap.UsableCPUs, "reservedCPUs", snap.ReservedCPUs,
		"reservedMemory", snap.ReservedMemory)
	return &Manager{policy: pol, kubelet: kw}
}

// ConfigChanged reports whether the pinning state must be rebuilt when the
// config changes from a to b: whether a key of config.Pinning changed.
func ConfigChanged(a, b config.Config) bool { return a.Pinning != b.Pinning }

// Active reports whether CPUs are pinned.
func (m *Manager) Active() bool { return m != nil && m.policy != nil && m.suspended.Load() == nil }

// Suspended reports whether pinning stopped after it started (see
// RecheckKubelet). Such a Manager must be rebuilt, from a new Synchronize.
func (m *Manager) Suspended() bool { return m != nil && m.suspended.Load() != nil }

// Status is the pinning part of the readiness report; nil when off. A
// suspended Manager shows its last allocation table, which no longer
// changes.
func (m *Manager) Status() *status.Pinning {
	switch {
	case m == nil:
		return nil
	case m.Suspended():
		table := m.policy.Snapshot()
		return &status.Pinning{Active: false, Reason: *m.suspended.Load(), Allocations: &table}
	case !m.Active():
		return &status.Pinning{Active: false, Reason: m.reason}
	}
	table := m.policy.Snapshot()
	return &status.Pinning{Active: true, Allocations: &table}
}

// RecheckKubelet reads the kubelet's CPU manager state again when its file
// changed since the last look (one stat otherwise), and reports whether the
// pinning status changed.
//
// When the kubelet's static policy becomes active while pinning runs,
// pinning stops: events no longer place or move any container, and the
// cpusets and memory nodes already set stay as they are (the kubelet's
// static policy rewrites them as it sees fit). When the file later stops
// naming the static policy, pinning does not resume by itself: the state
// missed every event in between, so only a rebuild from a new Synchronize
// (cgdelegate restarting, or the runtime reconnecting it) can trust it
// again; the status reason says so. An unreadable file changes nothing and
// is read again next time.
func (m *Manager) RecheckKubelet(log *slog.Logger) bool {
	if m == nil || m.policy == nil || m.kubelet == nil {
		return false
	}
	kw := m.kubelet
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if !kw.w.Changed() {
		return false
	}
	st, found, err := readKubeletState(kw.path)
	if err != nil {
		kw.w.Forget()
		log.Warn("cannot re-read the kubelet's CPU manager state; pinning goes on as it was", "error", err)
		return false
	}
	static := found && st.Static()
	var reason string
	switch {
	case static:
		reason = fmt.Sprintf("the kubelet's static CPU manager became active (policyName %q in %s) while cgdelegate pinned CPUs: "+
			"pinning stopped, the cpusets already set are left as they are and no longer updated; "+
			"set the kubelet's cpuManagerPolicy to none and restart cgdelegate to resume", st.PolicyName, kw.path)
	case m.Suspended():
		reason = fmt.Sprintf("the kubelet's static CPU manager was active while cgdelegate pinned CPUs, and %s no longer names it: "+
			"pinning stays stopped until cgdelegate restarts and rebuilds its state from the runtime", kw.path)
	default:
		return false
	}
	if old := m.suspended.Load(); old != nil && *old == reason {
		return false
	}
	m.suspended.Store(&reason)
	log.Error("CPU pinning is INACTIVE", "reason", reason)
	return true
}

// Assignment is the current assignment of a container.
func (m *Manager) Assignment(id string) (policy.Assignment, bool) {
	if !m.Active() {
		return policy.Assignment{}, false
	}
	return m.policy.Assignment(id)
}

// AddPod gives a pod with a CPU budget its bubble. A pod already known is
// not an error. It returns the node-shared containers to update. A pod that
// can not be admitted (a bad budget, no room for its bubble) is an
// ErrPodRefused error naming the pod and the numbers.
func (m *Manager) AddPod(pod *api.PodSandbox) ([]policy.Assignment, error) {
	spec, err := podSpec(pod)
	if err == nil {
		var upd []policy.Assignment
		upd, err = m.policy.AddPod(spec)
		if err == nil || errors.Is(err, policy.ErrExists) {
			return upd, nil
		}
	}
	return nil, fmt.Errorf("%w %s/%s: %w", ErrPodRefused, pod.GetNamespace(), pod.GetName(), err)
}

// AddContainer places a container and returns its assignment and the other
// containers whose pool shrank. A pod the policy does not know (it started
// before this plugin, and Synchronize did not list it) is recorded first.
// On error nothing changed.
func (m *Manager) AddContainer(pod *api.PodSandbox, ctr *api.Container) (policy.Assignment, []policy.Assignment, error) {
	spec, err := containerSpec(pod, ctr)
	if err != nil {
		return policy.Assignment{}, nil, err
	}
	a, upd, err := m.policy.AddContainer(spec)
	if !errors.Is(err, policy.ErrUnknownPod) {
		return a, upd, err
	}
	ps, err := podSpec(pod)
	if err != nil {
		return policy.Assignment{}, nil, err
	}
	podUpd, err := m.policy.AddPod(ps)
	if err != nil {
		return policy.Assignment{}, nil, err
	}
	if a, upd, err = m.policy.AddContainer(spec); err != nil {
		m.policy.RemovePod(ps.ID)
		return policy.Assignment{}, nil, err
	}
	return a, append(podUpd, upd...), nil
}

// RemoveContainer returns a container's CPUs to its pool; the containers
// there widen.
func (m *Manager) RemoveContainer(id string) []policy.Assignment {
	return m.policy.RemoveContainer(id)
}

// RemovePod returns a pod's bubble to the node shared pool.
func (m *Manager) RemovePod(id string) []policy.Assignment {
	return m.policy.RemovePod(id)
}

func podSpec(pod *api.PodSandbox) (policy.PodSpec, error) {
	b, err := budget.ForPod(pod)
	if err != nil {
		return policy.PodSpec{}, fmt.Errorf("pod budget: %w", err)
	}
	return policy.PodSpec{
		ID: pod.GetId(), Name: pod.GetNamespace() + "/" + pod.GetName(), Budget: b,
		QoS: budget.PodQoSFromCgroupParent(pod.GetLinux().GetCgroupParent()),
	}, nil
}

func containerSpec(pod *api.PodSandbox, ctr *api.Container) (policy.ContainerSpec, error) {
	res, err := budget.ForContainer(pod, ctr)
	if err != nil {
		return policy.ContainerSpec{}, fmt.Errorf("container resources: %w", err)
	}
	lc, err := lifecycle(pod, ctr)
	if err != nil {
		return policy.ContainerSpec{}, err
	}
	return policy.ContainerSpec{
		ID:        ctr.GetId(),
		PodID:     ctr.GetPodSandboxId(),
		Name:      ctr.GetName(),
		Resources: res,
		Lifecycle: lc,
		PodQoS:    budget.PodQoSFromOOMScoreAdj(oomScoreAdj(ctr)),
		Cgroup:    containerCgroup(ctr),
	}, nil
}

// containerCgroup is the container's cgroup relative to the cgroup root,
// or "" when the runtime's cgroups path does not resolve: its cpuset then
// changes only by the runtime's update (Enforce skips it).
func containerCgroup(ctr *api.Container) string {
	rel, err := host.ContainerPath(ctr.GetLinux().GetCgroupsPath())
	if err != nil {
		return ""
	}
	return rel
}

func oomScoreAdj(ctr *api.Container) *int64 {
	if v := ctr.GetLinux().GetOomScoreAdj(); v != nil {
		adj := v.GetValue()
		return &adj
	}
	return nil
}

// lifecycle reads the container's lifecycle annotation: "init" for a plain
// init container (its CPUs are reused by the app containers once the first
// one is created), "sidecar" for a restartable init container (keeps its
// CPUs), "regular" or absent for an app container.
func lifecycle(pod *api.PodSandbox, ctr *api.Container) (policy.Lifecycle, error) {
	f, ok := annotations.ForContainer(pod, ctr, annotations.Lifecycle)
	if !ok {
		return policy.LifecycleRegular, nil
	}
	switch strings.ToLower(strings.TrimSpace(f.Value)) {
	case "", "regular":
		return policy.LifecycleRegular, nil
	case "init":
		return policy.LifecycleInit, nil
	case "sidecar":
		return policy.LifecycleSidecar, nil
	}
	return "", fmt.Errorf("%w: %s=%q (want init, sidecar or regular)", ErrLifecycle, f.Key, f.Value)
}
