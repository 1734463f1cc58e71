// Package delegate is for programs running inside a container that was
// given a writable, delegated /sys/fs/cgroup (by cgdelegate, or by a runtime
// that does the same). It makes sub-cgroups there usable: it moves the
// container's own processes out of its cgroup namespace root into a leaf
// (the kernel's "no internal processes" rule forbids enabling controllers
// in a cgroup that holds processes), enables the controllers the limits
// need, creates a group with CPU, memory, pids and cpuset limits, starts an
// exec.Cmd directly inside it (CLONE_INTO_CGROUP, with a fallback), reads
// its usage and OOM kills, and removes it.
//
// Use it from a worker manager or launcher written in Go that runs its
// workers in their own cgroups. cmd/cgdelegate-init is the same thing as a
// command. Do not use it on the host or in a container whose cgroups are
// read-only: Root.Check says why delegation is not available and what the
// pod author can change. Root.Confinement reads the container's AppArmor
// profile and seccomp mode, and says when a runtime's default AppArmor
// profile will deny the mounts of a nested runtime or systemd.
//
// Every host path is injected through Options (the cgroup root, /proc, the
// environment); all cgroup file I/O goes through
// github.com/opencontainers/cgroups, so tests point Options at a temp tree
// and set cgroups.TestMode.
package delegate
