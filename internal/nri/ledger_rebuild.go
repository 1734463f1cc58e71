package nri

import (
	"log/slog"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/spec"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// The ledger after a plugin restart: rebuilt at Synchronize from the
// runtime's containers and the pod cgroups' files.

// rebuild replaces the ledger with the writable containers among ctrs (a
// read-write cgroup file system at /sys/fs/cgroup, not privileged) that
// are created or running, and their pods, and reads the dying cgroups of
// the pods and of the node again (a restarted plugin counts them at once).
// A pod's cap is its decided one (fallback, the node's maxDescendants,
// lowered by its annotation), no higher than the cap its containers'
// environment says they were given (a kubelet's lower value, an older
// config's): dying cgroups freed while the plugin was away never shrink
// it. Containers made before the environment said fall back to the
// cgroup.max.descendants the pod cgroup carries plus its dying cgroups
// now. A pod whose bound is "max" (a container created without
// cgdelegate) or can not be read reserves its decided cap, and its bound
// is never written.
func (l *ledger) rebuild(log *slog.Logger, fs *host.FS, fallback int, pods []*api.PodSandbox, ctrs []*api.Container) {
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, p := range pods {
		byID[p.GetId()] = p
	}
	now := time.Now()
	next := map[string]*ledgerPod{}
	for _, c := range ctrs {
		if s := c.GetState(); s != api.ContainerState_CONTAINER_CREATED && s != api.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if m := spec.Inspect(c.GetMounts()); !m.RuntimeWritable() || m.PrivilegedLike {
			continue
		}
		pod := byID[c.GetPodSandboxId()]
		if pod == nil {
			continue
		}
		p := next[pod.GetId()]
		if p == nil {
			rel, err := host.PodPath(pod.GetLinux().GetCgroupParent())
			if err != nil {
				logging.Event(log, pod, c).Error("writable container in a pod whose cgroup is unknown; it is not in the node budget", "error", err)
				continue
			}
			p = rebuiltPod(logging.Event(log, pod, c), fs, pod, rel, fallback, envCaps(ctrs, pod.GetId()))
			next[pod.GetId()] = p
		}
		p.ctrs[c.GetId()] = newLedgerCtr(c, now)
	}
	nodeDying := 0
	if st, err := fs.Stat("/"); err != nil {
		log.Warn("cannot read the node's dying cgroups; the node budget counts none until the next look", "error", err)
	} else {
		nodeDying = st.DyingDescendants
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods, l.nodeDying, l.unsafe = next, nodeDying, false
	l.account()
}

// rebuiltPod is the ledger's entry for a writable pod found at
// Synchronize (rebuild). given is the cap its containers were given at
// their creation (envCaps), or host.Unlimited when none says.
func rebuiltPod(log *slog.Logger, fs *host.FS, pod *api.PodSandbox, rel string, fallback, given int) *ledgerPod {
	decided, err := writable.PodBound(pod, annotations.MaxDescendants, fallback)
	if err != nil {
		decided = fallback
	}
	p := &ledgerPod{
		namespace: pod.GetNamespace(), name: pod.GetName(), uid: pod.GetUid(), cgroup: rel,
		reserved: decided, bound: host.Unlimited, settled: true, ctrs: map[string]*ledgerCtr{},
	}
	if st, err := fs.Stat(rel); err != nil {
		log.Warn("cannot read the pod's dying cgroups", "error", err)
	} else {
		p.live, p.dying = st.Descendants, st.DyingDescendants
	}
	switch b, err := fs.ReadBounds(rel); {
	case err != nil:
		log.Warn("cannot read the pod bounds; the pod reserves its cap", "reserved", p.reserved, "error", err)
	case b.Descendants == host.Unlimited:
	case given != host.Unlimited:
		// Exact, whatever the pod's dying cgroups did while the plugin
		// was away (freed ones would make the bound plus the dying count
		// short of the cap).
		p.bound, p.reserved = b.Descendants, min(decided, given)
	default:
		// Containers made before their environment said: the bound in
		// force is the cap less the dying cgroups at the last look, so
		// this is the cap unless some were freed since.
		p.bound, p.reserved = b.Descendants, min(decided, b.Descendants+p.dying)
	}
	return p
}

// envCaps is the lowest cap the environment of the pod's containers in
// ctrs gives (writable.EnvBound: what each was given at its creation; a
// reload may have lowered it for the later ones), or host.Unlimited.
func envCaps(ctrs []*api.Container, podID string) int {
	lowest := host.Unlimited
	for _, c := range ctrs {
		if c.GetPodSandboxId() != podID {
			continue
		}
		if n, ok := writable.EnvBound(c); ok && n != host.Unlimited && (lowest == host.Unlimited || n < lowest) {
			lowest = n
		}
	}
	return lowest
}
