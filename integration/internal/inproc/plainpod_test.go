package inproc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// TestPlainPodProperty: a pod that asked for nothing (no annotation, no
// pod-level resources; Burstable or BestEffort, as most pods are) is never
// refused and never changed beyond its documented node-shared-pool cpuset,
// memory nodes and assignment stamp, with cpuPinning off or on, through
// every NRI event the plugin subscribes to (RunPodSandbox, CreateContainer,
// UpdatePodSandbox, UpdateContainer, StopContainer, RemoveContainer,
// StopPodSandbox, RemovePodSandbox, Synchronize after a restart), while
// pinned pods come and go beside it. The values are the kubelet's: shares
// and quotas from random, not round, requests and limits; no CPU limit as
// a nil or a zero quota; pod resources as the sum of the containers'; on
// an in-place resize the kubelet's sequence (v1.37 doPodResizeAction): the
// pod's update with its CPU request read back through cpu.weight and its
// memory limit read back from memory.max, then the exact request, then
// the container. Writable pods come and go too, under a node budget of
// delegated cgroups that holds one of them (nodeMaxDelegatedCgroups at the
// node cap), so the others are refused beside the plain pods; the live one
// churns cgroups, and its bound follows its cap less its dying cgroups,
// while no plain pod's bound is ever written.
func TestPlainPodProperty(t *testing.T) {
	for _, pinning := range []bool{false, true} {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("cpuPinning=%v/seed=%d", pinning, seed), func(t *testing.T) {
				e := setupPinning(t, func(c *config.Config) {
					c.CPUPinning = pinning
					c.ReservedCPUs = "0"
					c.NodeMaxDelegatedCgroups = c.MaxDescendants
				})
				w := &plainWorld{e: e, rng: rand.New(rand.NewPCG(seed, 22)), pinning: pinning, plain: map[string]*plainPod{}}
				for step := range 250 {
					w.step(t, step)
					if t.Failed() {
						t.Fatalf("stopped at step %d (seed %d)", step, seed)
					}
				}
			})
		}
	}
}

// plainCtr is one container of a plain pod: its requests and limits.
type plainCtr struct {
	ctr *api.Container
	// request and limit are millicores (0: none); memory is bytes (0: none).
	request, limit, memory int64
}

type plainPod struct {
	pod  *api.PodSandbox
	ctrs []*plainCtr
}

type plainWorld struct {
	e       *pinEnv
	rng     *rand.Rand
	pinning bool
	plain   map[string]*plainPod
	pinned  []*api.PodSandbox
	// writable is the live writable pod, nil when there is none.
	writable *api.PodSandbox
	n        int
}

func (w *plainWorld) step(t *testing.T, step int) {
	ctx := context.Background()
	switch r := w.rng.IntN(100); {
	case r < 25 || len(w.plain) == 0:
		w.runPlain(t)
	case r < 45:
		w.resize(t, ctx)
	case r < 55:
		w.debugContainer(t)
	case r < 65:
		w.removeContainer(t, ctx)
	case r < 75:
		w.removePlain(t, ctx)
	case r < 81:
		w.runPinned(t)
	case r < 87:
		w.runWritable(t, ctx)
	case r < 95:
		w.removePinned(t, ctx)
	default:
		w.e.stub.Stop()
		for _, u := range w.e.connect() {
			w.checkUpdate(t, "Synchronize", u)
		}
	}
	if w.writable != nil && w.rng.IntN(3) == 0 {
		w.churn(t)
	}
	w.checkAsync(t)
	w.checkCPUs(t, step)
}

// churn gives the live writable pod dying cgroups, as a container that
// churns memory cgroups leaves them, and lets the plugin tighten: the
// writable pod's bound follows its cap less them, and no plain pod's
// cgroup.max.descendants is written.
func (w *plainWorld) churn(t *testing.T) {
	t.Helper()
	limit := w.e.p.Config().MaxDescendants
	dying := w.rng.IntN(2 * limit)
	parent := w.writable.GetLinux().GetCgroupParent()
	if err := w.e.host.WriteFile(w.e.host.Path(parent+"/cgroup.stat"), fmt.Sprintf("nr_descendants 2\nnr_dying_descendants %d\n", dying)); err != nil {
		t.Fatal(err)
	}
	w.e.p.TightenBounds()
	if got, want := w.readBound(t, parent), strconv.Itoa(max(limit-dying, 0)); got != want {
		t.Errorf("writable pod %s with %d dying cgroups: cgroup.max.descendants %s, want %s", w.writable.GetName(), dying, got, want)
	}
	for _, pp := range w.plain {
		if got := w.readBound(t, pp.pod.GetLinux().GetCgroupParent()); got != "max" {
			t.Errorf("plain pod %s: cgroup.max.descendants %s, want max (never written)", pp.pod.GetName(), got)
		}
	}
}

