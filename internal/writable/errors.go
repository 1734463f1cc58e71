package writable

import (
	"errors"
	"fmt"

	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

var (
	// ErrNotAdmitted marks a refusal by an admission check (an extra Check
	// given to New, such as an opt-in policy).
	ErrNotAdmitted = errors.New("not admitted")
	// ErrPodBounds marks a refusal because the pod bounds could not be put
	// in place, or the pod cgroup they go on is unknown.
	ErrPodBounds = errors.New("pod bounds unavailable")
)

// marked is err, also matching mark with errors.Is; its text is err's
// alone, so marking a refusal does not change what is logged.
type marked struct{ err, mark error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.mark} }

func mark(err, sentinel error) error { return &marked{err, sentinel} }

// badAnnotation is a malformed annotation's refusal (err wraps
// ErrBadAnnotation).
func badAnnotation(err error) error { return refusal.New(refusal.BadAnnotation, err) }

// BoundsError is the refusal for pod bounds that could not be put in place.
// It matches ErrPodBounds; its cause is refusal.PodBounds, or
// refusal.SharedCgroup when the pod cgroup turned out not to be the pod's
// own (err wraps host.ErrSharedCgroup).
func BoundsError(podDir, parent string, err error) error {
	cause := refusal.PodBounds
	if errors.Is(err, host.ErrSharedCgroup) {
		cause = refusal.SharedCgroup
	}
	return refusal.New(cause, mark(fmt.Errorf("writable cgroups need pod bounds on %q (cgroup parent %q): %w", podDir, parent, err), ErrPodBounds))
}
