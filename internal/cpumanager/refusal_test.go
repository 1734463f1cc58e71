package cpumanager

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/budget"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

// TestRefusalCauses: the CPU policy's refusals carry their cause from the
// sentinel that decides them, however they are wrapped on the way to the
// NRI handler: a malformed annotation first, then the placements the
// policy could not make; the policy's bookkeeping errors, which decide
// nothing, and any other error stay refusal.Other, as
// docs/troubleshooting.md lists them.
func TestRefusalCauses(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want refusal.Cause
	}{
		{"resources annotation", fmt.Errorf("pod budget: %w", budget.ErrAnnotation), refusal.BadAnnotation},
		{"resources annotation inconsistent too", errors.Join(budget.ErrAnnotation, budget.ErrInconsistent), refusal.BadAnnotation},
		{"lifecycle annotation", ErrLifecycle, refusal.BadAnnotation},
		{"insufficient cpus", fmt.Errorf("container %q: %w", "app", policy.ErrInsufficient), refusal.Pinning},
		{"insufficient memory", policy.ErrInsufficientMemory, refusal.Pinning},
		{"no shared cpus", policy.ErrNoSharedCPUs, refusal.Pinning},
		{"unknown pod: bookkeeping", policy.ErrUnknownPod, refusal.Other},
		{"exists: bookkeeping", policy.ErrExists, refusal.Other},
		{"invalid input: bookkeeping", fmt.Errorf("%w: pod without id", policy.ErrInvalid), refusal.Other},
		{"qos", policy.ErrQoS, refusal.Pinning},
		{"resize", policy.ErrResize, refusal.Pinning},
		{"invalid budget", fmt.Errorf("%w: pod p: %w", policy.ErrInvalid, budget.ErrInconsistent), refusal.Pinning},
		{"inconsistent resources", budget.ErrInconsistent, refusal.Pinning},
		{"invalid resources", budget.ErrInvalid, refusal.Pinning},
		{"a pod refused", fmt.Errorf("%w ns/p: %w", ErrPodRefused, policy.ErrInsufficient), refusal.Pinning},
		{"a stamp that does not parse decides nothing", policy.ErrStamp, refusal.Other},
		{"anything else", errors.New("boom"), refusal.Other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refusal.CauseOf(tc.err); got != tc.want {
				t.Errorf("cause %q, want %q", got, tc.want)
			}
		})
	}
	// The sentinels are still found with errors.Is, and their text is
	// their own.
	wrapped := fmt.Errorf("container %q: %w", "app", policy.ErrInsufficient)
	if !errors.Is(wrapped, policy.ErrInsufficient) || wrapped.Error() != `container "app": insufficient cpus` {
		t.Errorf("wrapped sentinel: Is %v, text %q", errors.Is(wrapped, policy.ErrInsufficient), wrapped.Error())
	}
}
