package hook

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
)

// checkNsdelegate: the host cgroup2 mount must have nsdelegate, or a
// writable cgroup mount in the container is not confined to its namespace.
func checkNsdelegate(r *run) error {
	st, err := host.CheckMounts(r.opts.MountinfoPath, r.opts.CgroupRoot)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return fmt.Errorf("read host mount table: %w; point --mountinfo at the host's /proc/1/mountinfo", err)
	}
	if err != nil {
		return err
	}
	return st.Err()
}

// checkCgroupNS: the container init must be in a cgroup namespace other
// than the host's (that of pid 1 in the host /proc).
func checkCgroupNS(r *run) error {
	pid := r.state.Pid
	if _, err := os.Stat(r.pidDir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: pid %d of container %q has no %s; the container init exited before the hook ran, or --proc is not the host /proc",
				ErrNoProcess, pid, r.state.ID, r.pidDir)
		}
		return fmt.Errorf("container %q: %w", r.state.ID, err)
	}
	ctr, err := os.Readlink(filepath.Join(r.pidDir, "ns", "cgroup"))
	if err != nil {
		return fmt.Errorf("cgroup namespace of container %q: %w; the kernel needs cgroup namespaces (CONFIG_CGROUPS, Linux 4.6+)", r.state.ID, err)
	}
	hostLink := filepath.Join(r.opts.ProcRoot, "1", "ns", "cgroup")
	host, err := os.Readlink(hostLink)
	if err != nil {
		return fmt.Errorf("host cgroup namespace: %w; point --proc at the host /proc", err)
	}
	if ctr == host {
		return refusal.New(refusal.NoCgroupNS, fmt.Errorf("%w: pid %d of container %q is in %s, the same as host pid 1; give the container a private cgroup namespace (a \"cgroup\" entry in linux.namespaces; the cgdelegate plugin adds it to opted-in containers)",
			ErrSameCgroupNS, pid, r.state.ID, ctr))
	}
	return nil
}

// checkBounds finds the container's cgroup, then checks that its pod cgroup
// is the pod's own (host.CheckPodCgroup) and carries the descendant and
// depth bounds.
func checkBounds(r *run) error {
	cg, err := containerCgroup(r)
	if err != nil {
		return err
	}
	r.cgroup = cg
	pod := path.Dir(cg)
	if r.opts.PodCgroup != "" {
		if pod, err = host.PodPath(r.opts.PodCgroup); err != nil {
			return fmt.Errorf("--pod-cgroup: %w", err)
		}
	}
	if pod == "/" {
		return fmt.Errorf("%w: container %q is in %q, directly below the cgroup root, so there is no pod cgroup to bound; run it in a pod cgroup or pass --pod-cgroup",
			ErrContainerCgroup, r.state.ID, cg)
	}
	if err := r.fs.CheckPodCgroup(pod); err != nil {
		return refusal.New(refusal.SharedCgroup, fmt.Errorf("container %q is in %q: its pod cgroup must be the pod's own for the bounds to be the pod's: %w", r.state.ID, cg, err))
	}
	if !strings.HasPrefix(cg, pod+"/") {
		return fmt.Errorf("%w: container %q is in %q, not below pod cgroup %q; pass the pod's cgroup parent as --pod-cgroup",
			ErrOutsidePod, r.state.ID, cg, pod)
	}
	if err := r.fs.CheckBounds(pod, r.opts.Limit); err != nil {
		return fmt.Errorf("%w; the cgdelegate plugin writes them when it admits a writable container: check that it is running and required by the runtime, or write them to the pod cgroup by hand", err)
	}
	return nil
}

// containerCgroup reads the container init's cgroup v2 path from
// <proc>/<pid>/cgroup, as the hook's own cgroup namespace sees it.
func containerCgroup(r *run) (string, error) {
	file := filepath.Join(r.pidDir, "cgroup")
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: %s is gone; the container init exited before the hook ran", ErrNoProcess, file)
		}
		return "", fmt.Errorf("container %q cgroup: %w", r.state.ID, err)
	}
	defer f.Close()
	cg, err := host.ParseProcCgroup(f)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w; the host must use cgroup v2", ErrContainerCgroup, file, err)
	}
	if !strings.HasPrefix(cg, "/") || path.Clean(cg) != cg {
		return "", fmt.Errorf("%w: %s names %q, want a clean absolute path; run the hook in the host cgroup namespace",
			ErrContainerCgroup, file, cg)
	}
	return cg, nil
}
