package oracle

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

// topo is the VM's: two NUMA nodes of four CPUs, CPU 0 reserved.
var topo = Topology{
	Nodes:    map[int]cpuset.CPUSet{0: cpuset.New(0, 1, 2, 3), 1: cpuset.New(4, 5, 6, 7)},
	Reserved: cpuset.New(0),
}

func ctr(name, cpus, mems, cpuMax string) Container {
	return Container{Name: name, CPUs: cpus, Mems: mems, CPUMax: cpuMax}
}

func TestNormalise(t *testing.T) {
	tests := []struct {
		name       string
		obs        Observation
		want       map[string]ContainerShape
		bubble     [2]int
		rejection  Rejection
		wantAdmits bool
	}{
		{
			name: "one exclusive and one shared in a two-cpu bubble",
			obs: Observation{Manifest: "m", Admitted: true, Containers: []Container{
				ctr("ex", "5", "1", "max 100000"), ctr("sh", "4", "1", "200000 100000"),
			}},
			want: map[string]ContainerShape{
				"ex": {Role: RoleApp, Class: Exclusive, CPUs: 1, CPUNodes: 1, MemNodes: 1, MemsAligned: true, Quota: "none"},
				"sh": {Role: RoleApp, Class: PodShared, CPUs: 1, CPUNodes: 1, MemNodes: 1, MemsAligned: true, Quota: "2000m"},
			},
			bubble: [2]int{2, 1}, wantAdmits: true,
		},
		{
			name: "node shared pool: it holds the reserved cpu, memory on every node",
			obs: Observation{Manifest: "m", Admitted: true, Containers: []Container{
				ctr("a", "0-7", "0-1", "200000 100000"), ctr("b", "0-7", "0-1", "max 100000"),
			}},
			want: map[string]ContainerShape{
				"a": {Role: RoleApp, Class: NodeShared, CPUs: 8, CPUNodes: 2, MemNodes: 2, MemsAligned: true, Quota: "2000m"},
				"b": {Role: RoleApp, Class: NodeShared, CPUs: 8, CPUNodes: 2, MemNodes: 2, MemsAligned: true, Quota: "none"},
			},
			wantAdmits: true,
		},
		{
			name: "no quota but sharing cpus is not exclusive",
			obs: Observation{Manifest: "m", Admitted: true, Containers: []Container{
				ctr("x", "4-5", "1", "max 100000"), ctr("y", "5", "1", "100000 100000"),
			}},
			want: map[string]ContainerShape{
				"x": {Role: RoleApp, Class: PodShared, CPUs: 2, CPUNodes: 1, MemNodes: 1, MemsAligned: true, Quota: "none"},
				"y": {Role: RoleApp, Class: PodShared, CPUs: 1, CPUNodes: 1, MemNodes: 1, MemsAligned: true, Quota: "1000m"},
			},
			bubble: [2]int{2, 1}, wantAdmits: true,
		},
		{
			name: "an init container overlapping the apps is compared with init containers only",
			obs: Observation{Manifest: "m", Admitted: true, Containers: []Container{
				{Name: "init", Role: RoleInit, CPUs: "4-5", Mems: "1", CPUMax: "max 100000"},
				ctr("ex", "4", "1", "max 100000"), ctr("sh", "5", "0-1", "150000 100000"),
			}},
			want: map[string]ContainerShape{
				"init": {Role: RoleInit, Class: Exclusive, CPUs: 2, CPUNodes: 1, MemNodes: 1, MemsAligned: true, Quota: "none"},
				"ex":   {Role: RoleApp, Class: Exclusive, CPUs: 1, CPUNodes: 1, MemNodes: 1, MemsAligned: true, Quota: "none"},
				"sh":   {Role: RoleApp, Class: PodShared, CPUs: 1, CPUNodes: 1, MemNodes: 2, MemsAligned: false, Quota: "1500m"},
			},
			bubble: [2]int{2, 1}, wantAdmits: true,
		},
		{
			name: "a bubble over both nodes",
			obs: Observation{Manifest: "m", Admitted: true, Containers: []Container{
				ctr("ex", "7", "0-1", "max 100000"), ctr("sh", "2-3,4-6", "0-1", "600000 100000"),
			}},
			want: map[string]ContainerShape{
				"ex": {Role: RoleApp, Class: Exclusive, CPUs: 1, CPUNodes: 1, MemNodes: 2, MemsAligned: false, Quota: "none"},
				"sh": {Role: RoleApp, Class: PodShared, CPUs: 5, CPUNodes: 2, MemNodes: 2, MemsAligned: true, Quota: "6000m"},
			},
			bubble: [2]int{6, 2}, wantAdmits: true,
		},
		{
			name:      "rejected: the kubelet's empty shared pool",
			obs:       Observation{Manifest: "m", Reason: "EmptyPodSharedPoolError: Pod was rejected: pod rejected, sum of exclusive ..."},
			rejection: EmptySharedPool,
		},
		{
			name: "rejected with containers that ran: only the rejection counts",
			obs: Observation{Manifest: "m", Reason: "cgdelegate: insufficient cpus: pod needs 7", Containers: []Container{
				ctr("a", "bogus", "", ""),
			}},
			rejection: InsufficientCPU,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Normalise(tc.obs, topo)
			if err != nil {
				t.Fatal(err)
			}
			if s.Admitted != tc.wantAdmits || s.Rejection != tc.rejection {
				t.Errorf("admitted %v rejection %q, want %v %q", s.Admitted, s.Rejection, tc.wantAdmits, tc.rejection)
			}
			if got := [2]int{s.BubbleCPUs, s.BubbleNodes}; got != tc.bubble {
				t.Errorf("bubble (cpus, nodes) %v, want %v", got, tc.bubble)
			}
			if len(tc.want) == 0 && len(s.Containers) == 0 {
				return
			}
			if !reflect.DeepEqual(s.Containers, tc.want) {
				t.Errorf("containers\n got %+v\nwant %+v", s.Containers, tc.want)
			}
		})
	}
}

