package policy

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

// literalTopo builds a topology as a struct literal, numbered the way x86
// Linux does: thread k of global core c is cpu c + k*cores. Nodes are
// numbered across packages.
func literalTopo(pkgs, nodesPerPkg, coresPerNode, threads int) *topology.Topology {
	nodes := pkgs * nodesPerPkg
	cores := nodes * coresPerNode
	t := &topology.Topology{
		CPUs:      map[int]topology.CPUInfo{},
		NUMANodes: map[int]topology.NUMANode{},
		Offline:   cpuset.New(),
		Isolated:  cpuset.New(),
	}
	nodeCPUs := make([][]int, nodes)
	for c := range cores {
		node := c / coresPerNode
		for k := range threads {
			id := c + k*cores
			t.CPUs[id] = topology.CPUInfo{ID: id, Core: c, Package: node / nodesPerPkg, NUMANode: node, Cluster: -1}
			nodeCPUs[node] = append(nodeCPUs[node], id)
		}
	}
	for n := range nodes {
		d := map[int]int{}
		for m := range nodes {
			switch {
			case m == n:
				d[m] = 10
			case m/nodesPerPkg == n/nodesPerPkg:
				d[m] = 12
			default:
				d[m] = 32
			}
		}
		t.NUMANodes[n] = topology.NUMANode{ID: n, CPUs: cpuset.New(nodeCPUs[n]...), MemoryBytes: 16 << 30, Distances: d}
	}
	return t
}

// dualHT is 2 sockets x 1 node x 4 cores x 2 threads: node 0 is
// 0-3,8-11 and node 1 is 4-7,12-15.
func dualHT() *topology.Topology { return literalTopo(2, 1, 4, 2) }

func set(s string) cpuset.CPUSet {
	c, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return c
}

func mustNew(t testing.TB, topo *topology.Topology, o Options) *Policy {
	t.Helper()
	p, err := New(topo, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	mib = 1 << 20
	gib = 1 << 30
)

// guaranteed is a Guaranteed container budget of milli millicores.
func guaranteed(milli int64) budget.Container {
	return budget.NewContainer(budget.Budget{CPURequest: milli, CPULimit: milli, MemoryLimit: gib})
}

// burstable is a Burstable container budget requesting milli millicores.
func burstable(milli int64) budget.Container {
	return budget.NewContainer(budget.Budget{CPURequest: milli, CPULimit: 2 * max(milli, 1000)})
}

func bestEffort() budget.Container { return budget.NewContainer(budget.Budget{}) }

// podBudget is a pod budget of milli millicores (request = limit).
func podBudget(milli int64) budget.Budget {
	return budget.Budget{CPURequest: milli, CPULimit: milli, MemoryLimit: 8 * gib}
}

func ctr(id, pod string, r budget.Container) ContainerSpec {
	return ContainerSpec{ID: id, PodID: pod, Name: id, Resources: r}
}

// lifecycle returns c with lifecycle l.
func lifecycle(c ContainerSpec, l Lifecycle) ContainerSpec {
	c.Lifecycle = l
	return c
}

func mustAddPod(t testing.TB, p *Policy, id string, b budget.Budget) []Assignment {
	t.Helper()
	u, err := p.AddPod(PodSpec{ID: id, Name: "ns/" + id, Budget: b})
	if err != nil {
		t.Fatalf("AddPod %s: %v", id, err)
	}
	return u
}

func mustAdd(t testing.TB, p *Policy, c ContainerSpec) (Assignment, []Assignment) {
	t.Helper()
	a, u, err := p.AddContainer(c)
	if err != nil {
		t.Fatalf("AddContainer %s: %v", c.ID, err)
	}
	return a, u
}

// ids lists the container ids of updates.
func ids(as []Assignment) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.ContainerID)
	}
	return out
}
