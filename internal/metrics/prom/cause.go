package prom

import (
	"errors"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/hostcheck"
	"github.com/cgdelegate/cgdelegate/internal/optin"
	"github.com/cgdelegate/cgdelegate/internal/optinpolicy"
	"github.com/cgdelegate/cgdelegate/internal/writable"
	"github.com/cgdelegate/cgdelegate/ocispec"
)

// Refusal causes, the cause label of cgdelegate_refusals_total.
const (
	// CausePolicy: an admission check (the node's opt-in policy,
	// optinpolicy) refused.
	CausePolicy = "policy"
	// CauseBadAnnotation: an annotation cgdelegate reads is malformed
	// (cgroup mode, pod bounds, resources, lifecycle).
	CauseBadAnnotation = "bad_annotation"
	// CauseCgroupV1: the cgroup root is not a cgroup2 mount (cgroup v1,
	// hybrid, or nothing mounted there).
	CauseCgroupV1 = "cgroup_v1"
	// CauseNoNsdelegate: the cgroup2 mount lacks nsdelegate.
	CauseNoNsdelegate = "no_nsdelegate"
	// CauseNoCgroupNS: the container would share the host cgroup
	// namespace, or bind-mounts a host cgroup tree.
	CauseNoCgroupNS = "no_cgroupns"
	// CausePodBounds: the pod cgroup is unknown or its bounds could not be
	// written.
	CausePodBounds = "pod_bounds"
	// CausePinning: the CPU policy could not place the container (not
	// enough CPUs, inconsistent or invalid resources).
	CausePinning = "pinning"
	// CauseOther: none of the above, e.g. the mount table could not be
	// read. A refusal landing here is worth a bug report.
	CauseOther = "other"
)

// causes classify a refusal: the first entry with a sentinel the error
// matches names its cause. The order settles errors that match several:
// the policy answers first, and a malformed annotation is that even when
// the CPU policy was reading it.
var causes = []struct {
	cause     string
	sentinels []error
}{
	{CausePolicy, []error{writable.ErrNotAdmitted, optinpolicy.ErrNotAllowed}},
	{CauseBadAnnotation, []error{optin.ErrBadAnnotation, budget.ErrAnnotation, cpumanager.ErrLifecycle}},
	{CauseCgroupV1, []error{hostcheck.ErrCgroupV1, hostcheck.ErrNoCgroupMount}},
	{CauseNoNsdelegate, []error{hostcheck.ErrNoNsdelegate}},
	{CauseNoCgroupNS, []error{ocispec.ErrNoPrivateCgroupNS, ocispec.ErrHostCgroupBind}},
	{CausePodBounds, []error{writable.ErrPodBounds}},
	{CausePinning, []error{
		policy.ErrInsufficient, policy.ErrNoSharedCPUs, policy.ErrUnknownPod, policy.ErrExists, policy.ErrInvalid,
		budget.ErrInconsistent, budget.ErrInvalid,
	}},
}

// Causes is every value of the cause label, CauseOther last.
var Causes = func() []string {
	out := make([]string, 0, len(causes)+1)
	for _, c := range causes {
		out = append(out, c.cause)
	}
	return append(out, CauseOther)
}()

// Cause classifies a refusal into exactly one of Causes.
func Cause(err error) string {
	for _, c := range causes {
		for _, s := range c.sentinels {
			if errors.Is(err, s) {
				return c.cause
			}
		}
	}
	return CauseOther
}
