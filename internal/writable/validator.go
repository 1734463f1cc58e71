package writable

import (
	"errors"
	"fmt"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/spec"
)

// ErrValidatorRejects is wrapped by the refusal of Check, after the runtime's
// name: the runtime's validator would refuse the container's adjustment
// anyway, with a message that does not name the setting.
var ErrValidatorRejects = errors.New("NRI default validator is set to refuse cgdelegate's adjustment")

// ValidatorRule reads the NRI default validator settings of the runtime the
// plugin runs under (runtime, from Configure): containerd's config
// cfg.ContainerdConfig names, or CRI-O's cfg.CRIOConfig and
// cfg.CRIOConfigDir. It returns the admission rule for them, for
// nri.WithRuntimeAdmission: nil when they refuse nothing cgdelegate does,
// the files are disabled or missing, or the runtime is neither (nothing is
// known of its validator).
func ValidatorRule(cfg config.Config, runtime config.Runtime) (Check, error) {
	v, known, err := config.ReadValidator(cfg, runtime)
	if err != nil || !known {
		return nil, err
	}
	return ValidatorCheck(v, cfg.HookPath), nil
}

// ValidatorCheck is the admission rule for v: it refuses a container whose
// adjustment v would refuse, naming the setting, the file and the fix. It
// is nil when v refuses nothing cgdelegate adds.
func ValidatorCheck(v config.Validator, hookPath string) Check {
	if key, _ := v.Rejects(true, true); key == "" {
		return nil
	}
	return func(c *Candidate) error {
		key, file := v.Rejects(!spec.HasHook(c.Ctr, hookPath), !hasCgroupNS(c.Ctr))
		if key == "" {
			return nil
		}
		what := "OCI hook (cgdelegate-hook, createRuntime)"
		if key == v.Keys.RejectNamespacesKey {
			what = "cgroup namespace"
		}
		return fmt.Errorf("%s's %w: %s = true under %s in %s refuses the %s cgdelegate adds to this container; "+
			"set %s = false there and restart %s, or do not ask for writable cgroups",
			v.Keys.Runtime, ErrValidatorRejects, key, v.Keys.Table, file, what, key, v.Keys.Runtime)
	}
}

func hasCgroupNS(ctr *api.Container) bool {
	for _, ns := range ctr.GetLinux().GetNamespaces() {
		if ns.GetType() == "cgroup" {
			return true
		}
	}
	return false
}
