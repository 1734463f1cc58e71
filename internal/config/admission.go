package config

// The node's admission rules (the optIn section): which pods may have
// writable cgroups at all, by namespace, runtime handler and user
// namespace. internal/writable runs them (writable.OptInPolicy) before its
// host and spec checks; safety rules that hold on every node live there,
// not here.

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// ErrNotAllowed is wrapped by every refusal of the opt-in policy.
var ErrNotAllowed = errors.New("writable cgroups not allowed by the node's opt-in policy")

// Allows reports whether the node's opt-in policy lets a container of a pod
// in namespace, run by runtimeHandler, in a user namespace or not
// (userns), have writable cgroups: nil, or an error naming the first rule
// that fails and the value. The rules apply in the order the config lists
// them; the patterns are those Validate accepted. (Plain values, not the
// NRI types: the hook binary imports this package, and the NRI API would
// double its size and its start.)
func (o OptIn) Allows(namespace, runtimeHandler string, userns bool) error {
	if len(o.Namespaces) > 0 && !matchAny(o.Namespaces, namespace) {
		return fmt.Errorf("namespace %q is not in optIn.namespaces %s", namespace, list(o.Namespaces))
	}
	if len(o.RuntimeHandlers) > 0 && !matchAny(o.RuntimeHandlers, runtimeHandler) {
		return fmt.Errorf("runtime handler %q is not in optIn.runtimeHandlers %s", runtimeHandler, list(o.RuntimeHandlers))
	}
	if o.RequireUserNamespace && !userns {
		return errors.New("the pod is not in a user namespace (hostUsers: false) and optIn.requireUserNamespace is true")
	}
	return nil
}

// matchAny reports whether s matches one of the globs. A bad pattern
// matches nothing; config.Validate refuses them.
func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, err := path.Match(p, s); ok && err == nil {
			return true
		}
	}
	return false
}

// list renders patterns as the config writes them: ["team-*", "ml"].
func list(patterns []string) string {
	q := make([]string, len(patterns))
	for i, p := range patterns {
		q[i] = strconv.Quote(p)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
