package config

import "strings"

// Runtime is a runtime family: where its NRI validator settings live
// depends on it.
type Runtime string

const (
	RuntimeContainerd Runtime = "containerd"
	RuntimeCRIO       Runtime = "cri-o"
	RuntimeUnknown    Runtime = "unknown"
)

// RuntimeOf returns the family of the runtime called name (as NRI's
// Configure reports it); RuntimeUnknown for any other, or for "" (before
// Configure).
func RuntimeOf(name string) Runtime {
	switch n := strings.ToLower(strings.TrimSpace(name)); {
	case n == "containerd" || strings.HasPrefix(n, "containerd"):
		return RuntimeContainerd
	case n == "cri-o" || n == "crio":
		return RuntimeCRIO
	}
	return RuntimeUnknown
}
