package status

// Why a node does not support writable cgroups, in one stable word: the
// report's Reason, and the value of the node annotation beside the label
// (advert.ReasonAnnotation), so that a node without the label says whether
// it is unsupported, waits for its runtime, or has no plugin running.

import (
	"errors"

	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

// Reason is why supportsCgroupOptions is false, one of Reasons. The host's
// causes have the names of refusal causes (the cause label of
// cgdelegate_refusals_total), so a node's reason and the refusals of its
// pods read alike.
type Reason string

// The reasons; Reasons lists them in order.
const (
	// ReasonCgroupV1: the cgroup root is not a cgroup2 mount (cgroup v1,
	// hybrid, or nothing mounted there): host.ErrCgroupV1,
	// host.ErrNoCgroupMount.
	ReasonCgroupV1 = Reason(refusal.CgroupV1)
	// ReasonNoNsdelegate: the cgroup2 mount lacks nsdelegate:
	// host.ErrNoNsdelegate.
	ReasonNoNsdelegate = Reason(refusal.NoNsdelegate)
	// ReasonHostUnreadable: the mount table could not be read, so nothing
	// says the host is safe.
	ReasonHostUnreadable Reason = "host_unreadable"
	// ReasonUnsafeContainers: writable containers run on a host no longer
	// safe for them (UnsafeProblem).
	ReasonUnsafeContainers Reason = "unsafe_containers"
	// ReasonNotConfigured: no runtime has configured the plugin over NRI
	// yet (NRI off in the runtime, or its socket not mounted at the
	// plugin's), so no container creation reaches it.
	ReasonNotConfigured Reason = "not_configured"
	// ReasonPluginStopped: the plugin stopped (SIGTERM: a restart, an
	// update, an uninstall) and withdrew the label; or, for `cgdelegate
	// status`, no running plugin has published a status.
	ReasonPluginStopped Reason = "plugin_stopped"
)

// Reasons is every reason, in the order the docs list them.
var Reasons = []Reason{
	ReasonCgroupV1, ReasonNoNsdelegate, ReasonHostUnreadable, ReasonUnsafeContainers,
	ReasonNotConfigured, ReasonPluginStopped,
}

// ErrNotConfigured means no runtime has configured the plugin over NRI
// yet.
var ErrNotConfigured = errors.New("the plugin has not been configured by a runtime yet")

// hostReason is the reason of a host check that failed: readErr (the
// mount table unreadable), or the refusal st.Err() makes.
func hostReason(st host.Status, readErr error) Reason {
	if readErr != nil {
		return ReasonHostUnreadable
	}
	switch refusal.CauseOf(st.Err()) {
	case refusal.CgroupV1:
		return ReasonCgroupV1
	case refusal.NoNsdelegate:
		return ReasonNoNsdelegate
	}
	return ""
}

// Unsupport marks r unsupported for problem, with reason unless r already
// has one (the first reason found is the one the node says).
func (r *Report) Unsupport(reason Reason, problem string) {
	r.Problems = append(r.Problems, problem)
	r.Supported = false
	if r.Reason == "" {
		r.Reason = reason
	}
}
