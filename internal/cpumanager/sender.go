package cpumanager

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// Updater sends unsolicited container updates to the runtime. stub.Stub is
// one.
type Updater interface {
	UpdateContainers([]*api.ContainerUpdate) ([]*api.ContainerUpdate, error)
}

// UpdateRecorder counts the batches of container updates the Sender sends:
// how many were sent and how many the runtime failed.
type UpdateRecorder interface{ Updates(sent, failed int) }

// sendBatch is how many containers one UpdateContainers call carries.
// The runtime holds its NRI lock for a whole call (containerd 2.x:
// internal/nri, updateFromPlugin) and applies the updates one at a time
// (a `runc update` each), so every other event of every pod (a
// CreateContainer, a StartContainer) waits for the whole call. One
// container a call makes that wait one update long; the cost is a ttrpc
// round trip per container. The cpusets themselves are in force before
// (the handlers write them to the cgroups at once: Enforce).
const sendBatch = 1

// sendHold and sendMaxHold: the Sender sends nothing until no event has
// queued an update for sendHold, and holds no container longer than
// sendMaxHold. The cpusets are in force already (Enforce); what waits is
// the runtime's record of them. A pod's own events come close together
// (RunPodSandbox, then CreateContainer and StartContainer of each of its
// containers), so a pinned pod starts before the fleet's updates begin to
// take the runtime's NRI lock and the node's CPUs, and a busy node still
// gets them every sendMaxHold.
const (
	sendHold    = time.Second
	sendMaxHold = 5 * time.Second
)

// Sender delivers the updates of events that can not return them
// (RunPodSandbox, RemoveContainer, RemovePodSandbox) with UpdateContainers.
//
// It must not call the runtime from inside the event handler: the runtime
// holds its NRI lock for the whole event (containerd does), so the call
// would wait for the handler that waits for it. It sends from its own
// goroutine instead, one call at a time, in order, sendBatch containers a
// call, so that the other events wait for one update at most, and only
// once no event has queued anything for sendHold (sendMaxHold at most).
//
// It queues container ids, not cpusets: the cpuset is read from the policy
// when the batch is sent, and after the send it is read again; a container
// whose assignment changed meanwhile (an event raced the send) is queued
// again, so the last update a container gets is its current assignment.
//
// A failed send is retried: every container of a call that failed as a
// whole, and each container the runtime reported failed, is sent again
// after a backoff (defaultBackoff), with its assignment at that time, for
// as long as the Manager in force knows it. A container queued anew by an
// event goes with the others, without waiting for its retry; one still failing
// after the last attempt is given up. Containers waiting for a retry never
// hold back the others.
//
// It does three jobs, each with its own lock: scheduling (the queue and
// the hold, here; the retries and their backoff, sender_retry.go), the
// ledger of what the runtime holds (records, records.go, with the Sender's
// Created, Forget, Removed, ForgetAll and Known) and the ordered cgroup
// writes (cgroupWrites, Enforce, updates.go). The ledger and the writes
// know nothing of the queue.
//
// Close stops it for good.
type Sender struct {
	log     *slog.Logger
	metrics UpdateRecorder
	// manager is the pinning state in force, where a container's current
	// assignment is looked up.
	manager func() *Manager
	backoff backoff
	clock   clock
	// batch is the most containers a call carries (sendBatch); 0: no
	// limit.
	batch int
	// hold and maxHold are sendHold and sendMaxHold; last is when an event
	// last queued something.
	hold, maxHold time.Duration
	last          time.Time
	// records is the ledger of what the runtime holds (records.go);
	// writes, the ordered cgroup writes (Enforce).
	records *records
	writes  cgroupWrites
	// gaveUp, when set, is told of every update given up (SetGiveUp).
	gaveUp func(a policy.Assignment, attempts int)

	mu    sync.Mutex
	u     Updater
	queue map[string]retry
	// running is set while the goroutine runs; exited is closed when it
	// ends.
	running bool
	exited  chan struct{}
	closed  bool
	idle    *sync.Cond
	// kick wakes the goroutine waiting for a retry: something was queued,
	// or the Sender closed.
	kick chan struct{}
}

// NewSender returns a Sender that sends the assignments of manager() (the
// Manager in force when the updates go out), counts what it sends in rec
// and writes cpusets to the cgroups of cgroups() (Enforce; nil: it writes
// none). Nothing is sent before SetUpdater attaches a runtime connection.
func NewSender(log *slog.Logger, rec UpdateRecorder, manager func() *Manager, cgroups func() CgroupWriter) *Sender {
	s := &Sender{
		log: log, metrics: rec, manager: manager, backoff: defaultBackoff, clock: realClock{}, batch: sendBatch,
		hold: sendHold, maxHold: sendMaxHold,
		records: newRecords(), writes: cgroupWrites{cgroups: cgroups, manager: manager},
		queue: map[string]retry{}, kick: make(chan struct{}, 1),
	}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// SetHold replaces sendHold (0: send at once); call it before the first
// Enqueue.
func (s *Sender) SetHold(hold time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = hold
}

// SetUpdater attaches the runtime connection and sends anything queued.
func (s *Sender) SetUpdater(u Updater) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.u = u
	s.kickLocked()
}

