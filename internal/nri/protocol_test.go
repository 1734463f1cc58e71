package nri

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

var (
	protocolSeed = flag.Uint64("protocol.seed", 1, "first seed of TestProtocolModel's sequences")
	protocolSeqs = flag.Int("protocol.sequences", 0, "how many sequences TestProtocolModel runs (0: 12, or 4 with -short)")
)

// protocolSteps is how many events one sequence of TestProtocolModel sends.
const protocolSteps = 60

// TestProtocolModel drives the real handlers and the real update Sender
// with seeded random sequences of NRI events, as containerd sends them
// (RunPodSandbox, CreateContainer, UpdateContainer, StopContainer,
// RemoveContainer, StopPodSandbox, RemovePodSandbox, and a plugin restart
// answered by Synchronize), against a fake runtime that fails some of the
// Sender's UpdateContainers calls and some updates in them. After every
// event, once the Sender is idle, it checks:
//   - every placed container's cpuset, as the runtime holds it, is its
//     assignment (the updates converged, restarts and failures included);
//   - the Sender's ledger of what the runtime holds names only live
//     containers and says what the runtime really holds;
//   - no exclusive CPU is in two containers' cpusets;
//   - every container of a pod with a bubble stays inside it (but for one
//     that runs in the node shared pool, as documented), and bubbles do
//     not overlap;
//   - a pod or container that asked for nothing is never refused, and
//     stays in the node shared pool, outside every bubble.
//
// A failing sequence is rerun alone with -run 'TestProtocolModel/seed=N';
// -protocol.seed and -protocol.sequences pick other and more sequences.
func TestProtocolModel(t *testing.T) {
	n := *protocolSeqs
	if n <= 0 {
		n = 12
		if testing.Short() {
			n = 4
		}
	}
	for seed := *protocolSeed; seed < *protocolSeed+uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel() // the retries' backoff waits, not the CPU
			runProtocol(t, seed)
		})
	}
}

// fakeRuntime is the runtime's record of pods and containers: what the
// handlers' answers and the Sender's updates made of them. It fails a
// whole UpdateContainers call, or single updates in it, at random, never
// the same container more than maxFails times in a row, so that the
// Sender's retries (ten) always get through.
type fakeRuntime struct {
	mu    sync.Mutex
	rng   *rand.Rand
	fails map[string]int
	pods  map[string]*api.PodSandbox
	ctrs  map[string]*api.Container
	// calls and failed count UpdateContainers calls and failed updates.
	calls, failed int
}

const maxFails = 2

func newFakeRuntime(seed uint64) *fakeRuntime {
	return &fakeRuntime{
		rng:   rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		fails: map[string]int{},
		pods:  map[string]*api.PodSandbox{},
		ctrs:  map[string]*api.Container{},
	}
}

func (r *fakeRuntime) UpdateContainers(us []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	canFail := true
	for _, u := range us {
		canFail = canFail && r.fails[u.GetContainerId()] < maxFails
	}
	if canFail && r.rng.IntN(8) == 0 {
		for _, u := range us {
			r.fails[u.GetContainerId()]++
		}
		r.failed += len(us)
		return nil, errors.New("ttrpc: connection reset")
	}
	var failed []*api.ContainerUpdate
	for _, u := range us {
		id := u.GetContainerId()
		c, ok := r.ctrs[id]
		if ok && r.fails[id] < maxFails && r.rng.IntN(6) == 0 {
			ok = false
			r.fails[id]++
		}
		if !ok {
			failed = append(failed, u)
			r.failed++
			continue
		}
		r.fails[id] = 0
		applyCPU(c, u.GetLinux().GetResources().GetCpu())
	}
	return failed, nil
}

// apply is the runtime applying updates an event answered.
func (r *fakeRuntime) apply(us []*api.ContainerUpdate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range us {
		if c, ok := r.ctrs[u.GetContainerId()]; ok {
			applyCPU(c, u.GetLinux().GetResources().GetCpu())
		}
	}
}

// holds is what the runtime holds of a container's cpuset ("cpus/mems").
func (r *fakeRuntime) holds(id string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.ctrs[id]
	if !ok {
		return "", false
	}
	cpu := c.GetLinux().GetResources().GetCpu()
	return cpu.GetCpus() + "/" + cpu.GetMems(), true
}

