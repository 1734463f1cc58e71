package cpumanager

import (
	"sync"

	"github.com/containerd/nri/pkg/api"
)

// records is the Sender's ledger: per container, what the runtime holds
// of its CPU settings as far as the Sender knows it (its creation
// adjustment, its last update the runtime applied). A queued container
// whose update would change none of it is not sent.
//
// Its rules, each a method:
//   - a new container's creation adjustment is what the runtime holds
//     (created);
//   - an update the runtime applies outside the Sender (an event's answer,
//     a resize) or a removal makes the record unknown, and moves the
//     epoch (forget, forgetAll): a call in flight when it happened can not
//     tell whose update came last, so its updates are not recorded
//     (remember);
//   - a container removed while pinning is off is dropped without moving
//     the epoch, as no update can be about it any more (removed).
//
// It has its own lock: nothing it holds is read together with the send
// queue's state.
type records struct {
	mu    sync.Mutex
	known map[string]cpuRecord
	// epoch counts the forget and forgetAll calls.
	epoch uint64
}

func newRecords() *records { return &records{known: map[string]cpuRecord{}} }

// created records a new container's creation adjustment (the CPU settings
// Adjust returned) as what the runtime holds of it. A new container is in
// no call in flight: the epoch stays.
func (r *records) created(id string, cpu *api.LinuxCPU) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.known[id] = cpuRecord{}.after(cpu)
}

// forget makes the records of ids unknown and moves the epoch; no ids:
// nothing changes.
func (r *records) forget(ids ...string) {
	if len(ids) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.epoch++
	for _, id := range ids {
		delete(r.known, id)
	}
}

// forgetAll is forget for every container.
func (r *records) forgetAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.epoch++
	clear(r.known)
}

// removed drops the record of a removed container; the epoch stays.
func (r *records) removed(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.known, id)
}

// changes says, for each update of us, whether it would change what the
// runtime holds (so it must be sent), and returns the epoch it judged at,
// for remember. The records of gone (containers the Manager in force no
// longer knows) are dropped first.
func (r *records) changes(us []*api.ContainerUpdate, gone []string) (send []bool, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range gone {
		delete(r.known, id)
	}
	send = make([]bool, len(us))
	for i, u := range us {
		send[i] = !r.known[u.GetContainerId()].holds(u.GetLinux().GetResources().GetCpu())
	}
	return send, r.epoch
}

// remember records the updates of a call the runtime applied (all of us
// but failed) as what it holds, unless the epoch moved since changes
// returned epoch: then which update came last is unknown, and so are the
// call's containers.
func (r *records) remember(us []*api.ContainerUpdate, failed map[string]bool, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range us {
		id := u.GetContainerId()
		if failed[id] || r.epoch != epoch {
			delete(r.known, id)
			continue
		}
		r.known[id] = r.known[id].after(u.GetLinux().GetResources().GetCpu())
	}
}

// snapshot is a copy of the records: per container, "cpus/mems".
func (r *records) snapshot() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.known))
	for id, rec := range r.known {
		out[id] = rec.cpus + "/" + rec.mems
	}
	return out
}

// cpuRecord is what the runtime holds of a container's CPU settings, as
// the Sender knows them: its cpuset and memory nodes ("" unknown) and, if
// known, its quota and period.
type cpuRecord struct {
	cpus, mems string
	quota      *int64
	period     *uint64
}

// holds says whether applying c would change nothing of r: the same
// cpuset and memory nodes, and the quota and period c sets (if any)
// known to be r's.
func (r cpuRecord) holds(c *api.LinuxCPU) bool {
	switch {
	case r.cpus == "" || r.mems == "" || c.GetCpus() != r.cpus || c.GetMems() != r.mems:
		return false
	case c.GetQuota() != nil && (r.quota == nil || *r.quota != c.GetQuota().GetValue()):
		return false
	case c.GetPeriod() != nil && (r.period == nil || *r.period != c.GetPeriod().GetValue()):
		return false
	}
	return true
}

// after is r once the runtime applied c: what c sets replaces r's.
func (r cpuRecord) after(c *api.LinuxCPU) cpuRecord {
	r.cpus, r.mems = c.GetCpus(), c.GetMems()
	if q := c.GetQuota(); q != nil {
		v := q.GetValue()
		r.quota = &v
	}
	if p := c.GetPeriod(); p != nil {
		v := p.GetValue()
		r.period = &v
	}
	return r
}

// Created records a new container's creation adjustment (the CPU
// settings Adjust returned) as what the runtime holds of it. Call it before
// the handler answers.
func (s *Sender) Created(id string, cpu *api.LinuxCPU) { s.records.created(id, cpu) }

// Forget makes what the runtime holds of the containers unknown, so that
// their next queued update is sent: call it for every container an event
// answers updates for (the runtime applies them outside the Sender), and
// for a resized or removed container. No ids: nothing changes.
func (s *Sender) Forget(ids ...string) { s.records.forget(ids...) }

// Removed drops what the Sender remembers of a removed container; no
// update can be about it any more, so calls in flight are still recorded.
// Forget does this and more for a container pinning still places; Removed
// is for one removed while pinning is off or suspended, which would
// otherwise stay remembered until the process ends.
func (s *Sender) Removed(id string) { s.records.removed(id) }

// ForgetAll is Forget for every container: after Synchronize, the runtime
// may have changed anything meanwhile.
func (s *Sender) ForgetAll() { s.records.forgetAll() }

// Known is the Sender's ledger: per container, the cpuset and memory
// nodes ("cpus/mems") it records the runtime holds. A copy, for checks of
// the ledger against what the runtime really holds (the nri package's
// model test).
func (s *Sender) Known() map[string]string { return s.records.snapshot() }
