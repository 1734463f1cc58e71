// Package optin turns pod and container annotations into the container's
// cgroup mount intent, CgroupMountMode, as KEP-5474 names it.
//
// Use it to read what the user asked for; it says nothing about whether the
// host can grant it (internal/hostcheck) or how the spec is rewritten
// (internal/spec). A future CRI field cgroup_mount_mode maps onto the same type.
package optin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
)

// CgroupMountMode is how a container's /sys/fs/cgroup is to be mounted.
type CgroupMountMode int

const (
	// Unset means nothing was asked for; the runtime's default applies.
	Unset CgroupMountMode = iota
	// ReadOnly asks for the default read-only cgroup mount.
	ReadOnly
	// Writable asks for a read-write cgroup2 mount in a private cgroup
	// namespace.
	Writable
)

func (m CgroupMountMode) String() string {
	switch m {
	case ReadOnly:
		return "ReadOnly"
	case Writable:
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
		return Writable, nil
	case "ReadOnly", "false":
		return ReadOnly, nil
	}
	return Unset, fmt.Errorf("%w: %s=%q: want Writable, true, ReadOnly or false", ErrBadAnnotation, key, value)
}

// parseKubeRay parses the KubeRay guide plugin's key, which knows only
// true and false.
func parseKubeRay(key, value string) (CgroupMountMode, error) {
	switch strings.TrimSpace(value) {
	case "true":
		return Writable, nil
	case "false":
		return ReadOnly, nil
	}
	return Unset, fmt.Errorf("%w: %s=%q: want true or false", ErrBadAnnotation, key, value)
}

// Resolve returns the container's request from its pod's and its own
// annotations. Our key, scoped, is looked at first; CRI-O's keys after it,
// then the KubeRay guide plugin's.
func Resolve(pod *api.PodSandbox, ctr *api.Container) (Request, error) {
	f, ok := annotations.ForContainer(pod, ctr, annotations.WritableCgroups, annotations.CRIOWritable, annotations.CRIOWritableLegacy,
		annotations.KubeRayWritable)
	if !ok {
		return Request{Mode: Unset}, nil
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

// PodBound returns the pod's requested bound from annotation key, capped by
// nodeCap. A missing annotation yields nodeCap. A value above the cap is
// capped, not an error: the annotation may only lower the bound.
func PodBound(pod *api.PodSandbox, key annotations.Key, nodeCap int) (int, error) {
	f, ok := annotations.ForPod(pod, key)
	if !ok {
		return nodeCap, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(f.Value))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: %s=%q: want a whole number of at least 1", ErrBadAnnotation, f.Key, f.Value)
	}
	return min(n, nodeCap), nil
}