func applyCPU(c *api.Container, cpu *api.LinuxCPU) {
	if cpu == nil {
		return
	}
	if c.Linux == nil {
		c.Linux = &api.LinuxContainer{}
	}
	if c.Linux.Resources == nil {
		c.Linux.Resources = &api.LinuxResources{}
	}
	if c.Linux.Resources.Cpu == nil {
		c.Linux.Resources.Cpu = &api.LinuxCPU{}
	}
	dst := c.Linux.Resources.Cpu
	if cpu.GetCpus() != "" {
		dst.Cpus = cpu.GetCpus()
	}
	if cpu.GetMems() != "" {
		dst.Mems = cpu.GetMems()
	}
	if cpu.GetQuota() != nil {
		dst.Quota = api.Int64(cpu.GetQuota().GetValue())
	}
	if cpu.GetPeriod() != nil {
		dst.Period = api.UInt64(cpu.GetPeriod().GetValue())
	}
}

// protoPod is the model's pod: whether it asked for nothing (no budget),
// and whether it was stopped.
type protoPod struct {
	pod     *api.PodSandbox
	plain   bool
	stopped bool
	ctrs    []string
}

// protoCtr is the model's container.
type protoCtr struct {
	pod     string
	ctr     *api.Container
	stopped bool
	// plain: it asked for nothing (no resources, in a pod without a
	// budget).
	plain bool
}

type protocol struct {
	t    *testing.T
	ctx  context.Context
	cfg  config.Config
	rng  *rand.Rand
	rt   *fakeRuntime
	p    *Plugin
	pods map[string]*protoPod
	ctrs map[string]*protoCtr
	next int
	log  []string
	// restarts, refused and exclusive count what a sequence exercised.
	restarts, refused, exclusive int
}

func runProtocol(t *testing.T, seed uint64) {
	m := &protocol{
		t: t, ctx: context.Background(), cfg: pinConfig(t),
		rng: rand.New(rand.NewPCG(seed, 1)), rt: newFakeRuntime(seed),
		pods: map[string]*protoPod{}, ctrs: map[string]*protoCtr{},
	}
	m.start()
	defer func() {
		if err := m.p.StopUpdates(m.ctx); err != nil {
			t.Error(err)
		}
	}()
	for step := range protocolSteps {
		ev := m.step()
		m.log = append(m.log, ev)
		m.p.WaitUpdates()
		if err := m.check(); err != nil {
			t.Fatalf("seed %d, step %d (%s): %v\nevents:\n  %s", seed, step, ev, err, strings.Join(m.log, "\n  "))
		}
	}
	m.rt.mu.Lock()
	defer m.rt.mu.Unlock()
	t.Logf("seed %d: %d events (%d restarts, %d refusals, %d exclusive containers), %d UpdateContainers calls, %d updates failed",
		seed, protocolSteps, m.restarts, m.refused, m.exclusive, m.rt.calls, m.rt.failed)
}

// start is a plugin (re)start: a new plugin configured by the runtime and
// synchronized with its pods and containers.
func (m *protocol) start() {
	m.t.Helper()
	if m.p != nil {
		if err := m.p.StopUpdates(m.ctx); err != nil {
			m.t.Fatal(err)
		}
	}
	p, err := New(m.cfg, slog.New(slog.DiscardHandler), WithUpdateHold(0))
	if err != nil {
		m.t.Fatal(err)
	}
	p.SetUpdater(m.rt)
	if _, err := p.Configure(m.ctx, "", "containerd", "v2.1.0"); err != nil {
		m.t.Fatal(err)
	}
	m.p = p
	m.rt.mu.Lock()
	pods := make([]*api.PodSandbox, 0, len(m.rt.pods))
	for _, id := range slices.Sorted(maps.Keys(m.rt.pods)) {
		pods = append(pods, m.rt.pods[id])
	}
	ctrs := make([]*api.Container, 0, len(m.rt.ctrs))
	for _, id := range slices.Sorted(maps.Keys(m.rt.ctrs)) {
		ctrs = append(ctrs, m.rt.ctrs[id])
	}
	m.rt.mu.Unlock()
	upd, err := p.Synchronize(m.ctx, pods, ctrs)
	if err != nil {
		m.t.Fatalf("Synchronize: %v", err)
	}
	m.rt.apply(upd)
}

