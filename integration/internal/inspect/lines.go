package inspect

import "strings"

// CgroupPath returns the cgroup v2 path from /proc/<pid>/cgroup content
// (the "0::" line), or "" if there is none.
func CgroupPath(procCgroup string) string {
	for _, l := range strings.Split(procCgroup, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "0::"); ok {
			return p
		}
	}
	return ""
}

// KeyValues parses "key value" lines such as cgroup.stat.
func KeyValues(s string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), " "); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// Markers returns the values of "KEY=value" lines that a container script
// printed, keyed by KEY; later lines win.
func Markers(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && k != "" && strings.ToUpper(k) == k && !strings.ContainsAny(k, " \t") {
			m[k] = v
		}
	}
	return m
}
