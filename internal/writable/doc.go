// Package writable decides what happens to one container's /sys/fs/cgroup:
// left alone, made read-only, or made writable (KEP-5474) with a private
// cgroup namespace, the createRuntime hook and pod cgroup bounds, or refused
// with an error naming the cause.
//
// Use Decider.Decide on every CreateContainer. It is pure: it reads the pod,
// the container, the config and the mount-table verdict it is handed, and
// returns a Plan; it never touches the host. Applying the plan (writing the
// pod bounds, building the NRI adjustment) is the caller's job, with
// internal/host (FS) and Plan.Adjustment.
//
// The safety rules are a list of small checks run in order (see checks.go);
// a new rule, such as an opt-in policy, is one more Check passed to New.
package writable
