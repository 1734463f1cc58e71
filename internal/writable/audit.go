package writable

import (
	"errors"
	"fmt"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/spec"
)

// ErrMissed marks a container that runs without the change cgdelegate would
// have made: it was created while cgdelegate was not connected (before it
// started, or in the window after the runtime dropped it on a request
// timeout, which NRI's per-pod required plugins do not cover).
var ErrMissed = errors.New("created without cgdelegate")

// Audit reports, through report, every live container of ctrs that runs
// without the change its request needed: an opted-in container without
// cgdelegate's hook (so read-only, or writable without bounds or re-check),
// a container that asked for read-only but has the runtime's read-write
// mount, and a runtime-writable container the guard (enforce) would have
// checked.
// Synchronize calls it, so what a reconnect finds is said, never silent.
func (d *Decider) Audit(pods []*api.PodSandbox, ctrs []*api.Container, report func(*api.PodSandbox, *api.Container, error)) {
	if len(ctrs) == 0 {
		return
	}
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, p := range pods {
		byID[p.GetId()] = p
	}
	for _, c := range ctrs {
		if s := c.GetState(); s != api.ContainerState_CONTAINER_CREATED && s != api.ContainerState_CONTAINER_RUNNING {
			continue
		}
		pod := byID[c.GetPodSandboxId()]
		if err := d.missed(pod, c); err != nil {
			report(pod, c, err)
		}
	}
}

// missed is why ctr runs without cgdelegate's change, or nil.
func (d *Decider) missed(pod *api.PodSandbox, ctr *api.Container) error {
	req, err := ResolveRequest(pod, ctr)
	if err != nil {
		return nil // refused at create: it never ran with a bad request
	}
	mnt := spec.Inspect(ctr.GetMounts())
	if mnt.PrivilegedLike {
		return nil
	}
	runtimeWritable := mnt.RuntimeWritable()
	hooked := spec.HasHook(ctr, d.cfg.HookPath)
	switch {
	case req.Mode == ModeWritable && !hooked:
		state := "a read-only /sys/fs/cgroup"
		if mnt.ReadWrite {
			state = "a read-write /sys/fs/cgroup without cgdelegate's pod bounds or hook"
		}
		return fmt.Errorf("%w: asked for writable cgroups (annotation %s) but runs with %s; recreate the container", ErrMissed, req.Source, state)
	case req.Mode == ModeReadOnly && runtimeWritable:
		return fmt.Errorf("%w: asked for read-only cgroups (annotation %s) but runs with the runtime's read-write /sys/fs/cgroup; recreate the container", ErrMissed, req.Source)
	case req.Mode == ModeUnset && runtimeWritable && !hooked && d.cfg.Guard == config.GuardEnforce:
		return fmt.Errorf("%w: runs with the runtime's read-write /sys/fs/cgroup, unchecked by the guard; recreate the container", ErrMissed)
	}
	return nil
}
