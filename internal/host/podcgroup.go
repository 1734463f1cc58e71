package host

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrSharedCgroup means a pod cgroup from the runtime is not one pod's own:
// the cgroup root, a cgroup of the kubelet or systemd that holds other pods
// or the system, or a systemd unit. Bounds written there would bound every
// pod or process below it.
var ErrSharedCgroup = errors.New("not a pod's own cgroup")

// sharedCgroups are the well-known cgroups that hold other pods or the
// system, by name: the kubelet's kubepods and QoS cgroups (cgroupfs and
// systemd driver) and systemd's top-level slices and init scope.
var sharedCgroups = map[string]string{
	"kubepods":                  "the kubelet's cgroup of every pod",
	"kubepods.slice":            "the kubelet's cgroup of every pod",
	"burstable":                 "the kubelet's cgroup of every burstable pod",
	"besteffort":                "the kubelet's cgroup of every best-effort pod",
	"kubepods-burstable.slice":  "the kubelet's cgroup of every burstable pod",
	"kubepods-besteffort.slice": "the kubelet's cgroup of every best-effort pod",
	"system.slice":              "systemd's slice of every system service",
	"user.slice":                "systemd's slice of every user session",
	"machine.slice":             "systemd's slice of every virtual machine and container",
	"init.scope":                "the cgroup of the init process",
}

// CheckPodCgroup reports, as an error wrapping ErrSharedCgroup, whether the
// cgroup at rel (as PodPath returns it) can not be a pod's own cgroup. It
// is a rule on the path alone, so it runs before anything is written:
//
//   - the cgroup root is refused;
//   - so are the cgroups of sharedCgroups, and a systemd service or scope
//     (a unit's cgroup: a service, a session, a container);
//   - below the kubelet's kubepods cgroup (cgroupfs "kubepods", systemd
//     "kubepods.slice" or "<root>-kubepods.slice"), the cgroup must be
//     named as the kubelet names a pod's: "pod<uid>" (cgroupfs) or
//     "...-pod<uid>.slice" (systemd); anything else there (a QoS cgroup)
//     holds other pods;
//   - elsewhere (a CRI client's own cgroup parent, such as crictl's
//     "/mypod" or "mypod.slice") any other name is the pod's own.
func CheckPodCgroup(rel string) error {
	if rel == "/" || rel == "" {
		return fmt.Errorf("%w: %q is the cgroup root", ErrSharedCgroup, "/")
	}
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	last := parts[len(parts)-1]
	if what, ok := sharedCgroups[last]; ok {
		return fmt.Errorf("%w: %q is %s", ErrSharedCgroup, rel, what)
	}
	if strings.HasSuffix(last, ".service") || strings.HasSuffix(last, ".scope") {
		return fmt.Errorf("%w: %q is a systemd unit's cgroup (a service, a session or a container), not a pod's", ErrSharedCgroup, rel)
	}
	for _, p := range parts[:len(parts)-1] {
		if isKubepods(p) && !isPodName(last) {
			return fmt.Errorf("%w: %q is below the kubelet's %q but not named as the kubelet names a pod's cgroup (pod<uid>, or ...-pod<uid>.slice): it holds other pods", ErrSharedCgroup, rel, p)
		}
	}
	if isKubepods(last) {
		return fmt.Errorf("%w: %q is the kubelet's cgroup of every pod", ErrSharedCgroup, rel)
	}
	return nil
}

// isKubepods reports whether name is the kubelet's cgroup of every pod:
// "kubepods" (cgroupfs), "kubepods.slice" or, with a cgroup root other
// than "/", "<root>-kubepods.slice" (systemd).
func isKubepods(name string) bool {
	return name == "kubepods" || name == "kubepods.slice" || strings.HasSuffix(name, "-kubepods.slice")
}

// isPodName reports whether name is a pod cgroup as the kubelet names it:
// "pod<uid>" (cgroupfs), "<parent>-pod<uid>.slice" (systemd, the uid's
// dashes turned into underscores).
func isPodName(name string) bool {
	if uid, ok := strings.CutPrefix(name, "pod"); ok && uid != "" {
		return true
	}
	slice, ok := strings.CutSuffix(name, ".slice")
	if !ok {
		return false
	}
	i := strings.LastIndex(slice, "-pod")
	return i >= 0 && len(slice) > i+len("-pod") && !strings.Contains(slice[i+1:], "-")
}

// CheckPodCgroup is the package's CheckPodCgroup, then a look at the
// cgroup's children: a cgroup holding the kubelet's kubepods or QoS
// cgroup, or a cgroup named as a pod's, is an ancestor of other pods (the
// parent of a kubelet whose cgroup root is not "/", or of several CRI
// clients' pods), however it is named. A pod's own children are its
// containers, named by the runtime after their IDs. A cgroup that does not
// exist passes here; the caller finds it missing.
func (f *FS) CheckPodCgroup(rel string) error {
	if err := CheckPodCgroup(rel); err != nil {
		return err
	}
	entries, err := os.ReadDir(f.Dir(rel))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the children of pod cgroup %q: %w", f.Dir(rel), err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		if _, shared := sharedCgroups[name]; shared || isKubepods(name) || isPodName(name) {
			return fmt.Errorf("%w: %q holds %q, a cgroup of other pods", ErrSharedCgroup, rel, name)
		}
	}
	return nil
}
