package hook

import "errors"

// Sentinel errors. Run wraps them with what was found and how to fix it;
// match them with errors.Is. Host and bound failures wrap the sentinels of
// internal/host instead.
var (
	// ErrBadState means the OCI state on stdin is not usable.
	ErrBadState = errors.New("invalid OCI state on stdin")
	// ErrBadOptions means the hook was started with unusable options.
	ErrBadOptions = errors.New("invalid options")
	// ErrNoProcess means the container init named in the state is gone.
	ErrNoProcess = errors.New("container process not found")
	// ErrSameCgroupNS means the container shares the host's cgroup
	// namespace, where a writable cgroup2 mount could strip nsdelegate.
	ErrSameCgroupNS = errors.New("container shares the host cgroup namespace")
	// ErrContainerCgroup means the container's cgroup can not be used.
	ErrContainerCgroup = errors.New("unusable container cgroup")
	// ErrOutsidePod means the container cgroup is not below the pod cgroup
	// whose bounds were checked.
	ErrOutsidePod = errors.New("container cgroup is outside the pod cgroup")
	// ErrBundleConfig means the bundle's config.json can not be read.
	ErrBundleConfig = errors.New("cannot read the bundle config")
	// ErrUnmappedRoot means a user-namespaced container has no mapping for
	// the user or group its process runs as (root, usually).
	ErrUnmappedRoot = errors.New("container user is not mapped to a host ID")
)
