package nri

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/spec"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// ErrNodeBudget is wrapped by the refusal of a writable pod whose bound
// would take the node's delegated cgroups over nodeMaxDelegatedCgroups.
var ErrNodeBudget = errors.New("node budget of delegated cgroups exhausted")

// unstartedGrace is how long a writable container whose cgroup was never
// seen stays in the ledger: created, its start failed or never came.
const unstartedGrace = 5 * time.Minute

// ledger is the node's live writable pods and containers: what each pod
// reserves of the node budget (its cgroup.max.descendants), and which
// containers run with writable cgroups, so that a host that turns unsafe
// can name them. A pod enters with its first writable container
// (CreateContainer), leaves at RemovePodSandbox, and the whole ledger is
// rebuilt at Synchronize. A container leaves when its cgroup, once seen, is
// gone (it stopped), at the look of the node advertisement's refresh: no
// event per container removal is subscribed for it.
type ledger struct {
	mu       sync.Mutex
	pods     map[string]*ledgerPod // by pod sandbox ID
	reserved int
	// dying is the writable pods' nr_dying_descendants at the last look.
	dying int
	// unsafe is the host verdict at the last look.
	unsafe bool

	// lookMu serializes looks (the advertisement's refresh, a scrape).
	lookMu sync.Mutex
}

type ledgerPod struct {
	namespace, name string
	cgroup          string
	reserved        int
	live, dying     int
	ctrs            map[string]*ledgerCtr // by container ID
}

func (p *ledgerPod) GetNamespace() string { return p.namespace }
func (p *ledgerPod) GetName() string      { return p.name }

type ledgerCtr struct {
	name   string
	cgroup string // relative to the cgroup root; "" when unknown
	userns bool
	added  time.Time
	// seen: its cgroup existed at a look; reported: logged as running on
	// an unsafe host.
	seen, reported bool
}

func (c *ledgerCtr) GetName() string { return c.name }

func newLedger() *ledger { return &ledger{pods: map[string]*ledgerPod{}} }

func newLedgerCtr(ctr *api.Container, now time.Time) *ledgerCtr {
	c := &ledgerCtr{name: ctr.GetName(), added: now}
	if rel, err := host.ContainerPath(ctr.GetLinux().GetCgroupsPath()); err == nil {
		c.cgroup = rel
	}
	for _, ns := range ctr.GetLinux().GetNamespaces() {
		if ns.GetType() == "user" {
			c.userns = true
		}
	}
	return c
}

// admit enters a writable container of pod, whose pod cgroup (rel) is to
// carry want as cgroup.max.descendants. A pod already in the ledger is
// always admitted; a new pod is refused when its want, with what the pods
// reserve and the dying cgroups in them, exceeds budget (0: no budget).
// The check and the reservation are one step under the lock, so two pods
// created at once can not both take the last room. undo takes back what
// admit entered, for a container refused later.
func (l *ledger) admit(pod *api.PodSandbox, ctr *api.Container, rel string, want, budget int) (undo func(), err error) {
	now := time.Now()
	id, cid := pod.GetId(), ctr.GetId()
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pods[id]; p != nil {
		if _, ok := p.ctrs[cid]; ok {
			return func() {}, nil
		}
		p.ctrs[cid] = newLedgerCtr(ctr, now)
		return func() { l.dropCtr(id, cid) }, nil
	}
	if budget > 0 && l.reserved+l.dying+want > budget {
		return nil, refusal.New(refusal.NodeBudget, fmt.Errorf(
			"%w: writable cgroups for pod %s/%s need %d (its cgroup.max.descendants) of nodeMaxDelegatedCgroups=%d, "+
				"but %d are reserved by %d writable pods and %d dying cgroups remain in them (%d left); "+
				"lower the pod's annotation %s, or run it on another node",
			ErrNodeBudget, pod.GetNamespace(), pod.GetName(), want, budget,
			l.reserved, len(l.pods), l.dying, max(budget-l.reserved-l.dying, 0), annotations.MaxDescendants.Name))
	}
	l.pods[id] = &ledgerPod{
		namespace: pod.GetNamespace(), name: pod.GetName(), cgroup: rel, reserved: want,
		ctrs: map[string]*ledgerCtr{cid: newLedgerCtr(ctr, now)},
	}
	l.reserved += want
	return func() { l.dropPod(id) }, nil
}

// settle lowers a pod's reservation to the bound in force (a kubelet's
// lower cgroup.max.descendants is kept).
func (l *ledger) settle(podID string, got int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pods[podID]; p != nil && got >= 0 && got < p.reserved {
		l.reserved -= p.reserved - got
		p.reserved = got
	}
}

func (l *ledger) dropCtr(podID, ctrID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pods[podID]; p != nil {
		delete(p.ctrs, ctrID)
	}
}

func (l *ledger) dropPod(podID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pods[podID]; p != nil {
		l.reserved -= p.reserved
		l.dying -= min(p.dying, l.dying)
		delete(l.pods, podID)
	}
}

