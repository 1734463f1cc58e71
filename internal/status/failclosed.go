package status

// Whether the node fails closed per pod: the runtime's NRI default
// validator refuses a container whose pod carries
// required-plugins.noderesource.dev: '["cgdelegate"]' while cgdelegate is
// not connected. containerd 2.x and CRI-O run NRI with that validator off
// unless a drop-in turns it on; cgdelegate registers and its pods run
// either way, so without this report nothing says the annotation the
// cluster policy puts on every opted-in pod enforces nothing.

import (
	"fmt"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// RequiredPluginsAnnotation is the pod annotation NRI's default validator
// enforces.
const RequiredPluginsAnnotation = "required-plugins.noderesource.dev"

// The states of FailClosed, also the values of the node annotation
// (advert.FailClosedAnnotation).
const (
	// FailClosedEnforced: the runtime's default validator is on; a pod
	// that requires cgdelegate is refused while it is not connected.
	FailClosedEnforced = "enforced"
	// FailClosedOff: the runtime's config leaves the default validator
	// off; the annotation enforces nothing.
	FailClosedOff = "off"
	// FailClosedUnknown: the plugin can not tell (no runtime yet, a
	// runtime other than containerd or CRI-O, its config files disabled
	// or unreadable).
	FailClosedUnknown = "unknown"
)

// FailClosedStates are the states, in the order the docs list them.
var FailClosedStates = []string{FailClosedEnforced, FailClosedOff, FailClosedUnknown}

// FailClosed says whether the runtime enforces RequiredPluginsAnnotation
// on this node, read from the runtime's config files
// (config.ReadValidator) whenever a config comes into force.
type FailClosed struct {
	// State is FailClosedEnforced, FailClosedOff or FailClosedUnknown.
	State string `json:"state"`
	// Reason says why, naming the setting and the file, and what to do
	// when it is not enforced.
	Reason string `json:"reason"`
}

// Enforced reports whether the runtime enforces the annotation.
func (f *FailClosed) Enforced() bool { return f != nil && f.State == FailClosedEnforced }

// the fix of every state but enforced.
const failClosedFix = "install cgdelegate's NRI drop-in for the runtime and restart it " +
	"(the chart's runtimeConfig.install, or by hand: docs/deploying.md, \"Fail closed, per pod\")"

// NewFailClosed is the report for the validator v read for the runtime
// family rt (config.ReadValidator's v, known and err), under the runtime
// called name at version ("" before Configure). A release older than the
// default validator (containerd 2.2, CRI-O 1.34) is off whatever its
// config says: it ignores the table.
func NewFailClosed(name, version string, rt config.Runtime, v config.Validator, known bool, err error) *FailClosed {
	unknown := func(why string) *FailClosed {
		return &FailClosed{State: FailClosedUnknown, Reason: why + ": whether " + RequiredPluginsAnnotation + " is enforced on this node is not known"}
	}
	switch {
	case name == "":
		return unknown("no runtime has configured the plugin yet")
	case rt == config.RuntimeUnknown:
		return unknown(fmt.Sprintf("the runtime %q is neither containerd nor CRI-O, whose NRI config files cgdelegate reads", name))
	case err != nil:
		return unknown(fmt.Sprintf("%s's NRI config can not be read (%v)", name, err))
	case !known:
		return unknown(fmt.Sprintf("the config keys naming %s's config files are none", name))
	}
	k := v.Keys
	if !k.HasValidator(version) {
		return &FailClosed{State: FailClosedOff, Reason: fmt.Sprintf(
			"%s %s has no NRI default validator (%s %d.%d or later has it; it ignores %s): the annotation %s enforces nothing, "+
				"so while cgdelegate is down a pod that asks for a writable cgroup starts without it; upgrade %s",
			k.Runtime, version, k.Runtime, k.Since[0], k.Since[1], k.Table, RequiredPluginsAnnotation, k.Runtime)}
	}
	if v.Enable.On {
		return &FailClosed{State: FailClosedEnforced, Reason: fmt.Sprintf(
			"%s's NRI default validator is on (%s = true under %s in %s): a container of a pod annotated %s: '[\"cgdelegate\"]' "+
				"is refused while cgdelegate is not connected", k.Runtime, k.EnableKey, k.Table, v.Enable.File, RequiredPluginsAnnotation)}
	}
	where := "is not set in its config files (off by default)"
	if v.Enable.File != "" {
		where = "= false in " + v.Enable.File
	}
	return &FailClosed{State: FailClosedOff, Reason: fmt.Sprintf(
		"%s's NRI default validator is off (%s under %s %s): the annotation %s enforces nothing, so while cgdelegate is "+
			"down a pod that asks for a writable cgroup starts without it (read-only, or with the runtime's own mount); %s",
		k.Runtime, k.EnableKey, k.Table, where, RequiredPluginsAnnotation, failClosedFix)}
}

// FailClosedWarning is the report's warning for f, or "" when f is nil or
// enforced.
func FailClosedWarning(f *FailClosed) string {
	if f == nil || f.Enforced() {
		return ""
	}
	return "fail-closed is " + f.State + ": " + f.Reason
}
