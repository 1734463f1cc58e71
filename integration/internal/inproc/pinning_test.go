package inproc

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology/topologytest"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/nri"
)

// topologyTree is a 2-socket, 2-NUMA, 16-CPU machine with hyperthreads:
// node 0 holds CPUs 0-3,8-11, node 1 holds 4-7,12-15; siblings are n, n+8.
var topologyTree = topologytest.DualSocketHT().Tree().FS()

const (
	gi = int64(1) << 30
	mi = int64(1) << 20
)

// pinEnv is a runtime with the real plugin, CPU pinning on, connected over
// ttrpc, and a model of what the runtime keeps for every container.
type pinEnv struct {
	t    *testing.T
	host *fakehost.Host
	cfg  config.Config
	rt   *Runtime
	p    *nri.Plugin
	stub stub.Stub
	node *node
	// opts build every plugin instance; stubOpts are added to its stub.
	opts     []nri.Option
	stubOpts []stub.Option
}

func setupPinning(t *testing.T, mutate func(*config.Config)) *pinEnv {
	t.Helper()
	return setupPinningStub(t, mutate, nil)
}

// setupPinningStub is setupPinning with every plugin instance built with
// opts and stubOpts added to its stub.
func setupPinningStub(t *testing.T, mutate func(*config.Config), stubOpts []stub.Option, opts ...nri.Option) *pinEnv {
	t.Helper()
	host := fakehost.New(t)
	if err := host.InstallSysfs(topologyTree); err != nil {
		t.Fatal(err)
	}
	for _, parent := range []string{cgroupfsParent, guaranteedParent} {
		if err := host.AddPodCgroup(parent); err != nil {
			t.Fatal(err)
		}
	}
	cfg := host.Config()
	cfg.CPUPinning = true
	cfg.KubeletCPUManagerState = filepath.Join(host.Dir, "cpu_manager_state")
	if mutate != nil {
		mutate(&cfg)
	}
	rt, err := NewRuntime("containerd", "v2.4.2-inproc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	// The tests step through events and wait for the updates after
	// each: the sender's hold would only slow them down.
	opts = append([]nri.Option{nri.WithUpdateHold(0)}, opts...)
	e := &pinEnv{t: t, host: host, cfg: cfg, rt: rt, node: newNode(), opts: opts, stubOpts: stubOpts}
	e.connect()
	return e
}

// connect starts a new plugin instance and connects it; the runtime
// synchronizes it with the model's state first. It returns the updates the
// plugin sent in Synchronize.
func (e *pinEnv) connect() []*api.ContainerUpdate {
	e.t.Helper()
	p, err := nri.New(e.cfg, slog.New(slog.DiscardHandler), e.opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.rt.SetState(e.node.state())
	s, err := e.rt.Connect(context.Background(), p, "cgdelegate", "50", e.stubOpts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.Stop)
	p.SetUpdater(s)
	e.p, e.stub = p, s
	return slices.Concat(e.applyAsync()...)
}

// applyAsync waits for the plugin's unsolicited updates (Synchronize,
// UpdateContainers) and applies them to the model.
func (e *pinEnv) applyAsync() [][]*api.ContainerUpdate {
	e.p.WaitUpdates()
	u := e.rt.TakeUpdates()
	for _, batch := range u {
		e.node.update(batch)
	}
	return u
}

func (e *pinEnv) runPod(pod *api.PodSandbox) error {
	if err := e.rt.RunPod(context.Background(), pod); err != nil {
		return err
	}
	e.node.pods = append(e.node.pods, pod)
	return nil
}

func (e *pinEnv) mustRunPod(pod *api.PodSandbox) {
	e.t.Helper()
	if err := e.runPod(pod); err != nil {
		e.t.Fatalf("RunPodSandbox %s: %v", pod.GetName(), err)
	}
}

// create relays CreateContainer and applies the answer to the model.
func (e *pinEnv) create(pod *api.PodSandbox, ctr *api.Container) (*api.CreateContainerResponse, error) {
	resp, err := e.rt.CreateContainer(context.Background(), pod, ctr)
	if err != nil {
		return nil, err
	}
	e.node.add(ctr, resp.GetAdjust())
	e.node.update(resp.GetUpdate())
	return resp, nil
}

func (e *pinEnv) mustCreate(pod *api.PodSandbox, ctr *api.Container) *api.CreateContainerResponse {
	e.t.Helper()
	resp, err := e.create(pod, ctr)
	if err != nil {
		e.t.Fatalf("CreateContainer %s: %v", ctr.GetName(), err)
	}
	return resp
}

// stopRemove stops and removes a container, returning the StopContainer
// updates.
func (e *pinEnv) stopRemove(pod *api.PodSandbox, ctr *api.Container) []*api.ContainerUpdate {
	e.t.Helper()
	ctr = e.node.ctrs[ctr.GetId()]
	ctr.State = api.ContainerState_CONTAINER_STOPPED
	resp, err := e.rt.StopContainer(context.Background(), pod, ctr)
	if err != nil {
		e.t.Fatalf("StopContainer %s: %v", ctr.GetName(), err)
	}
	e.node.update(resp.GetUpdate())
	if err := e.rt.RemoveContainer(context.Background(), pod, ctr); err != nil {
		e.t.Fatalf("RemoveContainer %s: %v", ctr.GetName(), err)
	}
	e.node.remove(ctr.GetId())
	return resp.GetUpdate()
}

// node is what the runtime keeps: pods, and containers with the cpusets,
// quota and annotations the plugin gave them.
type node struct {
	pods []*api.PodSandbox
	ctrs map[string]*api.Container
}

func newNode() *node { return &node{ctrs: map[string]*api.Container{}} }

func cpuOf(c *api.Container) *api.LinuxCPU {
	if c.Linux.Resources == nil {
		c.Linux.Resources = &api.LinuxResources{}
	}
	if c.Linux.Resources.Cpu == nil {
		c.Linux.Resources.Cpu = &api.LinuxCPU{}
	}
	return c.Linux.Resources.Cpu
}

func (n *node) add(c *api.Container, adj *api.ContainerAdjustment) {
	c.State = api.ContainerState_CONTAINER_RUNNING
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	for k, v := range adj.GetAnnotations() {
		c.Annotations[k] = v
	}
	if r := adj.GetLinux().GetResources().GetCpu(); r != nil {
		cpu := cpuOf(c)
		if r.Cpus != "" {
			cpu.Cpus = r.Cpus
		}
		if r.Mems != "" {
			cpu.Mems = r.Mems
		}
		if r.Quota != nil {
			cpu.Quota = r.Quota
		}
	}
	n.ctrs[c.Id] = c
}

func (n *node) update(us []*api.ContainerUpdate) {
	for _, u := range us {
		c, ok := n.ctrs[u.GetContainerId()]
		if !ok {
			continue
		}
		r := u.GetLinux().GetResources().GetCpu()
		cpu := cpuOf(c)
		cpu.Cpus, cpu.Mems = r.GetCpus(), r.GetMems()
		if r.GetQuota() != nil {
			cpu.Quota = r.Quota
		}
	}
}

func (n *node) remove(id string) { delete(n.ctrs, id) }

func (n *node) removePod(id string) {
	n.pods = slices.DeleteFunc(n.pods, func(p *api.PodSandbox) bool { return p.GetId() == id })
	for cid, c := range n.ctrs {
		if c.GetPodSandboxId() == id {
			delete(n.ctrs, cid)
		}
	}
}

func (n *node) state() ([]*api.PodSandbox, []*api.Container) {
	ctrs := make([]*api.Container, 0, len(n.ctrs))
	for _, id := range slices.Sorted(maps.Keys(n.ctrs)) {
		ctrs = append(ctrs, n.ctrs[id])
	}
	return slices.Clone(n.pods), ctrs
}

func (n *node) cpus(t *testing.T, id string) cpuset.CPUSet {
	t.Helper()
	c, ok := n.ctrs[id]
	if !ok {
		t.Fatalf("container %s unknown", id)
	}
	s, err := cpuset.Parse(c.GetLinux().GetResources().GetCpu().GetCpus())
	if err != nil {
		t.Fatalf("container %s cpus: %v", id, err)
	}
	return s
}

func (n *node) stamp(t *testing.T, id string) policy.Stamp {
	t.Helper()
	st, err := policy.ParseStamp(n.ctrs[id].GetAnnotations()[policy.StampAnnotation])
	if err != nil {
		t.Fatalf("container %s: %v", id, err)
	}
	return st
}

// running returns the ids of the containers that hold CPUs.
func (n *node) running() []string {
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(n.ctrs)) {
		if n.ctrs[id].State != api.ContainerState_CONTAINER_STOPPED {
			ids = append(ids, id)
		}
	}
	return ids
}

// checkExclusive checks the running containers of the model: exclusive
// slices are pairwise disjoint and disjoint from every other container's
// cpuset, bubbles are pairwise disjoint, and every container of a bubble
// pod runs inside its bubble.
func (n *node) checkExclusive(t *testing.T) {
	t.Helper()
	owner := map[int]string{}
	bubbles := map[string]cpuset.CPUSet{}
	for _, id := range n.running() {
		c := n.ctrs[id]
		st := n.stamp(t, id)
		if !st.Bubble.IsEmpty() {
			if b, ok := bubbles[c.PodSandboxId]; ok && !b.Equals(st.Bubble) {
				t.Errorf("pod %s: two bubbles %s and %s", c.PodSandboxId, b, st.Bubble)
			}
			bubbles[c.PodSandboxId] = st.Bubble
			if cur := n.cpus(t, id); !cur.IsSubsetOf(st.Bubble) {
				t.Errorf("container %s runs on %s, outside its bubble %s", id, cur, st.Bubble)
			}
		}
		if st.Pool != policy.PoolExclusive {
			continue
		}
		cur := n.cpus(t, id)
		if !cur.Equals(st.CPUs) {
			t.Errorf("exclusive container %s runs on %s, stamped %s", id, cur, st.CPUs)
		}
		for _, cpu := range cur.List() {
			if other, dup := owner[cpu]; dup {
				t.Errorf("cpu %d is exclusive to both %s and %s", cpu, other, id)
			}
			owner[cpu] = id
		}
	}
	for _, id := range n.running() {
		if n.stamp(t, id).Pool == policy.PoolExclusive {
			continue
		}
		for _, cpu := range n.cpus(t, id).List() {
			if other, ok := owner[cpu]; ok {
				t.Errorf("shared container %s runs on cpu %d, exclusive to %s", id, cpu, other)
			}
		}
	}
	pods := slices.Sorted(maps.Keys(bubbles))
	for i, a := range pods {
		for _, b := range pods[i+1:] {
			if x := bubbles[a].Intersection(bubbles[b]); !x.IsEmpty() {
				t.Errorf("bubbles of %s and %s overlap on %s", a, b, x)
			}
		}
	}
}

func budgetPod(name, uid string, cpus int64) *api.PodSandbox {
	return WithPodResources(Pod(name, uid, cgroupfsParent, nil), cpus*1000, cpus*1000, 4*gi)
}

func adjCPU(resp *api.CreateContainerResponse) *api.LinuxCPU {
	return resp.GetAdjust().GetLinux().GetResources().GetCpu()
}

func mustSet(t *testing.T, s string) cpuset.CPUSet {
	t.Helper()
	set, err := cpuset.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func numaOf(cpus cpuset.CPUSet) cpuset.CPUSet {
	nodes := cpuset.New()
	node0 := cpuset.New(0, 1, 2, 3, 8, 9, 10, 11)
	if !cpus.Intersection(node0).IsEmpty() {
		nodes = nodes.Union(cpuset.New(0))
	}
	if !cpus.Difference(node0).IsEmpty() {
		nodes = nodes.Union(cpuset.New(1))
	}
	return nodes
}

func updateFor(us []*api.ContainerUpdate, id string) *api.ContainerUpdate {
	for _, u := range us {
		if u.GetContainerId() == id {
			return u
		}
	}
	return nil
}

// TestPinningPodBudget: a pod with a budget gets a bubble; its Guaranteed
// container an exclusive slice with quota -1 and the slice's NUMA node; its
// shared container the rest of the bubble. A container added to the running
// pod shrinks the shared container in the same response; stopping it widens
// the shared container again.
func TestPinningPodBudget(t *testing.T) {
	e := setupPinning(t, nil)
	pod := budgetPod("budget", "p1", 4)
	e.mustRunPod(pod)

	g := Container(pod, "guaranteed", WithGuaranteedCPUs(1, gi))
	resp := e.mustCreate(pod, g)
	gc := adjCPU(resp)
	slice := mustSet(t, gc.GetCpus())
	if slice.Size() != 1 {
		t.Fatalf("guaranteed cpus = %s, want one cpu", slice)
	}
	if gc.GetQuota().GetValue() != -1 {
		t.Errorf("guaranteed quota = %v, want -1", gc.GetQuota())
	}
	if got, want := gc.GetMems(), numaOf(slice).String(); got != want {
		t.Errorf("guaranteed mems = %q, want %q (the NUMA node of %s)", got, want, slice)
	}
	gst := e.node.stamp(t, g.Id)
	bubble := gst.Bubble
	if gst.Pool != policy.PoolExclusive || bubble.Size() != 4 || !slice.IsSubsetOf(bubble) || numaOf(bubble).Size() != 1 {
		t.Fatalf("stamp = %+v; want an exclusive slice in a 4-cpu single-NUMA bubble", gst)
	}
	if len(resp.GetUpdate()) != 0 {
		t.Errorf("first container caused updates: %v", resp.GetUpdate())
	}

	s := Container(pod, "shared", WithResources(500, 2000, 512*mi))
	resp = e.mustCreate(pod, s)
	sc := adjCPU(resp)
	if got, want := sc.GetCpus(), bubble.Difference(slice).String(); got != want {
		t.Errorf("shared cpus = %q, want bubble - slice = %q", got, want)
	}
	if sc.GetQuota() != nil {
		t.Errorf("shared container quota changed to %v; it must keep its own", sc.GetQuota())
	}
	if sc.GetMems() != numaOf(bubble).String() {
		t.Errorf("shared mems = %q, want %s", sc.GetMems(), numaOf(bubble))
	}

	// Dynamic add: the shared container shrinks in the same response.
	g2 := Container(pod, "added", WithGuaranteedCPUs(2, gi))
	resp = e.mustCreate(pod, g2)
	slice2 := mustSet(t, adjCPU(resp).GetCpus())
	if slice2.Size() != 2 || !slice2.IsSubsetOf(bubble.Difference(slice)) {
		t.Fatalf("added cpus = %s, want 2 cpus of %s", slice2, bubble.Difference(slice))
	}
	u := updateFor(resp.GetUpdate(), s.Id)
	if u == nil {
		t.Fatalf("no update for the shared container in the CreateContainer response: %v", resp.GetUpdate())
	}
	if got, want := u.GetLinux().GetResources().GetCpu().GetCpus(), bubble.Difference(slice).Difference(slice2).String(); got != want {
		t.Errorf("shrunk shared cpus = %q, want %q", got, want)
	}
	e.node.checkExclusive(t)

	// Stop and remove: the shared container widens again.
	upd := e.stopRemove(pod, g2)
	u = updateFor(upd, s.Id)
	if u == nil {
		t.Fatalf("no update for the shared container in the StopContainer response: %v", upd)
	}
	if got, want := u.GetLinux().GetResources().GetCpu().GetCpus(), bubble.Difference(slice).String(); got != want {
		t.Errorf("widened shared cpus = %q, want %q", got, want)
	}
	if got := e.applyAsync(); len(got) != 0 {
		t.Errorf("RemoveContainer after StopContainer sent updates: %v", got)
	}

	pinning := e.p.Pinning()
	if pinning == nil || !pinning.Active {
		t.Fatalf("status pinning = %+v, want active", pinning)
	}
	st := pinning.Allocations
	if st == nil || len(st.Pods) != 1 || st.Pods[0].Bubble != bubble.String() || len(st.Pods[0].Containers) != 2 {
		t.Errorf("status allocations = %+v", pinning.Allocations)
	}

	// Removing the pod returns the bubble to the node pool.
	if err := e.rt.RemovePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	e.node.removePod(pod.Id)
	if st := e.p.Pinning().Allocations; len(st.Pods) != 0 || st.NodeSharedPool != "0-15" {
		t.Errorf("after RemovePodSandbox: %+v", st)
	}
}

// TestPinningNodeShared: a pod without a budget runs in the node shared
// pool; a budget pod arriving or leaving changes that pool, and the update
// is sent with UpdateContainers (RunPodSandbox and RemovePodSandbox cannot
// return updates).
func TestPinningNodeShared(t *testing.T) {
	e := setupPinning(t, nil)
	plain := Pod("plain", "p0", cgroupfsParent, nil)
	e.mustRunPod(plain)
	c := Container(plain, "app")
	resp := e.mustCreate(plain, c)
	if got := adjCPU(resp).GetCpus(); got != "0-15" {
		t.Fatalf("node shared cpus = %q, want 0-15", got)
	}

	pod := budgetPod("budget", "p1", 4)
	e.mustRunPod(pod)
	ups := e.applyAsync()
	if len(ups) != 1 || updateFor(ups[0], c.Id) == nil {
		t.Fatalf("updates after RunPodSandbox = %v, want one for %s", ups, c.Id)
	}
	bubble := mustSet(t, "0-15").Difference(e.node.cpus(t, c.Id))
	if bubble.Size() != 4 {
		t.Fatalf("node shared pool %s does not leave out a 4-cpu bubble", e.node.cpus(t, c.Id))
	}

	if err := e.rt.RemovePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	e.node.removePod(pod.Id)
	e.applyAsync()
	if got := e.node.cpus(t, c.Id).String(); got != "0-15" {
		t.Errorf("after RemovePodSandbox node shared cpus = %q, want 0-15", got)
	}
}

// TestPinningRejections: the policy's refusals reach the runtime side
// verbatim, and nothing changes.
func TestPinningRejections(t *testing.T) {
	const noShared = "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"
	tests := []struct {
		name string
		// first is created successfully, second is refused.
		first, second func(*api.PodSandbox) *api.Container
		want          string
	}{
		{
			"exclusive container takes the last shared cpu",
			func(p *api.PodSandbox) *api.Container { return Container(p, "shared") },
			func(p *api.PodSandbox) *api.Container { return Container(p, "big", WithGuaranteedCPUs(2, gi)) },
			noShared,
		},
		{
			"container requests above the pod budget",
			func(p *api.PodSandbox) *api.Container { return Container(p, "one", WithGuaranteedCPUs(1, gi)) },
			func(p *api.PodSandbox) *api.Container { return Container(p, "two", WithGuaranteedCPUs(2, gi)) },
			"inconsistent resources",
		},
		{
			"bad lifecycle annotation",
			func(p *api.PodSandbox) *api.Container { return Container(p, "one", WithGuaranteedCPUs(1, gi)) },
			func(p *api.PodSandbox) *api.Container {
				p.Annotations = map[string]string{annotations.Lifecycle.Name + "/container." + "odd": "sometimes"}
				return Container(p, "odd")
			},
			"invalid lifecycle annotation",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setupPinning(t, nil)
			pod := budgetPod("tight", "p1", 2)
			e.mustRunPod(pod)
			first := tc.first(pod)
			e.mustCreate(pod, first)
			before := e.p.Pinning().Allocations

			_, err := e.create(pod, tc.second(pod))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			after := e.p.Pinning().Allocations
			if len(after.Pods[0].Containers) != 1 || after.Pods[0].SharedPool != before.Pods[0].SharedPool {
				t.Errorf("refusal changed the state: before %+v after %+v", before, after)
			}
		})
	}

	// A container without CPUs after the budget is all exclusive (an
	// ephemeral container: kubectl debug) is not refused: it runs in the
	// node shared pool, as the kubelet runs ephemeral containers.
	t.Run("shared container after the budget is all exclusive", func(t *testing.T) {
		e := setupPinning(t, nil)
		plain := Pod("plain", "p0", cgroupfsParent, nil)
		e.mustRunPod(plain)
		other := Container(plain, "other")
		e.mustCreate(plain, other)
		pod := budgetPod("tight", "p1", 2)
		e.mustRunPod(pod)
		e.applyAsync()
		big := adjCPU(e.mustCreate(pod, Container(pod, "big", WithGuaranteedCPUs(2, gi)))).GetCpus()
		dbg := Container(pod, "debugger")
		resp, err := e.create(pod, dbg)
		if err != nil {
			t.Fatalf("CreateContainer: %v", err)
		}
		node := e.node.cpus(t, other.Id)
		if got := mustSet(t, adjCPU(resp).GetCpus()); !got.Equals(node) || got.Intersection(mustSet(t, big)).Size() != 0 {
			t.Errorf("debugger cpus %s, want the node shared pool %s (big has %s)", got, node, big)
		}
		if st := e.node.stamp(t, dbg.Id); st.Pool != policy.PoolNodeShared || st.Bubble.IsEmpty() {
			t.Errorf("debugger stamp %+v, want node-shared beside the bubble", st)
		}
	})

	t.Run("bad pod budget fails the pod", func(t *testing.T) {
		e := setupPinning(t, nil)
		pod := Pod("bad", "p9", cgroupfsParent, map[string]string{"resources.cgdelegate.io/pod": "cpu=lots"})
		err := e.runPod(pod)
		if err == nil || !strings.Contains(err.Error(), "malformed resources annotation") {
			t.Fatalf("RunPodSandbox err = %v", err)
		}
	})
}

// TestPinningKubeletStaticCPUManager: with the kubelet's static CPU manager
// active, cgdelegate does not pin (unless told to) and says why; writable
// cgroups keep working.
func TestPinningKubeletStaticCPUManager(t *testing.T) {
	tests := []struct {
		name       string
		state      string // "" = no file
		allow      bool
		wantActive bool
		wantReason string
	}{
		{"no state file", "", false, true, ""},
		{"policy none", `{"policyName":"none","defaultCpuSet":"","checksum":1}`, false, true, ""},
		{"policy static", `{"policyName":"static","defaultCpuSet":"0-15","checksum":2}`, false, false, `kubelet's static CPU manager is active`},
		{"policy static, allowed", `{"policyName":"static","defaultCpuSet":"0-15","checksum":2}`, true, true, ""},
		{"unreadable state", `{"policyName":`, false, false, "cannot tell whether"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setupPinning(t, func(c *config.Config) {
				c.AllowKubeletStaticCPUManager = tc.allow
				if tc.state != "" {
					if err := os.WriteFile(c.KubeletCPUManagerState, []byte(tc.state), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			})
			pinning := e.p.Pinning()
			if pinning == nil || pinning.Active != tc.wantActive || !strings.Contains(pinning.Reason, tc.wantReason) {
				t.Fatalf("status pinning = %+v, want active=%v reason ~ %q", pinning, tc.wantActive, tc.wantReason)
			}

			pod := WithPodResources(Pod("w", "p1", cgroupfsParent, writableAnn("")), 2000, 2000, gi)
			e.mustRunPod(pod)
			resp := e.mustCreate(pod, Container(pod, "app", WithGuaranteedCPUs(1, gi)))
			if cgroupMount(resp.GetAdjust().GetMounts()) == nil {
				t.Errorf("writable cgroups lost: adjustment mounts %v", resp.GetAdjust().GetMounts())
			}
			pinned := adjCPU(resp).GetCpus() != ""
			if pinned != tc.wantActive {
				t.Errorf("pinned = %v (cpus %q), want %v", pinned, adjCPU(resp).GetCpus(), tc.wantActive)
			}
		})
	}
}

// TestPinningRestartDuringChurn kills the plugin in the middle of churn.
// The runtime keeps going without it; a new plugin instance rebuilds from
// Synchronize, repairs what changed meanwhile, and no CPU is exclusive to
// two containers afterwards.
func TestPinningRestartDuringChurn(t *testing.T) {
	e := setupPinning(t, nil)
	p1 := budgetPod("one", "p1", 4)
	p2 := budgetPod("two", "p2", 4)
	plain := Pod("plain", "p0", cgroupfsParent, nil)
	for _, p := range []*api.PodSandbox{p1, p2, plain} {
		e.mustRunPod(p)
	}
	g1 := Container(p1, "g1", WithGuaranteedCPUs(1, gi))
	s1 := Container(p1, "s1", WithResources(250, 1000, 256*mi))
	g2 := Container(p2, "g2", WithGuaranteedCPUs(2, gi))
	s2 := Container(p2, "s2")
	n0 := Container(plain, "n0")
	for _, c := range []*api.Container{g1, s1, g2, s2, n0} {
		e.mustCreate(podOf(c, p1, p2, plain), c)
	}
	g3 := Container(p1, "g3", WithGuaranteedCPUs(1, gi))
	e.mustCreate(p1, g3)
	e.node.checkExclusive(t)
	oldSlices := map[string]string{}
	for _, c := range []*api.Container{g1, g2} {
		oldSlices[c.Id] = e.node.cpus(t, c.Id).String()
	}

	// The plugin dies. The runtime goes on: g3 stops, a new budget pod with
	// a Guaranteed container starts, and a container is added to p2, none
	// of them seen by the plugin.
	e.stub.Stop()
	e.p.WaitUpdates()
	ctx := context.Background()
	g3c := e.node.ctrs[g3.Id]
	g3c.State = api.ContainerState_CONTAINER_STOPPED
	if _, err := e.rt.StopContainer(ctx, p1, g3c); err != nil {
		t.Fatal(err)
	}
	p3 := budgetPod("three", "p3", 2)
	e.mustRunPod(p3)
	g4 := Container(p3, "g4", WithGuaranteedCPUs(1, gi))
	s4 := Container(p3, "s4")
	g5 := Container(p2, "g5", WithGuaranteedCPUs(1, gi))
	for _, c := range []*api.Container{g4, s4, g5} {
		resp := e.mustCreate(podOf(c, p1, p2, p3), c)
		if adjCPU(resp).GetCpus() != "" {
			t.Fatalf("a disconnected plugin pinned %s", c.Name)
		}
		// Unpinned, the runtime runs it on every CPU.
		cpuOf(e.node.ctrs[c.Id]).Cpus = "0-15"
	}

	// A new plugin instance: Synchronize is the truth. It widens s1 (g3
	// stopped), pins g4, s4 and g5, and shrinks s2 and n0 around them.
	repairs := e.connect()
	for _, c := range []*api.Container{s1, g4, s4, g5, s2, n0} {
		if updateFor(repairs, c.Id) == nil {
			t.Errorf("Synchronize sent no repair for %s: %v", c.Name, repairs)
		}
	}
	for _, c := range []*api.Container{g1, g2} {
		if u := updateFor(repairs, c.Id); u != nil {
			t.Errorf("Synchronize moved intact exclusive container %s: %v", c.Name, u)
		}
	}
	for _, c := range []*api.Container{g4, s4, g5} {
		if _, ok := e.node.ctrs[c.Id].Annotations[policy.StampAnnotation]; !ok {
			// Annotations cannot be added after creation; the rebuilt
			// assignment is checked through the policy instead.
			e.node.ctrs[c.Id].Annotations[policy.StampAnnotation] = stampOf(t, e.p, c.Id)
		}
	}
	e.node.checkExclusive(t)
	for id, want := range oldSlices {
		if got := e.node.cpus(t, id).String(); got != want {
			t.Errorf("restart moved exclusive container %s from %s to %s", id, want, got)
		}
	}
	for _, c := range []*api.Container{g4, g5} {
		if st := e.node.stamp(t, c.Id); st.Pool != policy.PoolExclusive || e.node.cpus(t, c.Id).Size() != 1 {
			t.Errorf("container %s after rebuild: pool %s cpus %s, want one exclusive cpu", c.Name, st.Pool, e.node.cpus(t, c.Id))
		}
	}
	// g3 stopped while the plugin was away: its cpu is back in p1's
	// shared pool.
	if g3cpus := e.node.stamp(t, g3.Id).CPUs; !g3cpus.IsSubsetOf(e.node.cpus(t, s1.Id)) {
		t.Errorf("s1 runs on %s; stopped g3's %s was not returned to it", e.node.cpus(t, s1.Id), g3cpus)
	}
	st := e.p.Pinning().Allocations
	for _, pod := range st.Pods {
		for _, c := range pod.Containers {
			if c.ID == g3.Id {
				t.Errorf("stopped container %s is still allocated: %+v", g3.Id, c)
			}
		}
	}

	// Subsequent adds still work and stay disjoint.
	e.stopRemove(p1, g3c)
	g6 := Container(p1, "g6", WithGuaranteedCPUs(1, gi))
	resp := e.mustCreate(p1, g6)
	if u := updateFor(resp.GetUpdate(), s1.Id); u == nil {
		t.Errorf("adding g6 did not shrink s1: %v", resp.GetUpdate())
	}
	g7 := Container(p3, "g7")
	e.mustCreate(p3, g7)
	e.node.checkExclusive(t)
}

func podOf(c *api.Container, pods ...*api.PodSandbox) *api.PodSandbox {
	for _, p := range pods {
		if p.Id == c.PodSandboxId {
			return p
		}
	}
	return nil
}

func stampOf(t *testing.T, p *nri.Plugin, id string) string {
	t.Helper()
	st := p.Pinning().Allocations
	for _, pod := range st.Pods {
		for _, c := range pod.Containers {
			if c.ID == id {
				return policy.Assignment{
					Pool:   c.Pool,
					Bubble: mustSet(t, pod.Bubble),
					CPUs:   mustSet(t, c.CPUs),
					Mems:   mustSet(t, c.Mems),
				}.Stamp()
			}
		}
	}
	t.Fatalf("container %s not in the allocation table", id)
	return ""
}

// TestPinningWritableRefusalHoldsNoCPUs: a container refused by the
// writable-cgroups checks never reaches the CPU policy; one that passes gets
// both its cgroup mount and its cpuset in one adjustment.
func TestPinningWritableRefusalHoldsNoCPUs(t *testing.T) {
	e := setupPinning(t, nil)
	pod := WithPodResources(Pod("w", "p1", cgroupfsParent, writableAnn("")), 2000, 2000, gi)
	e.mustRunPod(pod)

	if err := e.host.Remount(fakehost.NoNsdelegate); err != nil {
		t.Fatal(err)
	}
	_, err := e.create(pod, Container(pod, "refused", WithGuaranteedCPUs(1, gi)))
	if err == nil || !strings.Contains(err.Error(), "nsdelegate") {
		t.Fatalf("err = %v, want an nsdelegate refusal", err)
	}
	st := e.p.Pinning().Allocations
	if len(st.Pods) != 1 || len(st.Pods[0].Containers) != 0 || st.Pods[0].SharedPool != st.Pods[0].Bubble {
		t.Fatalf("refused container holds cpus: %+v", st.Pods)
	}

	if err := e.host.Remount(fakehost.Nsdelegate); err != nil {
		t.Fatal(err)
	}
	resp := e.mustCreate(pod, Container(pod, "ok", WithGuaranteedCPUs(1, gi)))
	if cgroupMount(resp.GetAdjust().GetMounts()) == nil || adjCPU(resp).GetCpus() == "" || adjCPU(resp).GetQuota().GetValue() != -1 {
		t.Fatalf("adjustment lacks the cgroup mount or the pinning: %v", resp.GetAdjust())
	}
	if resp.GetAdjust().GetAnnotations()[policy.StampAnnotation] == "" {
		t.Errorf("no %s annotation in %v", policy.StampAnnotation, resp.GetAdjust().GetAnnotations())
	}
}

// TestPinningRestartKeepsUnstampedSlices: a Guaranteed container created
// while the plugin was down gets its slice from the next Synchronize, but
// no stamp (an update can not add annotations; the real runtime keeps none,
// unlike TestPinningRestartDuringChurn's model). Every later restart must
// leave it, and everything else, where it is.
func TestPinningRestartKeepsUnstampedSlices(t *testing.T) {
	e := setupPinning(t, nil)
	p1 := budgetPod("one", "p1", 3)
	e.mustRunPod(p1)
	g1 := Container(p1, "g1", WithGuaranteedCPUs(1, gi))
	s1 := Container(p1, "s1", WithResources(500, 1000, 256*mi))
	e.mustCreate(p1, g1)
	e.mustCreate(p1, s1)

	e.stub.Stop()
	e.p.WaitUpdates()
	e.stopRemove(p1, g1)
	down := Container(p1, "down", WithGuaranteedCPUs(1, gi))
	if adjCPU(e.mustCreate(p1, down)).GetCpus() != "" {
		t.Fatal("a disconnected plugin pinned a container")
	}
	cpuOf(e.node.ctrs[down.Id]).Cpus = "0-15"

	if updateFor(e.connect(), down.Id) == nil {
		t.Fatal("Synchronize did not pin the container created while the plugin was down")
	}
	if _, stamped := e.node.ctrs[down.Id].Annotations[policy.StampAnnotation]; stamped {
		t.Fatal("the model stamped a container after creation; the runtime can not")
	}
	checkQuotaOff := func(stage string) {
		t.Helper()
		owner := map[int]string{}
		for _, id := range e.node.running() {
			if q := cpuOf(e.node.ctrs[id]).GetQuota(); q == nil || q.GetValue() != -1 {
				continue
			}
			for _, cpu := range e.node.cpus(t, id).List() {
				if other, dup := owner[cpu]; dup {
					t.Errorf("%s: cpu %d is exclusive to both %s and %s", stage, cpu, other, id)
				}
				owner[cpu] = id
			}
		}
		if len(owner) != 1 {
			t.Errorf("%s: exclusive cpus %v, want the one of %s", stage, owner, down.Id)
		}
	}
	checkQuotaOff("after the first restart")
	before := map[string]string{}
	for _, id := range e.node.running() {
		before[id] = e.node.cpus(t, id).String()
	}
	for i := range 3 {
		e.stub.Stop()
		e.p.WaitUpdates()
		if u := e.connect(); len(u) != 0 {
			t.Errorf("restart %d changed running containers: %v", i+2, u)
		}
		for id, want := range before {
			if got := e.node.cpus(t, id).String(); got != want {
				t.Errorf("restart %d moved %s from %s to %s", i+2, id, want, got)
			}
		}
	}
	checkQuotaOff("after the last restart")
}

// TestPinningPodLevelContainerWithoutResources is the pod: spec
// resources cpu 2, memory 256Mi; g Guaranteed with cpu 1, memory 64Mi; s
// with no resources of its own. The values are exactly what the kubelet
// sends (internal/cpumanager/budget documents them): s has the pod's quota, shares
// converted from the pod's limit and the pod's memory limit. g gets one
// exclusive CPU, s the rest of the bubble; nothing is refused.
func TestPinningPodLevelContainerWithoutResources(t *testing.T) {
	e := setupPinning(t, nil)
	pod := WithPodResources(Pod("podlevel", "p1", cgroupfsParent, nil), 2000, 2000, 256*mi)
	e.mustRunPod(pod)
	guaranteedPod := func(c *api.Container) { c.Linux.OomScoreAdj = api.Int(-997) }

	g := Container(pod, "g", WithGuaranteedCPUs(1, 64*mi), guaranteedPod)
	slice := mustSet(t, adjCPU(e.mustCreate(pod, g)).GetCpus())

	s := Container(pod, "s", func(c *api.Container) {
		c.Linux.Resources = &api.LinuxResources{
			Cpu:    &api.LinuxCPU{Shares: api.UInt64(2048), Quota: api.Int64(200000), Period: api.UInt64(100000)},
			Memory: &api.LinuxMemory{Limit: api.Int64(268435456)},
		}
	}, guaranteedPod)
	resp, err := e.create(pod, s)
	if err != nil {
		t.Fatalf("creating s: %v", err)
	}
	gst, sst := e.node.stamp(t, g.Id), e.node.stamp(t, s.Id)
	if gst.Pool != policy.PoolExclusive || slice.Size() != 1 || gst.Bubble.Size() != 2 {
		t.Errorf("g stamp %+v cpus %s; want one exclusive cpu in a 2-cpu bubble", gst, slice)
	}
	if sst.Pool != policy.PoolPodShared {
		t.Errorf("s pool = %s, want %s", sst.Pool, policy.PoolPodShared)
	}
	if got, want := adjCPU(resp).GetCpus(), gst.Bubble.Difference(slice).String(); got != want {
		t.Errorf("s cpus = %q, want bubble - slice = %q", got, want)
	}
	if q := adjCPU(resp).GetQuota(); q != nil {
		t.Errorf("s quota changed to %v; it keeps the pod's", q)
	}
	e.node.checkExclusive(t)
}

// TestPinningKubeletTurnsStatic: the kubelet's CPU manager state is read
// again when it changes. Turning static while cgdelegate pins stops
// pinning: the status says why, new containers get no cpuset, stopping a
// pinned one updates nobody, and existing cpusets stay. Turning back to
// none does not resume the stale state; a restart rebuilds it from
// Synchronize and pins again.
func TestPinningKubeletTurnsStatic(t *testing.T) {
	var statePath string
	writeState := func(policyName string) {
		t.Helper()
		tmp := statePath + ".tmp"
		if err := os.WriteFile(tmp, []byte(`{"policyName":"`+policyName+`","defaultCpuSet":"0-15","checksum":1}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, statePath); err != nil {
			t.Fatal(err)
		}
	}
	e := setupPinning(t, func(c *config.Config) {
		statePath = c.KubeletCPUManagerState
		writeState("none")
	})
	if e.p.RecheckKubeletState() {
		t.Fatal("an unchanged state file changed the pinning status")
	}
	pod := budgetPod("budget", "p1", 4)
	e.mustRunPod(pod)
	g := Container(pod, "g", WithGuaranteedCPUs(1, gi))
	e.mustCreate(pod, g)
	s := Container(pod, "s", WithResources(500, 2000, 512*mi))
	e.mustCreate(pod, s)
	sCPUs := e.node.cpus(t, s.Id)

	writeState("static")
	if !e.p.RecheckKubeletState() {
		t.Fatal("turning static did not change the pinning status")
	}
	if e.p.RecheckKubeletState() {
		t.Error("a second look at an unchanged file changed the status again")
	}
	st := e.p.Pinning()
	if st.Active || !strings.Contains(st.Reason, "became active") || !strings.Contains(st.Reason, "left as they are") {
		t.Fatalf("status %+v, want inactive with the reason", st)
	}
	if st.Allocations == nil {
		t.Error("a suspended status lost its last allocation table")
	}
	late := Container(pod, "late", WithGuaranteedCPUs(1, gi))
	if got := adjCPU(e.mustCreate(pod, late)).GetCpus(); got != "" {
		t.Errorf("container created while suspended got cpus %q", got)
	}
	if upd := e.stopRemove(pod, g); len(upd) != 0 {
		t.Errorf("stopping a pinned container while suspended sent updates %v", upd)
	}
	if got := e.node.cpus(t, s.Id); !got.Equals(sCPUs) {
		t.Errorf("shared container moved from %s to %s while suspended", sCPUs, got)
	}

	writeState("none")
	if !e.p.RecheckKubeletState() {
		t.Fatal("turning back to none did not change the status reason")
	}
	if st := e.p.Pinning(); st.Active || !strings.Contains(st.Reason, "until cgdelegate restarts") {
		t.Fatalf("status %+v, want still inactive until a restart", st)
	}

	// Restart: Synchronize rebuilds the state and repairs the cpusets.
	e.stub.Stop()
	e.connect()
	if st := e.p.Pinning(); !st.Active {
		t.Fatalf("after a restart status %+v, want active", st)
	}
	// late has no stamp (created while suspended); the rebuild gives it
	// the slice g left, apart from the shared container.
	lateCPUs, sharedCPUs := e.node.cpus(t, late.Id), e.node.cpus(t, s.Id)
	if lateCPUs.Size() != 1 || !lateCPUs.Intersection(sharedCPUs).IsEmpty() {
		t.Errorf("after the restart late runs on %s and s on %s; want one exclusive cpu apart from s", lateCPUs, sharedCPUs)
	}
}

// TestPinningNodeSharedKeepsMemory: a bubble that fills one NUMA node
// narrows the node-shared containers' CPUs to the other node but never
// their memory nodes; reservedCPUs stay in the node shared pool unless
// strictCPUReservation.
func TestPinningNodeSharedKeepsMemory(t *testing.T) {
	tests := []struct {
		name     string
		strict   bool
		wantNode string // node-shared cpus before the bubble
	}{
		{"reserved cpus shared", false, "0-15"},
		{"strict reservation", true, "1-15"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setupPinning(t, func(c *config.Config) {
				c.ReservedCPUs = "0"
				c.StrictCPUReservation = tc.strict
			})
			plain := Pod("plain", "p0", cgroupfsParent, nil)
			e.mustRunPod(plain)
			c := Container(plain, "app")
			cpu := adjCPU(e.mustCreate(plain, c))
			if cpu.GetCpus() != tc.wantNode || cpu.GetMems() != "0-1" {
				t.Fatalf("node shared cpus %q mems %q, want %q and 0-1", cpu.GetCpus(), cpu.GetMems(), tc.wantNode)
			}

			pod := budgetPod("budget", "p1", 7)
			e.mustRunPod(pod)
			e.applyAsync()
			got := e.node.ctrs[c.Id].GetLinux().GetResources().GetCpu()
			cpus := mustSet(t, got.GetCpus())
			free := cpus.Difference(cpuset.New(0)) // the unreserved ones
			if numaOf(free).Size() != 1 || got.GetMems() != "0-1" {
				t.Errorf("after a one-node bubble: node shared cpus %s (unreserved on nodes %s) mems %q; want one node's cpus and mems 0-1",
					cpus, numaOf(free), got.GetMems())
			}
			if cpus.Contains(0) == tc.strict {
				t.Errorf("node shared cpus %s: reserved cpu 0 shared = %v, want %v", cpus, cpus.Contains(0), !tc.strict)
			}
		})
	}
}

// TestPinningForgedStampIgnored plays a pod author who puts another pod's
// CPU assignment stamp on their pod, where a runtime that copies pod
// annotations onto containers (CRI-O copies them all) hands it to their
// container as if cgdelegate had stamped it. The container is created
// while the plugin is down, so nothing overwrites the copy; its pod's id
// sorts before the victim's, so a rebuild that trusted the stamp would
// keep the forged bubble and move the victim's. After the plugin's
// restart the victim must run where it did, and the attacker nowhere in
// its bubble.
func TestPinningForgedStampIgnored(t *testing.T) {
	e := setupPinning(t, nil)
	victim := budgetPod("victim", "v1", 2)
	e.mustRunPod(victim)
	vg := Container(victim, "g", WithGuaranteedCPUs(1, gi))
	vs := Container(victim, "s", WithResources(500, 1000, 256*mi))
	e.mustCreate(victim, vg)
	e.mustCreate(victim, vs)
	before := map[string]cpuset.CPUSet{vg.Id: e.node.cpus(t, vg.Id), vs.Id: e.node.cpus(t, vs.Id)}
	forged := e.node.ctrs[vg.Id].Annotations[policy.StampAnnotation]
	bubble := e.node.stamp(t, vg.Id).Bubble

	e.stub.Stop()
	e.p.WaitUpdates()
	attacker := WithPodResources(Pod("attacker", "a1", cgroupfsParent, map[string]string{policy.StampAnnotation: forged}), 2000, 2000, 4*gi)
	if attacker.GetId() >= victim.GetId() {
		t.Fatalf("attacker pod %s must sort before the victim's %s", attacker.GetId(), victim.GetId())
	}
	e.mustRunPod(attacker)
	ag := Container(attacker, "g", WithGuaranteedCPUs(1, gi))
	ag.Annotations = maps.Clone(attacker.GetAnnotations()) // as CRI-O copies them
	if adjCPU(e.mustCreate(attacker, ag)).GetCpus() != "" {
		t.Fatal("a disconnected plugin pinned a container")
	}

	upd := e.connect()
	for id, was := range before {
		if u := updateFor(upd, id); u != nil {
			t.Errorf("the restart updated victim container %s: %v", id, u)
		}
		if now := e.node.cpus(t, id); !now.Equals(was) {
			t.Errorf("the forged stamp moved victim container %s from %s to %s", id, was, now)
		}
	}
	if got := e.node.cpus(t, ag.Id); !got.Intersection(bubble).IsEmpty() {
		t.Errorf("the attacker runs on %s, in the victim's bubble %s", got, bubble)
	}
	for _, ps := range e.p.Pinning().Allocations.Pods {
		if ps.ID == attacker.GetId() && !mustSet(t, ps.Bubble).Intersection(bubble).IsEmpty() {
			t.Errorf("the attacker's bubble %s overlaps the victim's %s", ps.Bubble, bubble)
		}
	}
}

// TestPinningLiveInitContainer: a Guaranteed container annotated as an
// init container that never exits, in container scope. Its regular
// sibling's CreateContainer gives its exclusive CPUs back to the node
// pool and, in the same answer, moves it off them with its quota back;
// the next tenant's exclusive CPUs are in no cpuset of it.
func TestPinningLiveInitContainer(t *testing.T) {
	e := setupPinning(t, func(c *config.Config) { c.TopologyScope = config.ScopeContainer })
	pod := WithPodResources(Pod("live-init", "l1", cgroupfsParent, map[string]string{
		annotations.Lifecycle.Name + "/container.liar": "init",
	}), 2000, 2000, 4*gi)
	e.mustRunPod(pod)
	liar := Container(pod, "liar", WithGuaranteedCPUs(2, gi))
	slice := mustSet(t, adjCPU(e.mustCreate(pod, liar)).GetCpus())
	if q := cpuOf(e.node.ctrs[liar.Id]).GetQuota(); slice.Size() != 2 || q.GetValue() != -1 {
		t.Fatalf("liar: cpus %s quota %v, want two exclusive cpus", slice, q)
	}
	resp := e.mustCreate(pod, Container(pod, "app", WithResources(500, 1000, 256*mi)))
	u := updateFor(resp.GetUpdate(), liar.Id)
	if u == nil {
		t.Errorf("the sibling's CreateContainer did not move the liar off %s: updates %v", slice, resp.GetUpdate())
	} else if q := u.GetLinux().GetResources().GetCpu().GetQuota().GetValue(); q != 200000 {
		t.Errorf("liar's quota %d after the move, want its 2 CPUs back (200000)", q)
	}
	tenant := budgetPod("tenant", "t1", 2)
	e.mustRunPod(tenant)
	tg := Container(tenant, "g", WithGuaranteedCPUs(2, gi))
	got := mustSet(t, adjCPU(e.mustCreate(tenant, tg)).GetCpus())
	e.applyAsync()
	if !got.Equals(slice) {
		t.Logf("the tenant got %s, not the liar's old %s", got, slice)
	}
	if both := e.node.cpus(t, liar.Id).Intersection(got); !both.IsEmpty() {
		t.Errorf("the liar still runs on %s, exclusive to the next tenant", both)
	}
}
