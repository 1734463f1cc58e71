package writable

import (
	"fmt"

	"github.com/containerd/nri/pkg/api"

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
		if err := o.Allows(c.Pod.GetNamespace(), c.Pod.GetRuntimeHandler(), InUserNamespace(c.Pod, c.Ctr)); err != nil {
			return fmt.Errorf("%w: %w (requested by %s)", config.ErrNotAllowed, err, c.Plan.Reason())
		}
		return nil
	}
}

// InUserNamespace reports whether the pod sandbox or the container has a
// user namespace, as the runtime sends a hostUsers: false pod.
func InUserNamespace(pod *api.PodSandbox, ctr *api.Container) bool {
	return hasUser(pod.GetLinux().GetNamespaces()) || hasUser(ctr.GetLinux().GetNamespaces())
}

func hasUser(namespaces []*api.LinuxNamespace) bool {
	for _, ns := range namespaces {
		if ns.GetType() == "user" {
			return true
		}
	}
	return false
}
