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

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// ErrNodeBudget is wrapped by the refusal of a writable pod whose bound
// would take the node's delegated cgroups over nodeMaxDelegatedCgroups.
var ErrNodeBudget = errors.New("node budget of delegated cgroups exhausted")

// unstartedGrace is how long a writable container whose cgroup was never
// seen stays in the ledger: created, its start failed or never came.
const unstartedGrace = 5 * time.Minute

// ledger is the node's live writable pods and containers: what each pod
// reserves of the node budget (its cap, the cgroup.max.descendants
// cgdelegate put on its pod cgroup), and which containers run with
// writable cgroups, so that a host that turns unsafe can name them. A pod
// enters with its first writable container (CreateContainer), leaves at
// RemovePodSandbox, and the whole ledger is rebuilt at Synchronize. A
// container leaves when its cgroup, once seen, is gone (it stopped), at the
// look of the node advertisement's refresh: no event per container removal
// is subscribed for it.
//
// A pod's reservation holds its live and its dying cgroups together: at
// every look and every tighten, each pod's cgroup.max.descendants is set
// to its cap less its dying cgroups (host.ChurnBound), so the kernel
// refuses the pod's own mkdir once they reach its cap, and a pod that
// churns cgroups uses up its own room, never the node's. What the budget
// counts (inUse) is the reservations, what pods hold past theirs (dying
// cgroups made between two looks), and the node's dying cgroups outside
// the writable pods (removed pods', other pods', the system's), read from
// the cgroup root's nr_dying_descendants.
type ledger struct {
	mu       sync.Mutex
	pods     map[string]*ledgerPod // by pod sandbox ID
	reserved int
	// dying is the writable pods' nr_dying_descendants at the last look.
	dying int
	// over is what the writable pods hold past their reservations (live
	// plus dying) at the last look.
	over int
	// nodeDying is the cgroup root's nr_dying_descendants at the last
	// look: every dying cgroup of the node, a removed pod's included.
	nodeDying int
	// grew: a writable pod's dying cgroups grew at the last look or
	// tighten (the pod is churning): the next tighten comes sooner.
	grew bool
	// unsafe is the host verdict at the last look.
	unsafe bool

	// lookMu serializes looks (the advertisement's refresh, a scrape, the
	// tighten tick): one at a time reads and writes the pods' bounds.
	lookMu sync.Mutex
}

type ledgerPod struct {
	namespace, name string
	uid             string
	cgroup          string
	// reserved is the pod's cap: what it holds of the budget, its live
	// and dying cgroups together.
	reserved int
	// bound is the cgroup.max.descendants in force as last put in place
	// or written; host.Unlimited when cgdelegate did not bound the pod (a
	// container created without it, found at Synchronize), whose bound the
	// ledger never writes.
	bound int
	// settled: the pod's bounds are in place (its first container's, or
	// found at Synchronize); the ledger writes no bound before.
	settled     bool
	live, dying int
	ctrs        map[string]*ledgerCtr // by container ID
}

// past is what the pod holds past its reservation.
func (p *ledgerPod) past() int { return max(p.live+p.dying-p.reserved, 0) }

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

// inUse is what the node budget counts, under l.mu: what the writable pods
// reserve, what they hold past their reservations, and the node's dying
// cgroups outside them, as last looked at.
func (l *ledger) inUse() int { return l.reserved + l.over + l.dyingOutside() }

// dyingOutside is the node's dying cgroups outside the writable pods.
func (l *ledger) dyingOutside() int { return max(l.nodeDying-l.dying, 0) }

// admit enters a writable container of pod, whose pod cgroup (rel) is to
// carry want as cgroup.max.descendants. A pod already in the ledger is
// always admitted; a new pod is refused when its want, with what is in use
// (inUse), exceeds budget (0: no budget). The check and the reservation
// are one step under the lock, so two pods created at once can not both
// take the last room. undo takes back what admit entered, for a container
// refused later.
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
	if inUse := l.inUse(); budget > 0 && inUse+want > budget {
		return nil, refusal.New(refusal.NodeBudget, fmt.Errorf(
			"%w: writable cgroups for pod %s/%s need %d (its cgroup.max.descendants) of nodeMaxDelegatedCgroups=%d, "+
				"but %d are reserved by %d writable pods (their live and dying cgroups), %d are held past those reservations "+
				"and %d dying cgroups remain outside them, in removed pods and elsewhere on the node (%d left); "+
				"lower the pod's annotation %s, or run it on another node",
			ErrNodeBudget, pod.GetNamespace(), pod.GetName(), want, budget,
			l.reserved, len(l.pods), l.over, l.dyingOutside(), max(budget-inUse, 0),
			annotations.MaxDescendants.Name))
	}
	l.pods[id] = &ledgerPod{
		namespace: pod.GetNamespace(), name: pod.GetName(), uid: pod.GetUid(), cgroup: rel, reserved: want, bound: host.Unlimited,
		ctrs: map[string]*ledgerCtr{cid: newLedgerCtr(ctr, now)},
	}
	l.reserved += want
	return func() { l.dropPod(id) }, nil
}

