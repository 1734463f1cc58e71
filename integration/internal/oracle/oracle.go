package oracle

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// ErrInvalid is wrapped by every error about a malformed observation or
// topology.
var ErrInvalid = errors.New("invalid observation")

// Role is how a container runs in its pod.
type Role string

// The roles. An init container has completed before the app containers
// start, so its view is the one it had while it ran. An ephemeral
// container is one kubectl debug added to the running pod.
const (
	RoleApp       Role = "app"
	RoleInit      Role = "init"
	RoleSidecar   Role = "sidecar"
	RoleEphemeral Role = "ephemeral"
)

// Container is what one container saw of its own cgroup.
type Container struct {
	Name string `json:"name"`
	Role Role   `json:"role,omitempty"` // "" is RoleApp
	// CPUs and Mems are cpuset.cpus.effective and cpuset.mems.effective
	// (Linux list format).
	CPUs string `json:"cpus"`
	Mems string `json:"mems"`
	// CPUMax is cpu.max: "max 100000" or "<quota> <period>".
	CPUMax string `json:"cpuMax"`
}

// Observation is one pod manifest under one CPU manager.
type Observation struct {
	Manifest string `json:"manifest"`
	// Admitted: every container of the pod ran (init containers
	// completed). Otherwise Reason says why not, as the kubelet or
	// cgdelegate said it.
	Admitted bool   `json:"admitted"`
	Reason   string `json:"reason,omitempty"`
	// Containers are the containers that ran; a refused pod may list
	// some (cgdelegate refuses one container at a time).
	Containers []Container `json:"containers,omitempty"`
}

// Topology is what Normalise needs of the node.
type Topology struct {
	// Nodes are the CPUs of each NUMA node.
	Nodes map[int]cpuset.CPUSet
	// Reserved are the reserved CPUs (the kubelet's reservedSystemCPUs,
	// cgdelegate's reservedCPUs), which stay in the node shared pool and
	// never go to a bubble or an exclusive slice: a container that has one
	// of them runs in the node shared pool. It must not be empty.
	Reserved cpuset.CPUSet
}

// Class is the pool a container runs in.
type Class string

// The classes.
const (
	// Exclusive: CPUs of its own (no other running container of the pod
	// has any of them) and no CFS quota.
	Exclusive Class = "exclusive"
	// PodShared: CPUs of the pod's bubble shared with others of the pod,
	// or with a quota.
	PodShared Class = "pod-shared"
	// NodeShared: the node shared pool (it has a reserved CPU).
	NodeShared Class = "node-shared"
	// Refused is no class: the container did not run, its pod was refused.
	// Compare names it against the class a container got on the side that
	// admitted the pod.
	Refused Class = "refused"
)

// Rejection is the kind of reason a pod was not admitted.
type Rejection string

// The rejection kinds.
const (
	// NotRejected: the pod was admitted.
	NotRejected Rejection = ""
	// EmptySharedPool: exclusive containers would take the whole budget
	// and leave the shared ones no CPU.
	EmptySharedPool Rejection = "empty-shared-pool"
	// InsufficientCPU: not enough free CPUs for the pod.
	InsufficientCPU Rejection = "insufficient-cpu"
	// TopologyAffinity: the topology manager's policy refused the NUMA
	// placement.
	TopologyAffinity Rejection = "topology-affinity"
	// ResizeInfeasible: an in-place resize the kubelet's static CPU or
	// memory manager would not make (cgdelegate quotes its reason).
	ResizeInfeasible Rejection = "resize-infeasible"
	// OtherRejection: any other reason.
	OtherRejection Rejection = "other"
)

