// The request: pod and container annotations turned into the container's
// cgroup mount intent, CgroupMountMode, as KEP-5474 names it, and the pod
// bound annotations. It says what the user asked for, not whether the host
// can grant it (checks.go) or how the spec is rewritten (internal/spec). A
// future CRI field cgroup_mount_mode maps onto the same type.

package writable

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
)

// CgroupMountMode is how a container's /sys/fs/cgroup is to be mounted.
type CgroupMountMode int

const (
	// ModeUnset means nothing was asked for; the runtime's default applies.
	ModeUnset CgroupMountMode = iota
	// ModeReadOnly asks for the default read-only cgroup mount.
	ModeReadOnly
	// ModeWritable asks for a read-write cgroup2 mount in a private cgroup
	// namespace.
	ModeWritable
)

func (m CgroupMountMode) String() string {
	switch m {
	case ModeReadOnly:
		return "ReadOnly"
	case ModeWritable:
		return "Writable"
	}
	return "Unset"
}

// ErrBadAnnotation is wrapped by every annotation error.
var ErrBadAnnotation = errors.New("invalid annotation")

// Request is the resolved intent of one container.
type Request struct {
	// Mode is the requested mount mode.
	Mode CgroupMountMode
	// Source names the annotation the mode came from ("" when Unset).
	Source string
}

// ParseMode parses an annotation value. Writable and true enable, ReadOnly
// and false disable; anything else is an error naming key and value.
func ParseMode(key, value string) (CgroupMountMode, error) {
	switch strings.TrimSpace(value) {
	case "Writable", "true":
		return ModeWritable, nil
	case "ReadOnly", "false":
		return ModeReadOnly, nil
	}
	return ModeUnset, badAnnotation(fmt.Errorf("%w: %s=%q: want Writable, true, ReadOnly or false", ErrBadAnnotation, key, value))
}

// parseKubeRay parses the KubeRay guide plugin's key, which knows only
// true and false.
func parseKubeRay(key, value string) (CgroupMountMode, error) {
	switch strings.TrimSpace(value) {
	case "true":
		return ModeWritable, nil
	case "false":
		return ModeReadOnly, nil
	}
	return ModeUnset, badAnnotation(fmt.Errorf("%w: %s=%q: want true or false", ErrBadAnnotation, key, value))
}

// ResolveRequest returns the container's request from its pod's and its own
// annotations. Our key, scoped, is looked at first; CRI-O's keys after it,
// then the KubeRay guide plugin's.
func ResolveRequest(pod *api.PodSandbox, ctr *api.Container) (Request, error) {
	f, ok := annotations.ForContainer(pod, ctr, annotations.WritableCgroups, annotations.CRIOWritable, annotations.CRIOWritableLegacy,
		annotations.KubeRayWritable)
	if !ok {
		return Request{Mode: ModeUnset}, nil
	}
	parse := ParseMode
	if f.Key == annotations.KubeRayWritable.Name {
		parse = parseKubeRay
	}
	m, err := parse(f.Key, f.Value)
	if err != nil {
		return Request{}, err
	}
	return Request{Mode: m, Source: f.Key}, nil
}
