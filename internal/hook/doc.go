// Package hook is the OCI hook cgdelegate-hook: the last check, made by the
// runtime itself, that a container given a writable /sys/fs/cgroup is safe
// to start, and the chown that lets a user-namespaced container use it.
//
// The cgdelegate NRI plugin injects the hook (NRI AddHooks) into every
// container it makes writable; runtimes that load hooks from a directory
// (CRI-O, podman) can use contrib/hooks.d/cgdelegate-hook.json instead. Run
// reads the OCI state from stdin and, in this order:
//
//  1. checks that the host cgroup2 mount has nsdelegate (internal/host);
//  2. checks that the container init has a cgroup namespace of its own;
//  3. finds the container's cgroup and checks that its pod cgroup carries
//     cgroup.max.descendants and cgroup.max.depth no looser than the limits;
//  4. for a user-namespaced container, hands the container cgroup to the
//     host UID/GID its process user (root, usually) maps to
//     (internal/host FS.Delegate), because runc's cgroupfs driver does
//     not. runc's systemd driver chowns the same directory and files to
//     the same UID before the hook runs (only when the spec has a cgroup
//     namespace and a read-write /sys/fs/cgroup, as cgdelegate makes it),
//     so the hook repeats it and adds the GID.
//
// # Why createRuntime
//
// The hook is meant for the createRuntime stage of the OCI runtime spec. Those
// hooks run in the runtime namespace, so host paths (/proc/1/mountinfo,
// /proc/<pid>/ns/cgroup, /sys/fs/cgroup) mean what they say and the hook can
// chown host cgroup files. They run during the create operation, after the
// container's namespaces and cgroup exist but before pivot_root, so the
// container process can be inspected, yet no user code has run: a non-zero
// exit makes the runtime abort the create, and the chown is done before the
// container's root could need it. prestart runs at the same point in runc
// but is deprecated; createContainer and startContainer run in the
// container namespace, where the host is out of sight; poststart is too late
// to refuse anything.
//
// # When not to use it
//
// It is not the admission decision: the plugin refuses unsafe containers at
// CreateContainer with the same checks, and this hook only re-verifies at
// start. It never writes bounds (the plugin does, through internal/host)
// and never changes mounts or namespaces (internal/spec). It must not be injected
// in a container-namespace stage.
package hook