// settle records got, the pod's cgroup.max.descendants after a writable
// container's bounds were put in place, and returns the pod's cap, what the
// container is told its bound is; want is the cap the container was
// decided at (the node's maxDescendants lowered by the pod's annotation),
// which is the limit its hook checks. At the pod's first container the
// reservation goes down to got (a kubelet's lower value is kept). Later got
// may be the ledger's own bound (host.ChurnBound), lower by the pod's dying
// cgroups, which the reservation never follows; it follows want down (a
// reload that lowered maxDescendants). So the reservation is never above
// any of the pod's containers' hook limits, and the bound in force, between
// 0 and the reservation, passes every container's hook.
func (l *ledger) settle(podID string, want, got int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pods[podID]
	if p == nil {
		return got
	}
	limit := want
	if !p.settled {
		limit = got
	}
	if limit >= 0 && limit < p.reserved {
		l.reserved -= p.reserved - limit
		p.reserved = limit
	}
	p.settled, p.bound = true, got
	return p.reserved
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
		// Its dying cgroups stay in the kernel: they are outside the
		// writable pods now, still in nodeDying until the next look.
		l.reserved -= p.reserved
		l.dying -= min(p.dying, l.dying)
		l.over -= min(p.past(), l.over)
		delete(l.pods, podID)
	}
}

// account sums the pods' reservations, dying cgroups and what they hold
// past their reservations; the caller holds l.mu.
func (l *ledger) account() {
	l.reserved, l.dying, l.over = 0, 0, 0
	for _, p := range l.pods {
		l.reserved += p.reserved
		l.dying += p.dying
		l.over += p.past()
	}
}

// readStats reads the cgroup.stat of each pod cgroup in cgroups (by pod
// ID) and of the cgroup root; a failed read is left out, with its error.
func readStats(fs *host.FS, cgroups map[string]string) (pods map[string]host.CgroupStat, node *host.CgroupStat, errs []string) {
	pods = make(map[string]host.CgroupStat, len(cgroups))
	for id, cg := range cgroups {
		st, err := fs.Stat(cg)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		pods[id] = st
	}
	if st, err := fs.Stat("/"); err != nil {
		errs = append(errs, err.Error())
	} else {
		node = &st
	}
	return pods, node, errs
}

// record takes in what readStats read; the caller holds l.mu.
func (l *ledger) record(pods map[string]host.CgroupStat, node *host.CgroupStat) {
	l.grew = false
	for id, st := range pods {
		if p := l.pods[id]; p != nil {
			l.grew = l.grew || st.DyingDescendants > p.dying
			p.live, p.dying = st.Descendants, st.DyingDescendants
		}
	}
	if node != nil {
		l.nodeDying = node.DyingDescendants
	}
	l.account()
}

// tighten reads the writable pods' cgroup.stat and the cgroup root's, and
// puts each pod's bound at its cap less its dying cgroups (writeBounds).
// It is the part of look that keeps a churning pod within its cap, run
// more often than the advertisement's refresh: a pod that churns between
// two runs can go past its cap by what it churns in that time.
func (l *ledger) tighten(log *slog.Logger, fs *host.FS) {
	l.lookMu.Lock()
	defer l.lookMu.Unlock()
	l.mu.Lock()
	cgroups := make(map[string]string, len(l.pods))
	for id, p := range l.pods {
		cgroups[id] = p.cgroup
	}
	l.mu.Unlock()
	if len(cgroups) == 0 {
		return
	}
	pods, node, _ := readStats(fs, cgroups)
	l.mu.Lock()
	l.record(pods, node)
	l.mu.Unlock()
	l.writeBounds(log, fs)
}

// churning reports whether a writable pod's dying cgroups grew at the
// last look or tighten.
func (l *ledger) churning() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grew
}

// boundWrite is one pod's new cgroup.max.descendants.
type boundWrite struct {
	id, cgroup string
	bound      int
}

