package writable

import (
	"fmt"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// OptInPolicy returns the node's opt-in policy (cfg.OptIn, the rules of
// config.OptIn.Allows) as an admission Check for New, or nil when it sets
// no rule (every pod may ask). Use it as the builder of nri.WithAdmission,
// so the rule follows every config that comes into force.
func OptInPolicy(cfg config.Config) Check {
	if cfg.OptIn.IsZero() {
		return nil
	}
	o := cfg.OptIn
	return func(c *Candidate) error {
		if err := o.Allows(c.Pod, c.Ctr); err != nil {
			return fmt.Errorf("%w: %w (requested by %s)", config.ErrNotAllowed, err, c.Plan.Reason())
		}
		return nil
	}
}