func TestNormaliseInvalid(t *testing.T) {
	good := ctr("a", "4", "1", "max 100000")
	tests := []struct {
		name  string
		obs   Observation
		topo  Topology
		words []string
	}{
		{"no reserved cpus", Observation{Admitted: true}, Topology{Nodes: topo.Nodes}, []string{"reserved"}},
		{"no nodes", Observation{Admitted: true}, Topology{Reserved: topo.Reserved}, []string{"NUMA"}},
		{"bad cpus", Observation{Manifest: "m", Admitted: true, Containers: []Container{ctr("a", "4-", "1", "max 100000")}}, topo, []string{`"a"`, `cpus "4-"`}},
		{"empty mems", Observation{Manifest: "m", Admitted: true, Containers: []Container{ctr("a", "4", "", "max 100000")}}, topo, []string{"mems"}},
		{"cpu.max one field", Observation{Manifest: "m", Admitted: true, Containers: []Container{ctr("a", "4", "1", "max")}}, topo, []string{`cpu.max "max"`}},
		{"cpu.max bad quota", Observation{Manifest: "m", Admitted: true, Containers: []Container{ctr("a", "4", "1", "-5 100000")}}, topo, []string{`quota "-5"`}},
		{"cpu.max bad period", Observation{Manifest: "m", Admitted: true, Containers: []Container{ctr("a", "4", "1", "max 0")}}, topo, []string{`period "0"`}},
		{"twice", Observation{Manifest: "m", Admitted: true, Containers: []Container{good, good}}, topo, []string{"twice"}},
		{"role", Observation{Manifest: "m", Admitted: true, Containers: []Container{{Name: "a", Role: "debug", CPUs: "4", Mems: "1", CPUMax: "max 1"}}}, topo, []string{`"debug"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Normalise(tc.obs, tc.topo)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Normalise: %v, want ErrInvalid", err)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

func TestClassifyRejection(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   Rejection
	}{
		{"EmptyPodSharedPoolError: Pod was rejected: pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers", EmptySharedPool},
		{`container "shared" in pod x: pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers`, EmptySharedPool},
		{"OutOfcpu: Pod was rejected: Node didn't have enough resource: cpu, requested: 8000, used: 0, capacity: 7000", InsufficientCPU},
		{"UnexpectedAdmissionError: Allocate failed due to not enough cpus available to satisfy request: requested=7, available=6", InsufficientCPU},
		{"cgdelegate refused the pod default/x: insufficient cpus: pod x bubble needs 7 cpus", InsufficientCPU},
		{"TopologyAffinityError: Resources cannot be allocated with Topology locality", TopologyAffinity},
		{`Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"`, ResizeInfeasible},
		{`in-place resize refused: container "b" in pod p: as the kubelet's: "Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\""`, ResizeInfeasible},
		{"UnexpectedAdmissionError: something else", OtherRejection},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			if got := ClassifyRejection(tc.reason); got != tc.want {
				t.Errorf("ClassifyRejection = %q, want %q", got, tc.want)
			}
		})
	}
}

