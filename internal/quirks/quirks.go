// Package quirks holds what differs between the container runtimes
// cgdelegate runs under, chosen once from the runtime name NRI's Configure
// reports.
//
// Use it instead of comparing runtime names in handlers: a runtime-specific
// behaviour is a field here, set in For. It knows nothing about the host.
package quirks

import "strings"

// Kind is a runtime family.
type Kind string

const (
	Containerd Kind = "containerd"
	CRIO       Kind = "cri-o"
	Unknown    Kind = "unknown"
)

// Quirks are the runtime-specific facts the plugin needs.
type Quirks struct {
	// Kind is the runtime family.
	Kind Kind
	// ValidatorConfig says where the runtime configures NRI's default
	// validator (which may reject namespace or hook adjustments), for the
	// refusal messages users see.
	ValidatorConfig string
	// CopiesPodAnnotations reports a runtime that copies pod annotations
	// into every container's annotations (CRI-O does; containerd does not).
	CopiesPodAnnotations bool
}

// For returns the quirks of the runtime called name (as NRI's Configure
// reports it). An unknown runtime gets the conservative Unknown quirks.
func For(name string) Quirks {
	switch n := strings.ToLower(strings.TrimSpace(name)); {
	case n == "containerd" || strings.HasPrefix(n, "containerd"):
		return Quirks{
			Kind:            Containerd,
			ValidatorConfig: `[plugins."io.containerd.nri.v1.nri".default_validator] in containerd's config.toml`,
		}
	case n == "cri-o" || n == "crio":
		return Quirks{
			Kind:                 CRIO,
			ValidatorConfig:      "[crio.nri.default_validator] in crio.conf",
			CopiesPodAnnotations: true,
		}
	}
	return Quirks{Kind: Unknown, ValidatorConfig: "the runtime's NRI default validator settings"}
}