// SetGiveUp makes the Sender call fn for every container update it gives
// up after its retries, with the assignment it failed to send and how many
// sends failed. fn is called with the Sender's lock held: it must be cheap
// and never call the Sender. Call it before SetUpdater.
func (s *Sender) SetGiveUp(fn func(a policy.Assignment, attempts int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gaveUp = fn
}

// Enqueue queues the containers of as for an update, once no event has
// queued any for the hold (at most the longest hold after a container was
// first queued): a container waiting for a retry goes with them. After
// Close it does nothing.
func (s *Sender) Enqueue(as []policy.Assignment) {
	if len(as) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	now := s.clock.Now()
	s.last = now
	for _, a := range as {
		since := now
		if r, ok := s.queue[a.ContainerID]; ok && !r.since.IsZero() {
			since = r.since
		}
		s.queue[a.ContainerID] = retry{since: since}
	}
	if s.u == nil {
		s.log.Warn("container updates queued until the runtime connection is attached", "queued", len(s.queue))
	}
	s.kickLocked()
}

// kickLocked starts the goroutine, or wakes it if it waits for a retry.
func (s *Sender) kickLocked() {
	if s.closed || s.u == nil || len(s.queue) == 0 {
		return
	}
	if s.running {
		select {
		case s.kick <- struct{}{}:
		default: // a wake-up is pending already
		}
		return
	}
	s.running = true
	s.exited = make(chan struct{})
	go s.run(s.exited)
}

// Wait blocks until no send is under way and nothing is queued, retries
// included: every queued update was sent, given up, or dropped (its
// container gone, or the Sender closed). Before SetUpdater, Wait returns at
// once and the queue waits for the connection.
func (s *Sender) Wait() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.running {
		s.idle.Wait()
	}
}

// Close stops the Sender: the queue, retries included, is dropped, later
// Enqueue calls do nothing, and a send under way (which can not be
// interrupted) is waited for until ctx is done; then the error says so. A
// second Close only waits.
func (s *Sender) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		if n := len(s.queue); n > 0 {
			s.log.Info("container update sender stopped; queued updates dropped", "queued", n)
		}
		clear(s.queue)
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	exited := s.exited
	running := s.running
	s.mu.Unlock()
	if !running {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("container update sender: a send is still under way: %w", ctx.Err())
	}
}

func (s *Sender) run(exited chan struct{}) {
	defer close(exited)
	for {
		u, taken, wait, ok := s.next()
		switch {
		case !ok:
			return
		case len(taken) == 0:
			select {
			case <-s.clock.After(wait):
			case <-s.kick:
			}
		default:
			s.send(u, taken)
		}
	}
}

// next takes the containers due now, with their failures so far, or says
// how long until the first retry is due; !ok when the Sender is closed,
// nothing is queued or the connection was taken away (SetUpdater(nil)),
// and the goroutine ends.
func (s *Sender) next() (u Updater, taken map[string]int, wait time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.kick: // the queue is looked at now
	default:
	}
	if s.closed || len(s.queue) == 0 || s.u == nil {
		s.running = false
		s.idle.Broadcast()
		return nil, nil, 0, false
	}
	now := s.clock.Now()
	var due []string
	var first time.Time
	for id, r := range s.queue {
		at := s.dueAt(r)
		if !at.After(now) {
			due = append(due, id)
		} else if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	slices.Sort(due)
	if s.batch > 0 && len(due) > s.batch {
		due = due[:s.batch] // the rest go with the next calls, at once
	}
	taken = make(map[string]int, len(due))
	for _, id := range due {
		taken[id] = s.queue[id].failures
		delete(s.queue, id)
	}
	return s.u, taken, first.Sub(now), true
}

// dueAt is when a queued container may go: its retry's time, and not
// before the hold since the last event ended, or its longest hold did.
func (s *Sender) dueAt(r retry) time.Time {
	held := s.last.Add(s.hold)
	if limit := r.since.Add(s.maxHold); limit.Before(held) {
		held = limit
	}
	if held.After(r.due) {
		return held
	}
	return r.due
}

// send sends the current assignments of the taken containers that the
// Manager in force still knows and whose update would change what the
// runtime holds (known), in one call, and queues what must go again
// (settle).
func (s *Sender) send(u Updater, taken map[string]int) {
	ids := slices.Sorted(maps.Keys(taken))
	pn := s.manager()
	cand := make([]policy.Assignment, 0, len(ids))
	cu := make([]*api.ContainerUpdate, 0, len(ids))
	var gone []string // nothing to remember of them
	var str setStrings
	for _, id := range ids {
		a, ok := pn.Assignment(id)
		if !ok {
			gone = append(gone, id)
			continue
		}
		cand, cu = append(cand, a), append(cu, update(&str, a))
	}
	sendIt, epoch := s.records.changes(cu, gone)
	batch := make([]policy.Assignment, 0, len(cand))
	us := make([]*api.ContainerUpdate, 0, len(cand))
	for i, a := range cand {
		if !sendIt[i] {
			s.log.Debug("container update not sent: the runtime holds it", "container", a.ContainerID)
			continue
		}
		batch, us = append(batch, a), append(us, cu[i])
	}
	if len(batch) == 0 {
		return
	}
	failed, err := u.UpdateContainers(us)
	var again map[string]bool
	switch {
	case err != nil:
		again = make(map[string]bool, len(batch))
		for _, a := range batch {
			again[a.ContainerID] = true
		}
		s.failureLog(taken, again)("cannot send container updates; they are retried", "containers", slices.Sorted(maps.Keys(again)), "error", err)
	case len(failed) > 0:
		again = failedIDs(failed, batch)
		s.failureLog(taken, again)("runtime failed some container updates; they are retried", "failed", slices.Sorted(maps.Keys(again)))
	default:
		s.log.Debug("container updates sent", "containers", len(batch))
	}
	s.metrics.Updates(len(batch)-len(again), len(again))
	s.records.remember(us, again, epoch)
	s.rewrite(batch, again)
	s.settle(batch, taken, again)
}

func sameCPUs(a, b policy.Assignment) bool {
	return a.CPUs.Equals(b.CPUs) && a.Mems.Equals(b.Mems) && a.QuotaDisabled() == b.QuotaDisabled()
}