// ClassifyRejection maps a rejection message of the kubelet (status reason
// and message of a Failed pod) or of cgdelegate (its error) to its kind.
func ClassifyRejection(reason string) Rejection {
	r := strings.ToLower(reason)
	switch {
	case strings.Contains(r, "resize is infeasible"):
		return ResizeInfeasible
	case strings.Contains(r, "leaving no cpus for shared"), strings.Contains(r, "emptypodsharedpool"),
		strings.Contains(r, "no cpus available for them"):
		return EmptySharedPool
	case strings.Contains(r, "topologyaffinityerror"), strings.Contains(r, "topology affinity"):
		return TopologyAffinity
	case strings.Contains(r, "outofcpu"), strings.Contains(r, "insufficient cpu"), strings.Contains(r, "not enough cpus"):
		return InsufficientCPU
	}
	return OtherRejection
}

// ContainerShape is a container's view without the CPU numbers.
type ContainerShape struct {
	Role  Role
	Class Class
	// CPUs is the number of CPUs; CPUNodes the NUMA nodes they span.
	CPUs, CPUNodes int
	// MemNodes is the number of memory nodes; MemsAligned says they are
	// exactly the NUMA nodes of its CPUs.
	MemNodes    int
	MemsAligned bool
	// Quota is the CFS quota in millicores ("1500m"), or "none".
	Quota string
}

// Shape is an Observation without the CPU numbers.
type Shape struct {
	Manifest  string
	Admitted  bool
	Rejection Rejection
	// BubbleCPUs is the number of CPUs of the pod's pinned containers
	// (exclusive and pod-shared) together, BubbleNodes the NUMA nodes
	// they span; 0 for a pod without a bubble.
	BubbleCPUs, BubbleNodes int
	Containers              map[string]ContainerShape
}

// Normalise reduces an observation to its shape on topology t.
func Normalise(o Observation, t Topology) (Shape, error) {
	if t.Reserved.IsEmpty() {
		return Shape{}, fmt.Errorf("%w: topology has no reserved CPUs, so node-shared containers can not be told apart", ErrInvalid)
	}
	if len(t.Nodes) == 0 {
		return Shape{}, fmt.Errorf("%w: topology has no NUMA nodes", ErrInvalid)
	}
	s := Shape{Manifest: o.Manifest, Admitted: o.Admitted}
	if !o.Admitted {
		s.Rejection = ClassifyRejection(o.Reason)
		return s, nil
	}
	ps := make([]parsed, 0, len(o.Containers))
	for _, c := range o.Containers {
		if c.Role == "" {
			c.Role = RoleApp
		}
		if !slices.Contains([]Role{RoleApp, RoleInit, RoleSidecar, RoleEphemeral}, c.Role) {
			return Shape{}, fmt.Errorf("%w: %s container %q: role %q: want app, init, sidecar or ephemeral", ErrInvalid, o.Manifest, c.Name, c.Role)
		}
		cpus, err := parseList(c.CPUs)
		if err != nil {
			return Shape{}, fmt.Errorf("%w: %s container %q: cpus %q: %w", ErrInvalid, o.Manifest, c.Name, c.CPUs, err)
		}
		mems, err := parseList(c.Mems)
		if err != nil {
			return Shape{}, fmt.Errorf("%w: %s container %q: mems %q: %w", ErrInvalid, o.Manifest, c.Name, c.Mems, err)
		}
		q, err := quota(c.CPUMax)
		if err != nil {
			return Shape{}, fmt.Errorf("%w: %s container %q: %w", ErrInvalid, o.Manifest, c.Name, err)
		}
		if slices.ContainsFunc(ps, func(p parsed) bool { return p.c.Name == c.Name }) {
			return Shape{}, fmt.Errorf("%w: %s container %q observed twice", ErrInvalid, o.Manifest, c.Name)
		}
		ps = append(ps, parsed{c: c, cpus: cpus, mems: mems, quota: q})
	}
	s.Containers = make(map[string]ContainerShape, len(ps))
	bubble := cpuset.New()
	for i, p := range ps {
		cs := ContainerShape{
			Role: p.c.Role, CPUs: p.cpus.Size(), MemNodes: p.mems.Size(), Quota: p.quota,
		}
		nodes := t.nodesOf(p.cpus)
		cs.CPUNodes, cs.MemsAligned = nodes.Size(), nodes.Equals(p.mems)
		switch {
		case !p.cpus.Intersection(t.Reserved).IsEmpty():
			cs.Class = NodeShared
		case p.quota == "none" && alone(i, ps):
			cs.Class = Exclusive
		default:
			cs.Class = PodShared
		}
		if cs.Class != NodeShared {
			bubble = bubble.Union(p.cpus)
		}
		s.Containers[p.c.Name] = cs
	}
	s.BubbleCPUs, s.BubbleNodes = bubble.Size(), t.nodesOf(bubble).Size()
	return s, nil
}

