// Package refusal is the typed refusal: why cgdelegate said no to a
// container, as a cause from a fixed set and the error that says it in
// words.
//
// Use New where a decision refuses (the writable checks, the host and spec
// checks, the CPU policy's sentinel errors), and CauseOf where the
// refusal is reported (metrics, logs): the cause travels with the error, so
// a reporter never imports the deciding packages to classify it. Do not use
// it for errors that are not a decision about a container (I/O, a broken
// request): they are CauseOther by default.
package refusal

import "errors"

// Cause is why a container was refused: a value of the cause label of
// cgdelegate_refusals_total.
type Cause string

// The causes; Causes lists them in order.
const (
	// Policy: an admission check (the node's opt-in policy) refused.
	Policy Cause = "policy"
	// BadAnnotation: an annotation cgdelegate reads is malformed (cgroup
	// mode, pod bounds, resources, lifecycle).
	BadAnnotation Cause = "bad_annotation"
	// CgroupV1: the cgroup root is not a cgroup2 mount (cgroup v1, hybrid,
	// or nothing mounted there).
	CgroupV1 Cause = "cgroup_v1"
	// NoNsdelegate: the cgroup2 mount lacks nsdelegate.
	NoNsdelegate Cause = "no_nsdelegate"
	// NoCgroupNS: the container would share the host cgroup namespace, or
	// bind-mounts a host cgroup tree.
	NoCgroupNS Cause = "no_cgroupns"
	// PodBounds: the pod cgroup is unknown or its bounds could not be
	// written.
	PodBounds Cause = "pod_bounds"
	// SharedCgroup: the pod's cgroup parent is not the pod's own cgroup
	// (the cgroup root, the kubelet's kubepods or QoS cgroup, a systemd
	// slice of the system), so its bounds would bound other pods too.
	SharedCgroup Cause = "shared_cgroup"
	// NodeBudget: a new writable pod's bound would take the node's
	// delegated cgroups over nodeMaxDelegatedCgroups.
	NodeBudget Cause = "node_budget"
	// Pinning: the CPU policy could not place the container: not enough
	// CPUs or memory, inconsistent or invalid resources, a pod QoS that does
	// not match, an in-place resize it refuses.
	Pinning Cause = "pinning"
	// Other: none of the above, e.g. the mount table could not be read. A
	// refusal landing here is worth a bug report.
	Other Cause = "other"
)

// Causes is every cause, Other last.
var Causes = []Cause{Policy, BadAnnotation, CgroupV1, NoNsdelegate, NoCgroupNS, PodBounds, SharedCgroup, NodeBudget, Pinning, Other}

// Error is a refusal: its text is Err's alone, so making an error a
// refusal does not change what is logged.
type Error struct {
	Cause Cause
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// New returns err as a refusal for cause; nil for a nil err.
func New(cause Cause, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Cause: cause, Err: err}
}

// CauseOf is the cause of the outermost refusal in err's chain, Other when
// there is none: a refusal that wraps another (an admission check that
// failed on a malformed annotation) keeps the outer decision's cause.
func CauseOf(err error) Cause {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Cause
	}
	return Other
}