// writeBounds sets the cgroup.max.descendants of every pod whose bounds
// cgdelegate put in place (settled, not unbounded) to host.ChurnBound of
// its cap and its dying cgroups, where that differs from the bound in
// force; l.lookMu is held. The bound may go below the pod's live count:
// its cgroups stay, and the kernel refuses its mkdir until its live and
// dying cgroups are within the cap again. A bound only as low as the live
// count would not stop a churner, which removes one of its cgroups and
// makes the next in the room it freed. It goes up again as the pod's dying
// cgroups are freed, never above the cap. The writes are outside l.mu: a
// container's creation never waits for them. A write that fails (the pod
// cgroup removed meanwhile) is logged and tried again at the next look.
func (l *ledger) writeBounds(log *slog.Logger, fs *host.FS) {
	l.mu.Lock()
	var writes []boundWrite
	for id, p := range l.pods {
		if !p.settled || p.bound == host.Unlimited {
			continue
		}
		if b := host.ChurnBound(p.reserved, p.dying); b != p.bound {
			writes = append(writes, boundWrite{id, p.cgroup, b})
		}
	}
	l.mu.Unlock()
	for _, w := range writes {
		if err := fs.SetDescendants(w.cgroup, w.bound); err != nil {
			log.Warn("cannot set a writable pod's bound to its cap less its dying cgroups", "cgroup", w.cgroup, "bound", w.bound, "error", err)
			continue
		}
		l.mu.Lock()
		p := l.pods[w.id]
		if p == nil || p.cgroup != w.cgroup {
			l.mu.Unlock()
			continue
		}
		full, wasFull := w.bound <= p.live, p.bound <= p.live
		p.bound = w.bound
		switch {
		case full && !wasFull:
			logging.Event(log, p, nil).Warn("a writable pod's dying cgroups fill its cap: it can make no new cgroup, nor start a container, "+
				"until they are freed (their memory reclaimed)", "cgroup", p.cgroup, "cap", p.reserved, "live", p.live, "dying", p.dying, "bound", w.bound)
		case !full && wasFull:
			logging.Event(log, p, nil).Info("a writable pod has room for new cgroups again", "cgroup", p.cgroup, "cap", p.reserved,
				"live", p.live, "dying", p.dying, "bound", w.bound)
		}
		l.mu.Unlock()
	}
}

// look reads the writable pods' cgroup.stat and the cgroup root's, puts
// each pod's bound at its cap less its dying cgroups (writeBounds), drops
// the containers that stopped, and returns the ledger as the status shows
// it. hostErr is the host verdict's problem (nil when safe): every
// writable container still running is then in Unsafe, and logged as an
// error once (again after the host was safe in between), and posted as a
// HostUnsafe Event on its pod (post; nil posts none).
func (l *ledger) look(log *slog.Logger, fs *host.FS, budget int, hostErr error, post func(advert.PodEvent)) *status.Delegation {
	l.lookMu.Lock()
	defer l.lookMu.Unlock()
	l.mu.Lock()
	cgroups := make(map[string]string, len(l.pods))
	ctrs := map[string]string{} // container ID -> cgroup
	for id, p := range l.pods {
		cgroups[id] = p.cgroup
		for cid, c := range p.ctrs {
			ctrs[cid] = c.cgroup
		}
	}
	l.mu.Unlock()

	// The reads, outside the lock: CreateContainer never waits for them.
	d := &status.Delegation{Budget: budget}
	stats, node, errs := readStats(fs, cgroups)
	d.Node, d.Errors = node, errs
	exists := make(map[string]bool, len(ctrs))
	for cid, cg := range ctrs {
		exists[cid] = cg != "" && fs.Exists(cg) == nil
	}
	l.mu.Lock()
	l.record(stats, node)
	l.mu.Unlock()
	l.writeBounds(log, fs)

	now := time.Now()
	unsafe := hostErr != nil
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pods {
		dp := status.DelegatedPod{Pod: p.namespace + "/" + p.name, Cgroup: p.cgroup, Reserved: p.reserved, Bound: p.bound, Live: p.live, Dying: p.dying}
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
				if post != nil {
					post(hostUnsafeEvent(p, c, hostErr))
				}
			}
		}
		slices.SortFunc(dp.Containers, func(a, b status.WritableContainer) int { return strings.Compare(a.Container+a.ID, b.Container+b.ID) })
		d.Pods = append(d.Pods, dp)
	}
	if l.unsafe && !unsafe {
		log.Info("the host is safe for writable cgroups again; the writable containers are no longer listed as unsafe")
	}
	l.unsafe = unsafe
	d.Reserved, d.DyingInPods, d.InUse = l.reserved, l.dying, l.inUse()
	slices.SortFunc(d.Pods, func(a, b status.DelegatedPod) int { return strings.Compare(a.Pod+a.Cgroup, b.Pod+b.Cgroup) })
	slices.SortFunc(d.Unsafe, func(a, b status.WritableContainer) int {
		return strings.Compare(a.Pod+"/"+a.Container+a.ID, b.Pod+"/"+b.Container+b.ID)
	})
	return d
}