// errEmptyList is a cpuset.cpus or cpuset.mems with nothing in it.
var errEmptyList = errors.New("want a non-empty list")

// parseList parses a non-empty Linux list ("0-3,5").
func parseList(s string) (cpuset.CPUSet, error) {
	set, err := cpuset.Parse(s)
	if err != nil {
		return cpuset.CPUSet{}, err
	}
	if set.IsEmpty() {
		return cpuset.CPUSet{}, errEmptyList
	}
	return set, nil
}

// parsed is a Container with its sets and quota parsed.
type parsed struct {
	c          Container
	cpus, mems cpuset.CPUSet
	quota      string
}

// alone reports whether the CPUs of container i overlap none of the other
// containers that run at the same time: an init container ran before the
// app containers (whose CPUs it may have had), so it is compared with the
// other init containers only, and the others with every non-init one.
func alone(i int, all []parsed) bool {
	for j, o := range all {
		if j == i || (all[i].c.Role == RoleInit) != (o.c.Role == RoleInit) {
			continue
		}
		if !all[i].cpus.Intersection(o.cpus).IsEmpty() {
			return false
		}
	}
	return true
}

// nodesOf is the set of NUMA nodes that hold any of cpus.
func (t Topology) nodesOf(cpus cpuset.CPUSet) cpuset.CPUSet {
	var ids []int
	for n, set := range t.Nodes {
		if !set.Intersection(cpus).IsEmpty() {
			ids = append(ids, n)
		}
	}
	return cpuset.New(ids...)
}