func mustShape(t *testing.T, o Observation) Shape {
	t.Helper()
	s, err := Normalise(o, topo)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCompare(t *testing.T) {
	kubelet := Observation{Manifest: "g1", Admitted: true, Containers: []Container{
		ctr("ex", "7", "1", "max 100000"), ctr("sh", "6", "1", "200000 100000"),
	}}
	tests := []struct {
		name string
		cgd  Observation
		want []string // Difference.String() of each, in order
	}{
		{
			name: "same shape on other cpus and another node",
			cgd: Observation{Manifest: "g1", Admitted: true, Containers: []Container{
				ctr("ex", "2", "0", "max 100000"), ctr("sh", "3", "0", "200000 100000"),
			}},
		},
		{
			name: "exclusive container with a quota, sharing the pool",
			cgd: Observation{Manifest: "g1", Admitted: true, Containers: []Container{
				ctr("ex", "2-3", "0", "100000 100000"), ctr("sh", "2-3", "0", "200000 100000"),
			}},
			want: []string{"g1/ex class: kubelet exclusive, cgdelegate pod-shared", "g1/ex cpus: kubelet 1, cgdelegate 2", "g1/ex quota: kubelet none, cgdelegate 1000m", "g1/sh cpus: kubelet 1, cgdelegate 2"},
		},
		{
			name: "bubble split over both nodes, memory everywhere",
			cgd: Observation{Manifest: "g1", Admitted: true, Containers: []Container{
				ctr("ex", "3", "0-1", "max 100000"), ctr("sh", "4", "0-1", "200000 100000"),
			}},
			want: []string{
				"g1 bubbleNodes: kubelet 1, cgdelegate 2",
				"g1/ex memNodes: kubelet 1, cgdelegate 2", "g1/ex memsAligned: kubelet true, cgdelegate false",
				"g1/sh memNodes: kubelet 1, cgdelegate 2", "g1/sh memsAligned: kubelet true, cgdelegate false",
			},
		},
		{
			name: "node shared instead of a bubble",
			cgd: Observation{Manifest: "g1", Admitted: true, Containers: []Container{
				ctr("ex", "0-7", "0-1", "max 100000"), ctr("sh", "0-7", "0-1", "200000 100000"),
			}},
			want: []string{
				"g1 bubbleCPUs: kubelet 2, cgdelegate 0", "g1 bubbleNodes: kubelet 1, cgdelegate 0",
				"g1/ex class: kubelet exclusive, cgdelegate node-shared", "g1/ex cpus: kubelet 1, cgdelegate 8", "g1/ex cpuNodes: kubelet 1, cgdelegate 2", "g1/ex memNodes: kubelet 1, cgdelegate 2",
				"g1/sh class: kubelet pod-shared, cgdelegate node-shared", "g1/sh cpus: kubelet 1, cgdelegate 8", "g1/sh cpuNodes: kubelet 1, cgdelegate 2", "g1/sh memNodes: kubelet 1, cgdelegate 2",
			},
		},
		{
			name: "a container missing on one side",
			cgd: Observation{Manifest: "g1", Admitted: true, Containers: []Container{
				ctr("ex", "2", "0", "max 100000"), ctr("sh", "3", "0", "200000 100000"), ctr("zz", "3", "0", "200000 100000"),
			}},
			want: []string{"g1/zz present: kubelet false, cgdelegate true"},
		},
		{
			name: "refused by cgdelegate only",
			cgd:  Observation{Manifest: "g1", Reason: "cgdelegate refused the pod default/g1: insufficient cpus"},
			want: []string{
				"g1 admitted: kubelet true, cgdelegate false",
				"g1/ex class: kubelet exclusive, cgdelegate refused", "g1/sh class: kubelet pod-shared, cgdelegate refused",
			},
		},
	}
	k := mustShape(t, kubelet)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range Compare(k, mustShape(t, tc.cgd)) {
				got = append(got, d.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("differences\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestCompareRejections(t *testing.T) {
	empty := Observation{Manifest: "e", Reason: "EmptyPodSharedPoolError: pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"}
	cgdEmpty := Observation{
		Manifest: "e", Reason: `container "sh": pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers`,
		Containers: []Container{ctr("a", "4", "1", "max 100000")},
	}
	if d := Compare(mustShape(t, empty), mustShape(t, cgdEmpty)); len(d) != 0 {
		t.Errorf("same rejection: %v", d)
	}
	// Admitted by cgdelegate only: each container's class says how it ran.
	nodeShared := Observation{Manifest: "e", Admitted: true, Containers: []Container{
		ctr("a", "4", "1", "max 100000"), ctr("b", "5", "1", "max 100000"), ctr("sh", "0-3,6-7", "0-1", "200000 100000"),
	}}
	var got []string
	for _, d := range Compare(mustShape(t, empty), mustShape(t, nodeShared)) {
		got = append(got, d.String())
	}
	want := []string{
		"e admitted: kubelet false, cgdelegate true",
		"e/a class: kubelet refused, cgdelegate exclusive", "e/b class: kubelet refused, cgdelegate exclusive",
		"e/sh class: kubelet refused, cgdelegate node-shared",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("admitted by cgdelegate only:\n got %q\nwant %q", got, want)
	}
	cpu := Observation{Manifest: "e", Reason: "cgdelegate refused the pod default/e: insufficient cpus"}
	d := Compare(mustShape(t, empty), mustShape(t, cpu))
	if len(d) != 1 || d[0].Field != "rejection" || d[0].Kubelet != string(EmptySharedPool) || d[0].Cgdelegate != string(InsufficientCPU) {
		t.Errorf("different rejections: %v", d)
	}
}

func TestExplain(t *testing.T) {
	diffs := []Difference{
		{Manifest: "empty", Field: "admitted", Kubelet: "false", Cgdelegate: "true"},
		{Manifest: "init", Container: "setup", Field: "quota", Kubelet: "none", Cgdelegate: "1000m"},
		{Manifest: "init", Container: "setup", Field: "cpus", Kubelet: "2", Cgdelegate: "1"},
		{Manifest: "wide", Container: "sh", Field: "memNodes", Kubelet: "2", Cgdelegate: "1"},
	}
	allow := []Allowance{
		{Manifest: "init", Container: "setup", Field: "quota", Why: "reason A"},
		{Manifest: "*", Container: "*", Field: "memNodes", Kubelet: "2", Cgdelegate: "2", Why: "values must match"},
	}
	if err := Validate(allow); err != nil {
		t.Fatal(err)
	}
	un, ex := Explain(diffs, allow)
	if len(un) != 3 || un[0].Field != "admitted" || un[1].Field != "cpus" || un[2].Field != "memNodes" {
		t.Errorf("unexplained %v", un)
	}
	if len(ex) != 1 || ex[0].Why != "reason A" || ex[0].Container != "setup" {
		t.Errorf("explained %v", ex)
	}
	err := Validate([]Allowance{{Manifest: "x", Field: "cpus"}, {Why: "w"}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Why is empty") || !strings.Contains(err.Error(), `Manifest ""`) {
		t.Errorf("Validate of bad allowances: %v", err)
	}
}