// step sends one random event and says which.
func (m *protocol) step() string {
	running := m.podIDs(func(p *protoPod) bool { return !p.stopped })
	live := m.ctrIDs(func(c *protoCtr) bool { return !c.stopped })
	switch k := m.rng.IntN(20); {
	case k < 4 || len(running) == 0:
		return m.runPod()
	case k < 10:
		return m.createContainer(running[m.rng.IntN(len(running))])
	case k < 11 && len(live) > 0:
		return m.updateContainer(live[m.rng.IntN(len(live))])
	case k < 13 && len(live) > 0:
		return m.stopContainer(live[m.rng.IntN(len(live))])
	case k < 15 && len(m.ctrs) > 0:
		all := m.ctrIDs(func(*protoCtr) bool { return true })
		return m.removeContainer(all[m.rng.IntN(len(all))])
	case k < 17:
		return m.removePod(running[m.rng.IntN(len(running))], m.rng.IntN(2) == 0)
	case k < 18:
		m.restarts++
		m.start()
		return "restart, Synchronize"
	default:
		return m.runPod()
	}
}

func (m *protocol) podIDs(keep func(*protoPod) bool) []string {
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(m.pods)) {
		if keep(m.pods[id]) {
			ids = append(ids, id)
		}
	}
	return ids
}

func (m *protocol) ctrIDs(keep func(*protoCtr) bool) []string {
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(m.ctrs)) {
		if keep(m.ctrs[id]) {
			ids = append(ids, id)
		}
	}
	return ids
}

func (m *protocol) runPod() string {
	m.next++
	id := fmt.Sprintf("pod%d", m.next)
	pod := &api.PodSandbox{Id: id, Uid: "uid-" + id, Name: id, Namespace: "default", Linux: &api.LinuxPodSandbox{}}
	plain := m.rng.IntN(2) == 0
	desc := "plain"
	if plain {
		pod.Linux.CgroupParent = "/kubepods/besteffort/pod" + id
	} else {
		cpus := 2 + m.rng.IntN(4)
		pod.Linux.CgroupParent = "/kubepods/pod" + id
		pod.Linux.PodResources = &api.LinuxResources{
			Cpu:    &api.LinuxCPU{Quota: api.Int64(int64(cpus) * 100000), Period: api.UInt64(100000), Shares: api.UInt64(uint64(cpus) * 1024)},
			Memory: &api.LinuxMemory{Limit: api.Int64(1 << 30)},
		}
		desc = fmt.Sprintf("budget of %d cpus", cpus)
	}
	if err := m.p.RunPodSandbox(m.ctx, pod); err != nil {
		if plain {
			m.t.Fatalf("RunPodSandbox %s (asked for nothing) refused: %v", id, err)
		}
		m.refused++
		return fmt.Sprintf("RunPodSandbox %s (%s): refused", id, desc)
	}
	m.pods[id] = &protoPod{pod: pod, plain: plain}
	m.rt.mu.Lock()
	m.rt.pods[id] = pod
	m.rt.mu.Unlock()
	return fmt.Sprintf("RunPodSandbox %s (%s)", id, desc)
}

func (m *protocol) createContainer(podID string) string {
	pp := m.pods[podID]
	m.next++
	id := fmt.Sprintf("ctr%d", m.next)
	ctr := &api.Container{
		Id: id, PodSandboxId: podID, Name: fmt.Sprintf("app%d", len(pp.ctrs)),
		State:  api.ContainerState_CONTAINER_CREATED,
		Linux:  &api.LinuxContainer{},
		Labels: map[string]string{},
	}
	desc := "asking for nothing"
	plain := pp.plain
	if !pp.plain && m.rng.IntN(2) == 0 {
		cpus := 1 + m.rng.IntN(2)
		ctr.Linux.Resources = &api.LinuxResources{
			Cpu:    &api.LinuxCPU{Quota: api.Int64(int64(cpus) * 100000), Period: api.UInt64(100000), Shares: api.UInt64(uint64(cpus) * 1024)},
			Memory: &api.LinuxMemory{Limit: api.Int64(256 << 20)},
		}
		desc = fmt.Sprintf("%d whole cpus", cpus)
	}
	adj, upd, err := m.p.CreateContainer(m.ctx, pp.pod, ctr)
	if err != nil {
		if plain {
			m.t.Fatalf("CreateContainer %s in %s (asked for nothing) refused: %v", id, podID, err)
		}
		m.refused++
		return fmt.Sprintf("CreateContainer %s in %s (%s): refused", id, podID, desc)
	}
	// The runtime creates the container with the adjustment, applies the
	// other updates, and starts it (StartContainer: no handler).
	applyCPU(ctr, adj.GetLinux().GetResources().GetCpu())
	if len(adj.GetAnnotations()) > 0 {
		ctr.Annotations = map[string]string{}
		for k, v := range adj.GetAnnotations() {
			ctr.Annotations[strings.TrimPrefix(k, "+")] = v
		}
	}
	ctr.State = api.ContainerState_CONTAINER_RUNNING
	m.rt.mu.Lock()
	m.rt.ctrs[id] = ctr
	m.rt.mu.Unlock()
	m.rt.apply(upd)
	pp.ctrs = append(pp.ctrs, id)
	m.ctrs[id] = &protoCtr{pod: podID, ctr: ctr, plain: plain}
	if a, ok := m.p.pin.Load().Assignment(id); ok && a.Pool == policy.PoolExclusive {
		m.exclusive++
	}
	return fmt.Sprintf("CreateContainer %s in %s (%s), StartContainer, %d updates", id, podID, desc, len(upd))
}

