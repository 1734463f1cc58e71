package prom

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/cgroupfs"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/hostcheck"
	"github.com/cgdelegate/cgdelegate/internal/optin"
	"github.com/cgdelegate/cgdelegate/internal/optinpolicy"
	"github.com/cgdelegate/cgdelegate/internal/writable"
	"github.com/cgdelegate/cgdelegate/ocispec"
)

func wrap(err error) error { return fmt.Errorf("writable cgroups requested by annotation x: %w", err) }

func TestCause(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"admission", wrap(errors.Join(writable.ErrNotAdmitted, errors.New("namespace not allowed"))), CausePolicy},
		{"opt-in policy", fmt.Errorf("%w: namespace %q", optinpolicy.ErrNotAllowed, "ns"), CausePolicy},
		{"admission reading a bad annotation", errors.Join(writable.ErrNotAdmitted, optin.ErrBadAnnotation), CausePolicy},
		{"cgroup mode annotation", wrap(optin.ErrBadAnnotation), CauseBadAnnotation},
		{"resources annotation", fmt.Errorf("pod budget: %w", budget.ErrAnnotation), CauseBadAnnotation},
		{"resources annotation inconsistent too", errors.Join(budget.ErrAnnotation, budget.ErrInconsistent), CauseBadAnnotation},
		{"lifecycle annotation", wrap(cpumanager.ErrLifecycle), CauseBadAnnotation},
		{"cgroup v1", wrap(hostcheck.ErrCgroupV1), CauseCgroupV1},
		{"no cgroup mount", wrap(hostcheck.ErrNoCgroupMount), CauseCgroupV1},
		{"no nsdelegate", wrap(hostcheck.ErrNoNsdelegate), CauseNoNsdelegate},
		{"shared cgroup namespace", wrap(ocispec.ErrNoPrivateCgroupNS), CauseNoCgroupNS},
		{"host cgroup bind", wrap(ocispec.ErrHostCgroupBind), CauseNoCgroupNS},
		{"bounds not written", writable.BoundsError("/sys/fs/cgroup/pod", "/pod", cgroupfs.ErrNotFound), CausePodBounds},
		{"insufficient cpus", fmt.Errorf("container %q: %w", "app", policy.ErrInsufficient), CausePinning},
		{"no shared cpus", policy.ErrNoSharedCPUs, CausePinning},
		{"unknown pod", policy.ErrUnknownPod, CausePinning},
		{"exists", policy.ErrExists, CausePinning},
		{"invalid spec", policy.ErrInvalid, CausePinning},
		{"inconsistent resources", fmt.Errorf("container resources: %w", budget.ErrInconsistent), CausePinning},
		{"invalid resources", budget.ErrInvalid, CausePinning},
		{"mount table unreadable", wrap(errors.New("open /proc/1/mountinfo: permission denied")), CauseOther},
		{"cgroupfs error alone", cgroupfs.ErrBadPath, CauseOther},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Cause(tc.err)
			if got != tc.want {
				t.Fatalf("Cause(%v) = %q, want %q", tc.err, got, tc.want)
			}
			if !slices.Contains(Causes, got) {
				t.Fatalf("Cause(%v) = %q, not in Causes %q", tc.err, got, Causes)
			}
		})
	}
}

// The cause label values are the documented, fixed set.
func TestCauses(t *testing.T) {
	want := []string{"policy", "bad_annotation", "cgroup_v1", "no_nsdelegate", "no_cgroupns", "pod_bounds", "pinning", "other"}
	if !slices.Equal(Causes, want) {
		t.Fatalf("Causes = %q, want %q", Causes, want)
	}
}
