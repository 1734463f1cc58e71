package refusal

import (
	"errors"
	"fmt"
	"testing"
)

func TestCauseOf(t *testing.T) {
	base := errors.New("cgroup2 at /sys/fs/cgroup has no nsdelegate")
	for _, tc := range []struct {
		name string
		err  error
		want Cause
	}{
		{"refusal", New(NoNsdelegate, base), NoNsdelegate},
		{"wrapped", fmt.Errorf("refused web/app: %w", New(Pinning, base)), Pinning},
		{"the outer decision wins", New(Policy, New(BadAnnotation, base)), Policy},
		{"joined", errors.Join(base, New(PodBounds, base)), PodBounds},
		{"no refusal", base, Other},
		{"nil", nil, Other},
	} {
		if got := CauseOf(tc.err); got != tc.want {
			t.Errorf("%s: CauseOf = %q, want %q", tc.name, got, tc.want)
		}
	}
	if New(Policy, nil) != nil {
		t.Error("New(cause, nil) must be nil")
	}
	if err := New(Policy, base); err.Error() != base.Error() || !errors.Is(err, base) {
		t.Errorf("a refusal must keep its error's text and chain: %v", err)
	}
}