func (w *plainWorld) readBound(t *testing.T, parent string) string {
	t.Helper()
	got, err := w.e.host.ReadPodFile(parent, "cgroup.max.descendants")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (w *plainWorld) id() string {
	w.n++
	return fmt.Sprintf("%d", w.n)
}

// randomCtr draws a Burstable or BestEffort container's resources.
func (w *plainWorld) randomCtr() *plainCtr {
	if w.rng.IntN(4) == 0 {
		return &plainCtr{} // BestEffort
	}
	c := &plainCtr{request: 1 + w.rng.Int64N(3999)}
	if w.rng.IntN(2) == 0 {
		// Burstable: a limit above the request (equal would be
		// Guaranteed CPU; the memory request, which NRI never sees, keeps
		// such a pod Burstable, and the next case has it).
		c.limit = c.request + 1 + w.rng.Int64N(4000)
	} else if w.rng.IntN(3) == 0 {
		c.request = 1000 * (1 + w.rng.Int64N(3)) // request = limit, whole cpus
		c.limit = c.request
	}
	if w.rng.IntN(3) > 0 {
		c.memory = 16<<20 + w.rng.Int64N(1<<30) // any byte count
	}
	return c
}

// kubeletResources is what the kubelet sends for a container's resources,
// with "none" as a nil or a zero field at random.
func (w *plainWorld) kubeletResources(request, limit, memory int64) *api.LinuxResources {
	r := LinuxResources(request, limit, memory)
	if limit == 0 && w.rng.IntN(2) == 0 {
		r.Cpu.Quota = api.Int64(0)
	}
	if memory == 0 && w.rng.IntN(2) == 0 {
		r.Memory = &api.LinuxMemory{Limit: api.Int64(0)}
	}
	return r
}

// oomScoreAdj is the kubelet's score for a container of a Burstable (2 to
// 999) or BestEffort (1000) pod.
func (w *plainWorld) oomScoreAdj(bestEffort bool) *api.OptionalInt {
	if bestEffort {
		return &api.OptionalInt{Value: 1000}
	}
	return &api.OptionalInt{Value: 2 + w.rng.Int64N(998)}
}

// podResources is the kubelet's pod sandbox resources for containers cs
// (calculateSandboxResources): the sum of the requests, the sum of the
// limits when every container has one.
func podResources(cs []*plainCtr) (request, limit, memory int64) {
	allCPU, allMem := true, true
	for _, c := range cs {
		request += c.request
		limit += c.limit
		memory += c.memory
		allCPU = allCPU && c.limit > 0
		allMem = allMem && c.memory > 0
	}
	if !allCPU {
		limit = 0
	}
	if !allMem {
		memory = 0
	}
	return request, limit, memory
}

func bestEffort(cs []*plainCtr) bool {
	return !slices.ContainsFunc(cs, func(c *plainCtr) bool { return c.request > 0 || c.limit > 0 || c.memory > 0 })
}

func (w *plainWorld) runPlain(t *testing.T) {
	t.Helper()
	uid := "plain" + w.id()
	qos := "burstable"
	ctrs := make([]*plainCtr, 1+w.rng.IntN(3))
	for i := range ctrs {
		ctrs[i] = w.randomCtr()
	}
	// A pod whose every container reads as Guaranteed stays Burstable too:
	// its memory request, which NRI never carries, is below its limit.
	if bestEffort(ctrs) {
		qos = "besteffort"
	}
	parent := "/kubepods/" + qos + "/pod" + uid
	pod := Pod("plain-"+uid, uid, parent, nil)
	if err := w.e.host.AddPodCgroup(parent); err != nil {
		t.Fatal(err)
	}
	req, lim, mem := podResources(ctrs)
	pod.Linux.PodResources = w.kubeletResources(req, lim, mem)
	if err := w.e.runPod(pod); err != nil {
		t.Errorf("RunPodSandbox of plain pod %s (%s): %v", uid, pod.Linux.PodResources, err)
		return
	}
	pp := &plainPod{pod: pod}
	w.plain[pod.Id] = pp
	for i, c := range ctrs {
		c.ctr = Container(pod, fmt.Sprintf("c%d", i))
		c.ctr.Linux.Resources = w.kubeletResources(c.request, c.limit, c.memory)
		c.ctr.Linux.OomScoreAdj = w.oomScoreAdj(qos == "besteffort")
		w.create(t, pp, c)
	}
}

func (w *plainWorld) create(t *testing.T, pp *plainPod, c *plainCtr) {
	t.Helper()
	resp, err := w.e.create(pp.pod, c.ctr)
	if err != nil {
		t.Errorf("CreateContainer %s in plain pod: %v", c.ctr.Name, err)
		return
	}
	pp.ctrs = append(pp.ctrs, c)
	adj := proto.Clone(resp.GetAdjust()).(*api.ContainerAdjustment)
	if adj == nil {
		adj = &api.ContainerAdjustment{}
	}
	if w.pinning {
		if cpu := adj.GetLinux().GetResources().GetCpu(); cpu != nil {
			cpu.Cpus, cpu.Mems = "", ""
		}
		delete(adj.Annotations, policy.StampAnnotation)
	}
	if !isEmpty(adj.ProtoReflect()) {
		t.Errorf("CreateContainer %s of a plain pod: adjustment beyond the node shared pool: %v", c.ctr.Name, resp.GetAdjust())
	}
	for _, u := range resp.GetUpdate() {
		w.checkUpdate(t, "CreateContainer", u)
	}
}

// debugContainer adds a container without resources to a running plain
// pod, as `kubectl debug` adds an ephemeral one.
func (w *plainWorld) debugContainer(t *testing.T) {
	pp := w.pickPlain()
	if pp == nil {
		return
	}
	c := &plainCtr{ctr: Container(pp.pod, "debugger-"+w.id())}
	c.ctr.Linux.Resources = w.kubeletResources(0, 0, 0)
	c.ctr.Linux.OomScoreAdj = w.oomScoreAdj(bestEffort(pp.ctrs))
	w.create(t, pp, c)
}

// resize resizes a Burstable container of a plain pod in place, as the
// kubelet does it (see TestPlainPodProperty).
func (w *plainWorld) resize(t *testing.T, ctx context.Context) {
	pp := w.pickPlain()
	if pp == nil || bestEffort(pp.ctrs) {
		return
	}
	var c *plainCtr
	for _, i := range w.rng.Perm(len(pp.ctrs)) {
		if x := pp.ctrs[i]; x.request > 0 || x.limit > 0 || x.memory > 0 {
			c = x
			break
		}
	}
	if c == nil {
		return
	}
	next := w.randomCtr()
	if next.request == 0 && next.limit == 0 && next.memory == 0 {
		next.request = 100 // a resize keeps the pod's QoS class
	}
	old := *c
	c.request, c.limit, c.memory = next.request, next.limit, next.memory
	req, lim, mem := podResources(pp.ctrs)
	oldReq, oldLim, oldMem := podResources(append(slices.DeleteFunc(slices.Clone(pp.ctrs), func(x *plainCtr) bool { return x == c }), &old))

	// The kubelet's steps (v1.37 doPodResizeAction): it reads the pod
	// cgroup once (the CPU request back through cpu.weight, the memory
	// limit rounded down to a page, -1 for none), then changes memory,
	// then CPU (limit up, request up, the containers, request down, limit
	// down), sending the pod's resources after each step. Limit 0 is no
	// limit: above any other.
	cur := struct {
		shares     uint64
		limit, mem int64
	}{readBackShares(oldReq), oldLim, oldMem / 4096 * 4096}
	send := func(what string) {
		res := w.kubeletResources(0, cur.limit, 0)
		res.Cpu.Shares = api.UInt64(cur.shares)
		res.Memory = &api.LinuxMemory{Limit: api.Int64(cur.mem)}
		if cur.mem == 0 {
			res.Memory.Limit = api.Int64(-1)
		}
		if err := w.e.rt.UpdatePodSandbox(ctx, pp.pod, res); err != nil {
			t.Errorf("UpdatePodSandbox (%s) of plain pod %s to %v: %v", what, pp.pod.Id, res, err)
		}
	}
	above := func(a, b int64) bool { return a != b && (a == 0 || b != 0 && a > b) }
	shares := max(uint64(req)*1024/1000, 2)
	if mem != oldMem {
		cur.mem = mem
		send("memory")
	}
	if above(lim, cur.limit) {
		cur.limit = lim
		send("cpu limit up")
	}
	if shares > cur.shares {
		cur.shares = shares
		send("cpu request up")
	}
	defer func() {
		if shares < cur.shares {
			cur.shares = shares
			send("cpu request down")
		}
		if above(cur.limit, lim) {
			cur.limit = lim
			send("cpu limit down")
		}
	}()
	want := w.kubeletResources(c.request, c.limit, c.memory)
	resp, err := w.e.rt.UpdateContainer(ctx, pp.pod, w.e.node.ctrs[c.ctr.Id], want)
	if err != nil {
		t.Errorf("UpdateContainer %s of a plain pod from %d/%d/%d to %v: %v", c.ctr.Id, old.request, old.limit, old.memory, want, err)
		return
	}
	for _, u := range resp.GetUpdate() {
		if u.GetContainerId() != c.ctr.Id {
			w.checkUpdate(t, "UpdateContainer", u)
			continue
		}
		// The runtime merges the plugin's answer into the resize: the
		// kubelet's values must come through unchanged.
		got := u.GetLinux().GetResources()
		if got.GetCpu().GetShares().GetValue() != want.GetCpu().GetShares().GetValue() ||
			got.GetCpu().GetQuota().GetValue() != want.GetCpu().GetQuota().GetValue() ||
			got.GetMemory().GetLimit().GetValue() != want.GetMemory().GetLimit().GetValue() {
			t.Errorf("UpdateContainer %s: the resize became %v, want %v", c.ctr.Id, got, want)
		}
		w.checkCPUSet(t, "UpdateContainer", c.ctr.Id, got.GetCpu())
	}
	mc := w.e.node.ctrs[c.ctr.Id]
	cpus, mems := mc.GetLinux().GetResources().GetCpu().GetCpus(), mc.GetLinux().GetResources().GetCpu().GetMems()
	mc.Linux.Resources = want
	cpuOf(mc).Cpus, cpuOf(mc).Mems = cpus, mems
	w.e.node.update(resp.GetUpdate())
}

func (w *plainWorld) removeContainer(t *testing.T, ctx context.Context) {
	pp := w.pickPlain()
	if pp == nil || len(pp.ctrs) == 0 {
		return
	}
	i := w.rng.IntN(len(pp.ctrs))
	c := pp.ctrs[i]
	pp.ctrs = slices.Delete(pp.ctrs, i, i+1)
	w.stopRemove(t, ctx, pp.pod, c.ctr)
}

// stopRemove is pinEnv.stopRemove with the answers checked.
func (w *plainWorld) stopRemove(t *testing.T, ctx context.Context, pod *api.PodSandbox, ctr *api.Container) {
	t.Helper()
	cur := w.e.node.ctrs[ctr.Id]
	cur.State = api.ContainerState_CONTAINER_STOPPED
	resp, err := w.e.rt.StopContainer(ctx, pod, cur)
	if err != nil {
		t.Errorf("StopContainer %s: %v", ctr.Id, err)
	}
	for _, u := range resp.GetUpdate() {
		w.checkUpdate(t, "StopContainer", u)
	}
	w.e.node.update(resp.GetUpdate())
	if err := w.e.rt.RemoveContainer(ctx, pod, cur); err != nil {
		t.Errorf("RemoveContainer %s: %v", ctr.Id, err)
	}
	w.e.node.remove(ctr.Id)
}

func (w *plainWorld) removePlain(t *testing.T, ctx context.Context) {
	pp := w.pickPlain()
	if pp == nil {
		return
	}
	for _, c := range pp.ctrs {
		w.stopRemove(t, ctx, pp.pod, c.ctr)
	}
	if err := w.e.rt.StopPod(ctx, pp.pod); err != nil {
		t.Errorf("StopPodSandbox of plain pod %s: %v", pp.pod.Id, err)
	}
	w.checkAsync(t)
	if err := w.e.rt.RemovePod(ctx, pp.pod); err != nil {
		t.Errorf("RemovePodSandbox of plain pod %s: %v", pp.pod.Id, err)
	}
	w.e.node.removePod(pp.pod.Id)
	delete(w.plain, pp.pod.Id)
}

// runPinned adds a pod with a Guaranteed budget of 1 to 3 CPUs and one
// shared container, which shrinks the node shared pool; it may not fit.
func (w *plainWorld) runPinned(t *testing.T) {
	uid := "pinned" + w.id()
	pod := budgetPod("pinned-"+uid, uid, 1+w.rng.Int64N(3))
	if err := w.e.runPod(pod); err != nil {
		return // no room: not a plain pod's business
	}
	ctr := Container(pod, "s", WithResources(100, 0, 0))
	if _, err := w.e.create(pod, ctr); err != nil {
		t.Fatalf("shared container of pinned pod %s: %v", uid, err)
	}
	w.pinned = append(w.pinned, pod)
}

// runWritable asks for a writable pod. With none live it is admitted; with
// one live the budget refuses it (node_budget), and then the live one is
// removed, so the next is admitted again. After a Synchronize the plugin
// knows the live one from its container's mounts.
func (w *plainWorld) runWritable(t *testing.T, ctx context.Context) {
	uid := "writable" + w.id()
	parent := "/kubepods/burstable/pod" + uid
	if err := w.e.host.AddPodCgroup(parent); err != nil {
		t.Fatal(err)
	}
	pod := Pod("writable-"+uid, uid, parent, map[string]string{annotations.WritableCgroups.Name: "true"})
	if err := w.e.runPod(pod); err != nil {
		t.Errorf("RunPodSandbox of writable pod %s: %v", uid, err)
		return
	}
	_, err := w.e.create(pod, Container(pod, "w"))
	switch {
	case w.writable == nil && err != nil:
		t.Errorf("writable pod %s with no other live: %v", uid, err)
	case w.writable != nil && err == nil:
		t.Errorf("writable pod %s admitted beside %s past a budget for one", uid, w.writable.GetName())
	case err != nil && !strings.Contains(err.Error(), "nodeMaxDelegatedCgroups"):
		t.Errorf("writable pod %s refused for another reason: %v", uid, err)
	}
	w.checkAsync(t)
	if err == nil {
		w.writable = pod
		return
	}
	for _, p := range []*api.PodSandbox{pod, w.writable} {
		if c := w.e.node.ctrs[p.Id+"-w"]; c != nil {
			w.stopRemove(t, ctx, p, c)
		}
		if err := w.e.rt.StopPod(ctx, p); err != nil {
			t.Errorf("StopPodSandbox of writable pod %s: %v", p.Id, err)
		}
		if err := w.e.rt.RemovePod(ctx, p); err != nil {
			t.Errorf("RemovePodSandbox of writable pod %s: %v", p.Id, err)
		}
		w.e.node.removePod(p.Id)
	}
	w.writable = nil
}

func (w *plainWorld) removePinned(t *testing.T, ctx context.Context) {
	if len(w.pinned) == 0 {
		return
	}
	i := w.rng.IntN(len(w.pinned))
	pod := w.pinned[i]
	w.pinned = slices.Delete(w.pinned, i, i+1)
	w.stopRemove(t, ctx, pod, w.e.node.ctrs[pod.Id+"-s"])
	if err := w.e.rt.StopPod(ctx, pod); err != nil {
		t.Errorf("StopPodSandbox of pinned pod %s: %v", pod.Id, err)
	}
	if err := w.e.rt.RemovePod(ctx, pod); err != nil {
		t.Errorf("RemovePodSandbox of pinned pod %s: %v", pod.Id, err)
	}
	w.e.node.removePod(pod.Id)
}

func (w *plainWorld) pickPlain() *plainPod {
	if len(w.plain) == 0 {
		return nil
	}
	ids := make([]string, 0, len(w.plain))
	for id := range w.plain {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return w.plain[ids[w.rng.IntN(len(ids))]]
}

// isPlain reports whether id is a container of a plain pod.
func (w *plainWorld) isPlain(id string) bool {
	c, ok := w.e.node.ctrs[id]
	return ok && w.plain[c.PodSandboxId] != nil
}

// checkAsync applies the plugin's unsolicited updates and checks those for
// plain containers.
func (w *plainWorld) checkAsync(t *testing.T) {
	t.Helper()
	for _, batch := range w.e.applyAsync() {
		for _, u := range batch {
			w.checkUpdate(t, "UpdateContainers", u)
		}
	}
}

// checkUpdate checks an update the plugin sent for another container: for
// a plain one, nothing but the node shared pool's cpus and memory nodes.
func (w *plainWorld) checkUpdate(t *testing.T, event string, u *api.ContainerUpdate) {
	t.Helper()
	if !w.isPlain(u.GetContainerId()) {
		return
	}
	if !w.pinning {
		t.Errorf("%s: update for plain container %s with cpuPinning off: %v", event, u.GetContainerId(), u)
		return
	}
	rest := proto.Clone(u).(*api.ContainerUpdate)
	rest.ContainerId, rest.IgnoreFailure = "", false
	if cpu := rest.GetLinux().GetResources().GetCpu(); cpu != nil {
		cpu.Cpus, cpu.Mems = "", ""
	}
	if !isEmpty(rest.ProtoReflect()) {
		t.Errorf("%s: update for plain container %s beyond its cpuset: %v", event, u.GetContainerId(), u)
	}
	w.checkCPUSet(t, event, u.GetContainerId(), u.GetLinux().GetResources().GetCpu())
}

// checkCPUSet checks cpus and mems the plugin gave a plain container: the
// node shared pool (every CPU outside the pinned pods' bubbles) and every
// memory node.
func (w *plainWorld) checkCPUSet(t *testing.T, event, id string, cpu *api.LinuxCPU) {
	t.Helper()
	if !w.pinning {
		if cpu.GetCpus() != "" || cpu.GetMems() != "" {
			t.Errorf("%s: plain container %s got cpus %q mems %q with cpuPinning off", event, id, cpu.GetCpus(), cpu.GetMems())
		}
		return
	}
	if want := w.nodePool(t); cpu.GetCpus() != want.String() || cpu.GetMems() != "0-1" {
		t.Errorf("%s: plain container %s got cpus %q mems %q, want the node shared pool %s and mems 0-1",
			event, id, cpu.GetCpus(), cpu.GetMems(), want)
	}
}

// nodePool is every CPU outside the running pinned pods' bubbles.
func (w *plainWorld) nodePool(t *testing.T) cpuset.CPUSet {
	t.Helper()
	pool := cpuset.New()
	for i := range 16 {
		pool = pool.Union(cpuset.New(i))
	}
	for _, pod := range w.pinned {
		pool = pool.Difference(w.e.node.stamp(t, pod.Id+"-s").Bubble)
	}
	return pool
}

// checkCPUs checks every running plain container's cpuset in the model
// after the step's updates.
func (w *plainWorld) checkCPUs(t *testing.T, step int) {
	t.Helper()
	for _, pp := range w.plain {
		for _, c := range pp.ctrs {
			w.checkCPUSet(t, fmt.Sprintf("after step %d", step), c.ctr.Id, w.e.node.ctrs[c.ctr.Id].GetLinux().GetResources().GetCpu())
		}
	}
}

// readBackShares is the kubelet's read-back of a pod cgroup's CPU request
// on cgroup v2 (v1.37): shares to cpu.weight and back.
func readBackShares(milli int64) uint64 {
	shares := max(uint64(milli)*1024/1000, 2)
	weight := 1 + (shares-2)*9999/262142
	return (weight-1)*262142/9999 + 2
}

// isEmpty reports whether m sets nothing but empty messages.
func isEmpty(m protoreflect.Message) bool {
	empty := true
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			empty = v.List().Len() == 0
		case fd.IsMap():
			empty = v.Map().Len() == 0
		case fd.Message() != nil:
			empty = isEmpty(v.Message())
		default:
			empty = false
		}
		return empty
	})
	return empty
}
