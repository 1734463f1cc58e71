package cpumanager

import (
	"context"
	"log/slog"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

// senderManager is an active Manager on 8 CPUs, one NUMA node, with
// node-shared containers a, b and c (cgroups /k/a, /k/b, /k/c), each in a
// pod of its own without a budget.
func senderManager(t *testing.T) *Manager {
	t.Helper()
	topo, err := topology.FromSpec(topology.Spec{Packages: 1, NodesPerPackage: 1, CoresPerNode: 8, ThreadsPerCore: 1})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(topo, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{policy: pol}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := pol.AddPod(policy.PodSpec{ID: "pod-" + id, Name: "default/" + id}); err != nil {
			t.Fatal(err)
		}
		spec := policy.ContainerSpec{ID: id, PodID: "pod-" + id, Name: id, Resources: budget.NewContainer(budget.Budget{}), Cgroup: "/k/" + id}
		if _, _, err := pol.AddContainer(spec); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// shrinkNodePool gives a new pod a bubble of one CPU: every node-shared
// container's assignment changes, and nothing is enqueued. It may run on
// the sender's goroutine, so it reports with Error, not Fatal.
func shrinkNodePool(t *testing.T, m *Manager) {
	t.Helper()
	b := budget.Budget{CPURequest: 1000, CPULimit: 1000, MemoryLimit: 1 << 30}
	if _, err := m.policy.AddPod(policy.PodSpec{ID: "bubble", Name: "default/bubble", Budget: b}); err != nil {
		t.Error(err)
	}
}

func queued(ids ...string) []policy.Assignment {
	as := make([]policy.Assignment, 0, len(ids))
	for _, id := range ids {
		as = append(as, policy.Assignment{ContainerID: id})
	}
	return as
}

// fakeUpdater records every UpdateContainers call.
type fakeUpdater struct {
	// during runs inside call i, before it returns; it may block.
	during func(i int)
	// fail answers call i; nil: every update succeeds.
	fail func(i int, us []*api.ContainerUpdate) ([]*api.ContainerUpdate, error)

	mu       sync.Mutex
	calls    [][]string          // the container ids of each call
	cpus     map[string]string   // the last cpuset each container was sent
	tried    map[string][]string // every cpuset each container was sent, failed or not
	inflight int
	overlap  bool // two calls ran at once
}

func (u *fakeUpdater) UpdateContainers(us []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	u.mu.Lock()
	i := len(u.calls)
	ids := make([]string, 0, len(us))
	for _, x := range us {
		ids = append(ids, x.GetContainerId())
	}
	u.calls = append(u.calls, ids)
	if u.tried == nil {
		u.tried = map[string][]string{}
	}
	for _, x := range us {
		id := x.GetContainerId()
		u.tried[id] = append(u.tried[id], x.GetLinux().GetResources().GetCpu().GetCpus())
	}
	u.inflight++
	u.overlap = u.overlap || u.inflight > 1
	u.mu.Unlock()

	if u.during != nil {
		u.during(i)
	}
	var failed []*api.ContainerUpdate
	var err error
	if u.fail != nil {
		failed, err = u.fail(i, us)
	}

	u.mu.Lock()
	defer u.mu.Unlock()
	u.inflight--
	if err == nil {
		if u.cpus == nil {
			u.cpus = map[string]string{}
		}
		for _, x := range us {
			u.cpus[x.GetContainerId()] = x.GetLinux().GetResources().GetCpu().GetCpus()
		}
	}
	return failed, err
}

func (u *fakeUpdater) result() ([][]string, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls, u.overlap
}

// countUpdates is an UpdateRecorder that adds up Updates.
type countUpdates struct {
	mu           sync.Mutex
	sent, failed int
}

func (c *countUpdates) Updates(sent, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent += sent
	c.failed += failed
}

// nopUpdates counts nothing.
type nopUpdates struct{}

func (nopUpdates) Updates(int, int) {}

// newTestSender sends every container due in one call, so that the tests
// see what is queued together, and holds nothing; TestSenderBatchSize
// checks sendBatch, TestSenderHold the hold.
func newTestSender(m *Manager) *Sender {
	s := NewSender(slog.New(slog.DiscardHandler), nopUpdates{}, func() *Manager { return m }, nil)
	s.batch, s.hold, s.maxHold = 0, 0, 0
	return s
}

// TestSenderBatch: what is queued before the runtime connection is
// attached goes in one call once it is, each container once, sorted, with
// its current assignment; containers the manager no longer knows (or a
// manager that is off) are dropped.
func TestSenderBatch(t *testing.T) {
	tests := []struct {
		name    string
		enqueue [][]string
		off     bool
		want    [][]string
	}{
		{name: "one batch", enqueue: [][]string{{"b", "a"}}, want: [][]string{{"a", "b"}}},
		{name: "queued twice, sent once", enqueue: [][]string{{"a"}, {"c", "a"}, {"a"}}, want: [][]string{{"a", "c"}}},
		{name: "unknown containers dropped", enqueue: [][]string{{"gone", "b"}}, want: [][]string{{"b"}}},
		{name: "nothing known, no call", enqueue: [][]string{{"gone"}}, want: nil},
		{name: "nothing queued, no call", want: nil},
		{name: "pinning off, no call", enqueue: [][]string{{"a"}}, off: true, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			if tc.off {
				m = nil
			}
			s := newTestSender(m)
			for _, ids := range tc.enqueue {
				s.Enqueue(queued(ids...))
			}
			u := &fakeUpdater{}
			s.Wait() // nothing runs without an updater
			if calls, _ := u.result(); len(calls) != 0 {
				t.Fatalf("sent before the updater was attached: %v", calls)
			}
			s.SetUpdater(u)
			s.Wait()
			calls, _ := u.result()
			if !reflect.DeepEqual(calls, tc.want) {
				t.Fatalf("calls = %v, want %v", calls, tc.want)
			}
			for _, call := range calls {
				for _, id := range call {
					a, _ := m.Assignment(id)
					if got := u.cpus[id]; got != a.CPUs.String() {
						t.Errorf("%s sent cpus %q, want its assignment %q", id, got, a.CPUs)
					}
				}
			}
		})
	}
}

// sendBlockingFirst queues first, holds the first UpdateContainers call
// until each of during is queued, and returns the calls once all are
// sent; two calls at once fail the test.
func sendBlockingFirst(t *testing.T, s *Sender, first []string, during ...[]string) [][]string {
	t.Helper()
	started, release := make(chan struct{}), make(chan struct{})
	u := &fakeUpdater{during: func(i int) {
		if i == 0 {
			close(started)
			<-release
		}
	}}
	s.SetUpdater(u)
	s.Enqueue(queued(first...))
	<-started
	for _, ids := range during {
		s.Enqueue(queued(ids...))
	}
	close(release)
	s.Wait()
	calls, overlap := u.result()
	if overlap {
		t.Error("two UpdateContainers calls ran at once")
	}
	return calls
}

// TestSenderOrder: what is queued while a batch is being sent goes in a
// later call, never in one that overlaps it.
func TestSenderOrder(t *testing.T) {
	tests := []struct {
		name   string
		first  []string
		during [][]string // enqueued while the first call is in flight
		want   [][]string
	}{
		{name: "later batch after", first: []string{"a"}, during: [][]string{{"c"}, {"b"}}, want: [][]string{{"a"}, {"b", "c"}}},
		// Unchanged, it is not sent again: the runtime holds it.
		{name: "container in flight queued again", first: []string{"a", "b"}, during: [][]string{{"a"}}, want: [][]string{{"a", "b"}}},
		{name: "nothing during", first: []string{"c"}, want: [][]string{{"c"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if calls := sendBlockingFirst(t, newTestSender(senderManager(t)), tc.first, tc.during...); !reflect.DeepEqual(calls, tc.want) {
				t.Fatalf("calls = %v, want %v", calls, tc.want)
			}
		})
	}
}

// TestSenderResendsChanged: a container whose assignment changed while its
// update was in flight, with nothing queued for it, is sent again: the
// last update it gets is its current assignment. An unchanged one is not.
func TestSenderResendsChanged(t *testing.T) {
	tests := []struct {
		name   string
		change bool
		want   [][]string
	}{
		{name: "changed in flight", change: true, want: [][]string{{"a", "b"}, {"a", "b"}}},
		{name: "unchanged", want: [][]string{{"a", "b"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			before, _ := m.Assignment("a")
			s := newTestSender(m)
			u := &fakeUpdater{during: func(i int) {
				if i == 0 && tc.change {
					shrinkNodePool(t, m)
				}
			}}
			s.SetUpdater(u)
			s.Enqueue(queued("a", "b"))
			s.Wait()
			calls, _ := u.result()
			if !reflect.DeepEqual(calls, tc.want) {
				t.Fatalf("calls = %v, want %v", calls, tc.want)
			}
			for _, id := range []string{"a", "b"} {
				a, _ := m.Assignment(id)
				if u.cpus[id] != a.CPUs.String() {
					t.Errorf("%s: last sent %q, current assignment %q", id, u.cpus[id], a.CPUs)
				}
			}
			if after, _ := m.Assignment("a"); after.CPUs.Equals(before.CPUs) == tc.change {
				t.Fatalf("assignment %s -> %s: the test did not change what it meant to", before.CPUs, after.CPUs)
			}
		})
	}
}

// TestSenderNewUpdater: SetUpdater replaces the connection; later batches
// go to the new one only.
func TestSenderNewUpdater(t *testing.T) {
	m := senderManager(t)
	s := newTestSender(m)
	old, cur := &fakeUpdater{}, &fakeUpdater{}
	s.SetUpdater(old)
	s.Enqueue(queued("a"))
	s.Wait()
	s.SetUpdater(cur)
	s.Enqueue(queued("b"))
	s.Wait()
	if calls, _ := old.result(); !reflect.DeepEqual(calls, [][]string{{"a"}}) {
		t.Errorf("old updater calls = %v", calls)
	}
	if calls, _ := cur.result(); !reflect.DeepEqual(calls, [][]string{{"b"}}) {
		t.Errorf("new updater calls = %v", calls)
	}
}

// TestSenderNoLeak: the sending goroutine runs only while something is
// queued or being sent: once Wait returns it ends, so a sender that is
// dropped leaks nothing.
func TestSenderNoLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	m := senderManager(t)
	s := newTestSender(m)
	u := &fakeUpdater{}
	s.SetUpdater(u)
	for range 20 {
		s.Enqueue(queued("a", "b", "c"))
	}
	s.Wait()
	s.Wait() // idle: returns at once
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Wait, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
	if calls, _ := u.result(); len(calls) == 0 {
		t.Fatal("nothing sent")
	}
}

// TestSenderBatchSize: a Sender sends at most its batch of containers a
// call, in id order, and what it queued together still all goes out; an
// event between two calls gets the runtime between them (the fake
// updater's calls never overlap, and a container queued during the first
// call joins the rest in order).
func TestSenderBatchSize(t *testing.T) {
	tests := []struct {
		name   string
		batch  int
		first  []string
		during []string // enqueued while the first call is in flight
		want   [][]string
	}{
		{name: "default", batch: sendBatch, first: []string{"c", "a", "b"}, want: [][]string{{"a"}, {"b"}, {"c"}}},
		{name: "two", batch: 2, first: []string{"c", "a", "b"}, want: [][]string{{"a", "b"}, {"c"}}},
		{name: "queued in flight joins in order", batch: 1, first: []string{"c", "b"}, during: []string{"a"}, want: [][]string{{"b"}, {"a"}, {"c"}}},
		{name: "no limit", batch: 0, first: []string{"c", "a", "b"}, want: [][]string{{"a", "b", "c"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			s := NewSender(slog.New(slog.DiscardHandler), nopUpdates{}, func() *Manager { return m }, nil)
			if s.batch != sendBatch {
				t.Fatalf("NewSender batch = %d, want sendBatch %d", s.batch, sendBatch)
			}
			s.batch, s.hold = tc.batch, 0
			if calls := sendBlockingFirst(t, s, tc.first, tc.during); !reflect.DeepEqual(calls, tc.want) {
				t.Fatalf("calls = %v, want %v", calls, tc.want)
			}
		})
	}
}

// TestSenderRewritesStale: when a container's assignment changed while its
// update was in flight, the runtime wrote the older cpuset to its cgroup
// after the event wrote the newer one; the Sender writes the current one
// again as soon as the call returns, whether or not the event queued the
// container again (it then waits its turn for the runtime). An unchanged
// container, or one whose update failed, is not written.
func TestSenderRewritesStale(t *testing.T) {
	tests := []struct {
		name    string
		change  bool
		requeue bool
		fail    bool
		want    []string // containers written
	}{
		{name: "changed in flight", change: true, want: []string{"a", "b"}},
		{name: "changed and queued again", change: true, requeue: true, want: []string{"a", "b"}},
		{name: "unchanged", want: nil},
		{name: "changed, update failed", change: true, fail: true, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			w := &fakeCgroups{}
			s := NewSender(slog.New(slog.DiscardHandler), nopUpdates{}, func() *Manager { return m }, func() CgroupWriter { return w })
			s.batch, s.hold = 0, 0
			u := &fakeUpdater{during: func(i int) {
				if i == 0 && tc.change {
					shrinkNodePool(t, m)
					if tc.requeue {
						s.Enqueue(queued("a", "b"))
					}
				}
			}, fail: func(i int, us []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
				if i == 0 && tc.fail {
					return us, nil
				}
				return nil, nil
			}}
			s.SetUpdater(u)
			s.Enqueue(queued("a", "b"))
			s.Wait()
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, id := range tc.want {
				a, _ := m.Assignment(id)
				want = append(want, "/k/"+id+" "+a.CPUs.String()+" "+a.Mems.String())
			}
			if !reflect.DeepEqual(w.written, want) {
				t.Fatalf("cgroup writes %q, want %q", w.written, want)
			}
		})
	}
}

// TestSenderSkipsHeld: a queued container whose update would change
// nothing the runtime holds (its creation adjustment, or its last update
// the runtime applied) is not sent; one the Sender knows nothing of, one
// forgotten, and one whose last update went out while an event answered
// updates are.
func TestSenderSkipsHeld(t *testing.T) {
	all := []string{"a", "b", "c"}
	tests := []struct {
		name string
		// run drives the sender; every call's ids are compared with want.
		run  func(t *testing.T, m *Manager, s *Sender, u *fakeUpdater)
		want [][]string
	}{
		{
			name: "created, unchanged",
			run: func(t *testing.T, m *Manager, s *Sender, _ *fakeUpdater) {
				created(t, m, s, "a", "b")
				s.Enqueue(queued(all...))
			},
			want: [][]string{{"c"}},
		},
		{
			name: "narrowed and widened before the send",
			run: func(t *testing.T, m *Manager, s *Sender, _ *fakeUpdater) {
				created(t, m, s, all...)
				shrinkNodePool(t, m)
				m.RemovePod("bubble")
				s.Enqueue(queued(all...))
			},
		},
		{
			name: "narrowed, sent, widened",
			run: func(t *testing.T, m *Manager, s *Sender, _ *fakeUpdater) {
				created(t, m, s, all...)
				shrinkNodePool(t, m)
				s.Enqueue(queued(all...))
				s.Wait()
				m.RemovePod("bubble")
				s.Enqueue(queued(all...))
				s.Wait()
				s.Enqueue(queued(all...)) // held now
			},
			want: [][]string{all, all},
		},
		{
			name: "forgotten",
			run: func(t *testing.T, m *Manager, s *Sender, _ *fakeUpdater) {
				created(t, m, s, all...)
				s.Forget("b")
				s.Enqueue(queued(all...))
				s.Wait()
				s.ForgetAll()
				s.Enqueue(queued("c"))
			},
			want: [][]string{{"b"}, {"c"}},
		},
		{
			name: "an event answered updates during the call",
			run: func(t *testing.T, m *Manager, s *Sender, u *fakeUpdater) {
				u.during = func(i int) {
					if i == 0 {
						s.Forget("x")
					}
				}
				s.Enqueue(queued("a"))
				s.Wait()
				s.Enqueue(queued("a", "b"))
				s.Wait()
				s.Enqueue(queued("a", "b"))
			},
			want: [][]string{{"a"}, {"a", "b"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := senderManager(t)
			s := newTestSender(m)
			u := &fakeUpdater{}
			s.SetUpdater(u)
			tc.run(t, m, s, u)
			s.Wait()
			if calls, _ := u.result(); !reflect.DeepEqual(calls, tc.want) {
				t.Fatalf("calls = %v, want %v", calls, tc.want)
			}
			for _, id := range all {
				a, _ := m.Assignment(id)
				if got, ok := u.cpus[id]; ok && got != a.CPUs.String() {
					t.Errorf("%s: last sent %q, current assignment %q", id, got, a.CPUs)
				}
			}
		})
	}
}

// created records the containers' current assignments as their creation
// adjustments.
func created(t *testing.T, m *Manager, s *Sender, ids ...string) {
	t.Helper()
	for _, id := range ids {
		a, ok := m.Assignment(id)
		if !ok {
			t.Fatalf("no assignment for %s", id)
		}
		s.Created(id, Adjust(&api.ContainerAdjustment{}, a))
	}
}