// updateContainer is an UpdateContainer with the container's resources as
// they are (the kubelet's resize that changes nothing).
func (m *protocol) updateContainer(id string) string {
	c := m.ctrs[id]
	m.rt.mu.Lock()
	res := c.ctr.GetLinux().GetResources()
	m.rt.mu.Unlock()
	upd, err := m.p.UpdateContainer(m.ctx, m.pods[c.pod].pod, c.ctr, res)
	if err != nil {
		if c.plain {
			m.t.Fatalf("UpdateContainer %s (asked for nothing) refused: %v", id, err)
		}
		m.refused++
		return fmt.Sprintf("UpdateContainer %s: refused", id)
	}
	m.rt.apply(upd)
	return fmt.Sprintf("UpdateContainer %s, %d updates", id, len(upd))
}

func (m *protocol) stopContainer(id string) string {
	c := m.ctrs[id]
	upd, err := m.p.StopContainer(m.ctx, m.pods[c.pod].pod, c.ctr)
	if err != nil {
		m.t.Fatalf("StopContainer %s: %v", id, err)
	}
	c.stopped = true
	m.rt.mu.Lock()
	c.ctr.State = api.ContainerState_CONTAINER_STOPPED
	m.rt.mu.Unlock()
	m.rt.apply(upd)
	return fmt.Sprintf("StopContainer %s, %d updates", id, len(upd))
}

func (m *protocol) removeContainer(id string) string {
	c := m.ctrs[id]
	if err := m.p.RemoveContainer(m.ctx, m.pods[c.pod].pod, c.ctr); err != nil {
		m.t.Fatalf("RemoveContainer %s: %v", id, err)
	}
	m.rt.mu.Lock()
	delete(m.rt.ctrs, id)
	delete(m.rt.fails, id)
	m.rt.mu.Unlock()
	delete(m.ctrs, id)
	pp := m.pods[c.pod]
	pp.ctrs = slices.DeleteFunc(pp.ctrs, func(s string) bool { return s == id })
	how := "without a stop"
	if c.stopped {
		how = "stopped"
	}
	return fmt.Sprintf("RemoveContainer %s (%s)", id, how)
}

// removePod is the kubelet's end of a pod: its containers stopped, the
// sandbox stopped, containers and sandbox removed; or, when !graceful,
// the sandbox removed with its containers without any stop.
func (m *protocol) removePod(id string, graceful bool) string {
	pp := m.pods[id]
	if graceful {
		for _, cid := range slices.Clone(pp.ctrs) {
			if !m.ctrs[cid].stopped {
				m.stopContainer(cid)
			}
		}
		if err := m.p.StopPodSandbox(m.ctx, pp.pod); err != nil {
			m.t.Fatalf("StopPodSandbox %s: %v", id, err)
		}
		pp.stopped = true
	}
	for _, cid := range slices.Clone(pp.ctrs) {
		m.removeContainer(cid)
	}
	if err := m.p.RemovePodSandbox(m.ctx, pp.pod); err != nil {
		m.t.Fatalf("RemovePodSandbox %s: %v", id, err)
	}
	m.rt.mu.Lock()
	delete(m.rt.pods, id)
	m.rt.mu.Unlock()
	delete(m.pods, id)
	if graceful {
		return fmt.Sprintf("StopContainer of each, StopPodSandbox, RemoveContainer of each, RemovePodSandbox %s", id)
	}
	return fmt.Sprintf("RemoveContainer of each, RemovePodSandbox %s (no stops)", id)
}