// rebuild replaces the ledger with the writable containers among ctrs (a
// read-write cgroup file system at /sys/fs/cgroup, not privileged) that
// are created or running, and their pods. A pod reserves the
// cgroup.max.descendants its cgroup carries (read through fs); when that
// can not be read, or is "max" (a container created without cgdelegate),
// it reserves fallback, the node cap.
func (l *ledger) rebuild(log *slog.Logger, fs *host.FS, fallback int, pods []*api.PodSandbox, ctrs []*api.Container) {
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, p := range pods {
		byID[p.GetId()] = p
	}
	now := time.Now()
	next := map[string]*ledgerPod{}
	reserved := 0
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
			want := fallback
			if b, err := fs.ReadBounds(rel); err != nil {
				logging.Event(log, pod, c).Warn("cannot read the pod bounds; the pod reserves the node cap", "reserved", want, "error", err)
			} else if b.Descendants != host.Unlimited {
				want = b.Descendants
			}
			p = &ledgerPod{namespace: pod.GetNamespace(), name: pod.GetName(), cgroup: rel, reserved: want, ctrs: map[string]*ledgerCtr{}}
			next[pod.GetId()] = p
			reserved += want
		}
		p.ctrs[c.GetId()] = newLedgerCtr(c, now)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods, l.reserved, l.dying, l.unsafe = next, reserved, 0, false
}

// look reads the writable pods' cgroup.stat and the cgroup root's, drops
// the containers that stopped, and returns the ledger as the status shows
// it. hostErr is the host verdict's problem (nil when safe): every
// writable container still running is then in Unsafe, and logged as an
// error once (again after the host was safe in between).
func (l *ledger) look(log *slog.Logger, fs *host.FS, budget int, hostErr error) *status.Delegation {
	l.lookMu.Lock()
	defer l.lookMu.Unlock()
	type target struct {
		id, cgroup string
		ctrs       map[string]string // container ID -> cgroup
	}
	l.mu.Lock()
	targets := make([]target, 0, len(l.pods))
	for id, p := range l.pods {
		t := target{id: id, cgroup: p.cgroup, ctrs: make(map[string]string, len(p.ctrs))}
		for cid, c := range p.ctrs {
			t.ctrs[cid] = c.cgroup
		}
		targets = append(targets, t)
	}
	l.mu.Unlock()

	// The reads, outside the lock: CreateContainer never waits for them.
	d := &status.Delegation{Budget: budget}
	stats := make(map[string]host.CgroupStat, len(targets))
	exists := map[string]bool{}
	for _, t := range targets {
		st, err := fs.Stat(t.cgroup)
		if err != nil {
			d.Errors = append(d.Errors, err.Error())
		}
		stats[t.id] = st
		for cid, cg := range t.ctrs {
			exists[cid] = cg != "" && fs.Exists(cg) == nil
		}
	}
	if st, err := fs.Stat("/"); err != nil {
		d.Errors = append(d.Errors, err.Error())
	} else {
		d.Node = &st
	}

	now := time.Now()
	unsafe := hostErr != nil
	l.mu.Lock()
	defer l.mu.Unlock()
	dying := 0
	for id, p := range l.pods {
		if st, ok := stats[id]; ok {
			p.live, p.dying = st.Descendants, st.DyingDescendants
		}
		dying += p.dying
		dp := status.DelegatedPod{Pod: p.namespace + "/" + p.name, Cgroup: p.cgroup, Reserved: p.reserved, Live: p.live, Dying: p.dying}
		for cid, c := range p.ctrs {
			if ex, looked := exists[cid]; looked {
				switch {
				case ex:
					c.seen = true
				case c.seen || now.Sub(c.added) > unstartedGrace:
					delete(p.ctrs, cid) // stopped, or never started
					continue
				}
			}
			wc := status.WritableContainer{Pod: dp.Pod, Container: c.name, ID: cid, UserNamespace: c.userns}
			dp.Containers = append(dp.Containers, wc)
			if !unsafe || !c.seen {
				c.reported = false
				continue
			}
			d.Unsafe = append(d.Unsafe, wc)
			if !c.reported {
				c.reported = true
				logging.Event(log, p, c).Error("writable container runs on a host no longer safe for writable cgroups: "+
					"without nsdelegate a container without a user namespace can raise its own limits; delete the pod, "+
					"or remount cgroup2 with nsdelegate",
					"containerID", cid, "userNamespace", c.userns, "problem", hostErr)
			}
		}
		slices.SortFunc(dp.Containers, func(a, b status.WritableContainer) int { return strings.Compare(a.Container+a.ID, b.Container+b.ID) })
		d.Pods = append(d.Pods, dp)
	}
	if l.unsafe && !unsafe {
		log.Info("the host is safe for writable cgroups again; the writable containers are no longer listed as unsafe")
	}
	l.dying, l.unsafe = dying, unsafe
	d.Reserved, d.DyingInPods = l.reserved, dying
	slices.SortFunc(d.Pods, func(a, b status.DelegatedPod) int { return strings.Compare(a.Pod+a.Cgroup, b.Pod+b.Cgroup) })
	slices.SortFunc(d.Unsafe, func(a, b status.WritableContainer) int {
		return strings.Compare(a.Pod+"/"+a.Container+a.ID, b.Pod+"/"+b.Container+b.ID)
	})
	return d
}
