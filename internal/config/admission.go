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

	"github.com/containerd/nri/pkg/api"
)

// ErrNotAllowed is wrapped by every refusal of the opt-in policy.
var ErrNotAllowed = errors.New("writable cgroups not allowed by the node's opt-in policy")

// Allows reports whether the node's opt-in policy lets the pod's container
// have writable cgroups: nil, or an error naming the first rule that fails
// and the value. The rules apply in the order the config lists them; the
// patterns are those Validate accepted.
func (o OptIn) Allows(pod *api.PodSandbox, ctr *api.Container) error {
	if ns := pod.GetNamespace(); len(o.Namespaces) > 0 && !matchAny(o.Namespaces, ns) {
		return fmt.Errorf("namespace %q is not in optIn.namespaces %s", ns, list(o.Namespaces))
	}
	if h := pod.GetRuntimeHandler(); len(o.RuntimeHandlers) > 0 && !matchAny(o.RuntimeHandlers, h) {
		return fmt.Errorf("runtime handler %q is not in optIn.runtimeHandlers %s", h, list(o.RuntimeHandlers))
	}
	if o.RequireUserNamespace && !InUserNamespace(pod, ctr) {
		return errors.New("the pod is not in a user namespace (hostUsers: false) and optIn.requireUserNamespace is true")
	}
	return nil
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