// quota turns cpu.max into millicores, or "none" without a quota.
func quota(cpuMax string) (string, error) {
	f := strings.Fields(cpuMax)
	if len(f) != 2 {
		return "", fmt.Errorf("cpu.max %q: want \"<quota|max> <period>\"", cpuMax)
	}
	period, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || period <= 0 {
		return "", fmt.Errorf("cpu.max %q: period %q is not a positive number", cpuMax, f[1])
	}
	if f[0] == "max" {
		return "none", nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || q <= 0 {
		return "", fmt.Errorf("cpu.max %q: quota %q is not max or a positive number", cpuMax, f[0])
	}
	return fmt.Sprintf("%dm", (q*1000+period-1)/period), nil
}

// Difference is one way the two shapes of a manifest differ.
type Difference struct {
	Manifest string
	// Container is "" for a pod-level field.
	Container string
	// Field is admitted, rejection, bubbleCPUs, bubbleNodes, present,
	// role, class, cpus, cpuNodes, memNodes, memsAligned or quota.
	Field string
	// Kubelet and Cgdelegate are the two values.
	Kubelet, Cgdelegate string
}

func (d Difference) String() string {
	where := d.Manifest
	if d.Container != "" {
		where += "/" + d.Container
	}
	return fmt.Sprintf("%s %s: kubelet %s, cgdelegate %s", where, d.Field, d.Kubelet, d.Cgdelegate)
}

// Compare lists how cgdelegate's shape of a manifest differs from the
// kubelet's: admission first (a pod refused by both compares only the kind
// of rejection; a pod admitted by one only, the class of each container
// that ran against Refused), then the bubble, then every container of
// either, in name order.
func Compare(kubelet, cgd Shape) []Difference {
	var out []Difference
	add := func(ctr, field string, k, c any) {
		ks, cs := fmt.Sprint(k), fmt.Sprint(c)
		if ks != cs {
			out = append(out, Difference{Manifest: kubelet.Manifest, Container: ctr, Field: field, Kubelet: ks, Cgdelegate: cs})
		}
	}
	add("", "admitted", kubelet.Admitted, cgd.Admitted)
	switch {
	case !kubelet.Admitted && !cgd.Admitted:
		add("", "rejection", kubelet.Rejection, cgd.Rejection)
		return out
	case !cgd.Admitted:
		for _, n := range slices.Sorted(maps.Keys(kubelet.Containers)) {
			add(n, "class", kubelet.Containers[n].Class, Refused)
		}
		return out
	case !kubelet.Admitted:
		for _, n := range slices.Sorted(maps.Keys(cgd.Containers)) {
			add(n, "class", Refused, cgd.Containers[n].Class)
		}
		return out
	}
	add("", "bubbleCPUs", kubelet.BubbleCPUs, cgd.BubbleCPUs)
	add("", "bubbleNodes", kubelet.BubbleNodes, cgd.BubbleNodes)
	names := slices.Sorted(maps.Keys(kubelet.Containers))
	for n := range cgd.Containers {
		if _, ok := kubelet.Containers[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		k, kok := kubelet.Containers[n]
		c, cok := cgd.Containers[n]
		add(n, "present", kok, cok)
		if !kok || !cok {
			continue
		}
		add(n, "role", k.Role, c.Role)
		add(n, "class", k.Class, c.Class)
		add(n, "cpus", k.CPUs, c.CPUs)
		add(n, "cpuNodes", k.CPUNodes, c.CPUNodes)
		add(n, "memNodes", k.MemNodes, c.MemNodes)
		add(n, "memsAligned", k.MemsAligned, c.MemsAligned)
		add(n, "quota", k.Quota, c.Quota)
	}
	return out
}

// Allowance is a deliberate difference: where cgdelegate differs from the
// kubelet on purpose, with the reason (docs/cpu-pinning.md's comparison table says
// the same).
type Allowance struct {
	// Manifest, Container and Field select the differences it covers; ""
	// for Container means a pod-level field, "*" matches anything.
	Manifest, Container, Field string
	// Kubelet and Cgdelegate, when set, are the only values it covers.
	Kubelet, Cgdelegate string
	// Why cgdelegate differs.
	Why string
}

func (a Allowance) covers(d Difference) bool {
	match := func(pattern, v string) bool { return pattern == "*" || pattern == v }
	return match(a.Manifest, d.Manifest) && match(a.Container, d.Container) && match(a.Field, d.Field) &&
		(a.Kubelet == "" || a.Kubelet == d.Kubelet) && (a.Cgdelegate == "" || a.Cgdelegate == d.Cgdelegate)
}

// Validate checks that every allowance says why and names a field.
func Validate(allow []Allowance) error {
	var errs []error
	for i, a := range allow {
		if strings.TrimSpace(a.Why) == "" {
			errs = append(errs, fmt.Errorf("%w: allowance %d (%s %s %s): Why is empty", ErrInvalid, i, a.Manifest, a.Container, a.Field))
		}
		if a.Manifest == "" || a.Field == "" {
			errs = append(errs, fmt.Errorf("%w: allowance %d: Manifest %q and Field %q must be set (\"*\" for any)", ErrInvalid, i, a.Manifest, a.Field))
		}
	}
	return errors.Join(errs...)
}

// Explained is a difference with the allowance that covers it.
type Explained struct {
	Difference
	Why string
}

// Explain splits differences into those no allowance covers and those one
// does (the first that matches).
func Explain(diffs []Difference, allow []Allowance) (unexplained []Difference, explained []Explained) {
	for _, d := range diffs {
		i := slices.IndexFunc(allow, func(a Allowance) bool { return a.covers(d) })
		if i < 0 {
			unexplained = append(unexplained, d)
			continue
		}
		explained = append(explained, Explained{Difference: d, Why: allow[i].Why})
	}
	return unexplained, explained
}
