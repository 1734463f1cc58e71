package cpumanager

import (
	"log/slog"
	"maps"
	"slices"
	"sync"

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

// Sender delivers the updates of events that can not return them
// (RunPodSandbox, RemoveContainer, RemovePodSandbox) with UpdateContainers.
//
// It must not call the runtime from inside the event handler: the runtime
// holds its NRI lock for the whole event (containerd does), so the call
// would wait for the handler that waits for it. It sends from its own
// goroutine instead, one batch at a time, in order.
//
// It queues container ids, not cpusets: the cpuset is read from the policy
// when the batch is sent, and after the send it is read again; a container
// whose assignment changed meanwhile (an event raced the send) is queued
// again, so the last update a container gets is its current assignment.
type Sender struct {
	log     *slog.Logger
	metrics UpdateRecorder
	// manager is the pinning state in force, where a container's current
	// assignment is looked up.
	manager func() *Manager

	mu      sync.Mutex
	u       Updater
	pending map[string]struct{}
	running bool
	idle    *sync.Cond
}

// NewSender returns a Sender that sends the assignments of manager() (the
// Manager in force when the updates go out) and counts what it sends in
// rec. Nothing is sent before SetUpdater attaches a runtime connection.
func NewSender(log *slog.Logger, rec UpdateRecorder, manager func() *Manager) *Sender {
	s := &Sender{log: log, metrics: rec, manager: manager, pending: map[string]struct{}{}}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// SetUpdater attaches the runtime connection and sends anything queued.
func (s *Sender) SetUpdater(u Updater) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.u = u
	s.kickLocked()
}

// Enqueue queues the containers of as for an update.
func (s *Sender) Enqueue(as []policy.Assignment) {
	if len(as) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range as {
		s.pending[a.ContainerID] = struct{}{}
	}
	if s.u == nil {
		s.log.Warn("container updates queued until the runtime connection is attached", "queued", len(s.pending))
	}
	s.kickLocked()
}

func (s *Sender) kickLocked() {
	if s.running || s.u == nil || len(s.pending) == 0 {
		return
	}
	s.running = true
	go s.run()
}

// Wait blocks until no send is under way. With a runtime connection
// attached that means nothing is queued either; before SetUpdater, Wait
// returns at once and the queue waits for the connection.
func (s *Sender) Wait() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.running {
		s.idle.Wait()
	}
}

func (s *Sender) run() {
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.running = false
			s.idle.Broadcast()
			s.mu.Unlock()
			return
		}
		ids := slices.Sorted(maps.Keys(s.pending))
		clear(s.pending)
		u := s.u
		s.mu.Unlock()

		pn := s.manager()
		sent := make(map[string]policy.Assignment, len(ids))
		batch := make([]policy.Assignment, 0, len(ids))
		for _, id := range ids {
			if a, ok := pn.Assignment(id); ok {
				sent[id] = a
				batch = append(batch, a)
			}
		}
		if len(batch) == 0 {
			continue
		}
		failed, err := u.UpdateContainers(Updates(batch))
		switch {
		case err != nil:
			// A broken connection ends this plugin instance; the next one
			// repairs everything in Synchronize.
			s.metrics.Updates(0, len(batch))
			s.log.Error("cannot send container updates", "containers", ids, "error", err)
			continue
		case len(failed) > 0:
			s.log.Error("runtime failed some container updates", "failed", failedIDs(failed))
		default:
			s.log.Debug("container updates sent", "containers", len(batch))
		}
		s.metrics.Updates(len(batch)-len(failed), len(failed))
		var again []policy.Assignment
		pn = s.manager()
		for id, a := range sent {
			if cur, ok := pn.Assignment(id); ok && !sameCPUs(cur, a) {
				again = append(again, cur)
			}
		}
		s.mu.Lock()
		for _, a := range again {
			s.pending[a.ContainerID] = struct{}{}
		}
		s.mu.Unlock()
	}
}

func sameCPUs(a, b policy.Assignment) bool {
	return a.CPUs.Equals(b.CPUs) && a.Mems.Equals(b.Mems) && a.QuotaDisabled() == b.QuotaDisabled()
}

func failedIDs(us []*api.ContainerUpdate) []string {
	ids := make([]string, 0, len(us))
	for _, u := range us {
		ids = append(ids, u.GetContainerId())
	}
	return ids
}