// check compares, with the Sender idle, the plugin's state with the
// model's and the runtime's; every disagreement is listed.
func (m *protocol) check() error {
	var errs []error
	pn := m.p.pin.Load()
	if !pn.Active() {
		return errors.New("pinning is not active")
	}
	as := map[string]policy.Assignment{}
	for _, id := range slices.Sorted(maps.Keys(m.ctrs)) {
		c := m.ctrs[id]
		a, ok := pn.Assignment(id)
		switch {
		case ok && c.stopped:
			errs = append(errs, fmt.Errorf("%s: stopped, still placed on %s", id, a.CPUs))
			continue
		case !ok && !c.stopped:
			errs = append(errs, fmt.Errorf("%s: running, not placed", id))
			continue
		case !ok:
			continue
		}
		as[id] = a
		if got, _ := m.rt.holds(id); got != a.CPUs.String()+"/"+a.Mems.String() {
			errs = append(errs, fmt.Errorf("%s: the runtime holds cpus/mems %s, the assignment is %s/%s", id, got, a.CPUs, a.Mems))
		}
		if c.plain && a.Pool != policy.PoolNodeShared {
			errs = append(errs, fmt.Errorf("%s asked for nothing and is in pool %s, want %s", id, a.Pool, policy.PoolNodeShared))
		}
		// A container of a budget pod is in its bubble, but for one without
		// CPUs of its own that found the pod's shared pool empty: that one
		// runs in the node shared pool (docs/cpu-pinning.md).
		if !m.pods[c.pod].plain && a.Pool != policy.PoolNodeShared && (a.Bubble.IsEmpty() || !a.CPUs.IsSubsetOf(a.Bubble)) {
			errs = append(errs, fmt.Errorf("%s: cpus %s not within its pod's bubble %q", id, a.CPUs, a.Bubble))
		}
	}
	errs = append(errs, m.checkLedger()...)
	errs = append(errs, checkExclusive(as)...)
	return errors.Join(errs...)
}

// checkLedger: the Sender's ledger names only containers the runtime has,
// each with what the runtime holds.
func (m *protocol) checkLedger() []error {
	var errs []error
	known := m.p.send.Known()
	for _, id := range slices.Sorted(maps.Keys(known)) {
		got, ok := m.rt.holds(id)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("ledger: %s records %s for a container the runtime removed", id, known[id]))
		case got != known[id]:
			errs = append(errs, fmt.Errorf("ledger: %s records %s, the runtime holds %s", id, known[id], got))
		}
	}
	return errs
}

// checkExclusive: an exclusive container's CPUs are in no other
// container's cpuset, and two pods' bubbles do not overlap.
func checkExclusive(as map[string]policy.Assignment) []error {
	var errs []error
	ids := slices.Sorted(maps.Keys(as))
	for i, x := range ids {
		for _, y := range ids[i+1:] {
			a, b := as[x], as[y]
			if (a.Pool == policy.PoolExclusive || b.Pool == policy.PoolExclusive) && !a.CPUs.Intersection(b.CPUs).IsEmpty() {
				errs = append(errs, fmt.Errorf("%s (%s, %s) and %s (%s, %s) share cpus %s",
					x, a.Pool, a.CPUs, y, b.Pool, b.CPUs, a.CPUs.Intersection(b.CPUs)))
			}
			if a.PodID != b.PodID && !a.Bubble.Intersection(b.Bubble).IsEmpty() {
				errs = append(errs, fmt.Errorf("pods of %s and %s have overlapping bubbles %s and %s", x, y, a.Bubble, b.Bubble))
			}
			if a.Pool == policy.PoolNodeShared && !b.Bubble.IsEmpty() && !a.CPUs.Intersection(b.Bubble).IsEmpty() {
				errs = append(errs, fmt.Errorf("%s in the node shared pool (%s) overlaps %s's bubble %s", x, a.CPUs, y, b.Bubble))
			}
			if b.Pool == policy.PoolNodeShared && !a.Bubble.IsEmpty() && !b.CPUs.Intersection(a.Bubble).IsEmpty() {
				errs = append(errs, fmt.Errorf("%s in the node shared pool (%s) overlaps %s's bubble %s", y, b.CPUs, x, a.Bubble))
			}
		}
	}
	return errs
}
