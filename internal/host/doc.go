// Package host is cgdelegate's access to the host: the mount-table check
// (cgroup v2 with nsdelegate at the cgroup root, and the watch on the mount
// table), the only writer of the host cgroup tree (FS: pod bounds,
// delegation chowns, cpuset reads), and atomic files for state other
// programs read.
//
// Use it for anything that reads or writes the host outside a container's
// spec; every path is under a root the caller injects, so tests use temp
// trees (internal/fakehost). Do not use it for decisions (internal/writable)
// or spec rewrites (internal/spec).
package host
