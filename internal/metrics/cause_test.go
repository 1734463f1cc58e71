package metrics

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

// Cause reads the cause the deciding package gave the refusal, through any
// wrapping; an error that is no refusal is "other". Which decision gives
// which cause is tested where the decision is made.
func TestCause(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"refusal", refusal.New(refusal.NoNsdelegate, errors.New("no nsdelegate")), "no_nsdelegate"},
		{"wrapped refusal", fmt.Errorf("refused web/app: %w", refusal.New(refusal.Pinning, errors.New("not enough CPUs"))), "pinning"},
		{"outer refusal wins", refusal.New(refusal.Policy, refusal.New(refusal.BadAnnotation, errors.New("bad"))), "policy"},
		{"joined", errors.Join(errors.New("x"), refusal.New(refusal.PodBounds, errors.New("y"))), "pod_bounds"},
		{"mount table unreadable", errors.New("open /proc/1/mountinfo: permission denied"), "other"},
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
	want := []string{"policy", "bad_annotation", "cgroup_v1", "no_nsdelegate", "no_cgroupns", "pod_bounds", "shared_cgroup", "node_budget", "pinning", "other"}
	if !slices.Equal(Causes, want) {
		t.Fatalf("Causes = %q, want %q", Causes, want)
	}
}
