// Package optin turns pod and container annotations into the container's
// cgroup mount intent, CgroupMountMode, as KEP-5474 names it.
//
// Use it to read what the user asked for; it says nothing about whether the
// host can grant it (internal/hostcheck) or how the spec is rewritten
// (ocispec). A future CRI field cgroup_mount_mode maps onto the same type.
package optin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"
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

// Annotation keys.
const (
	// Key is the writable-cgroups annotation. It is read as
	// Key+"/container.<name>", then Key+"/pod", then Key; the first found
	// wins, so container scope overrides pod scope.
	Key = "writable-cgroups.noderesource.dev"
	// CRIOKey and CRIOLegacyKey are CRI-O's own opt-in annotations. They
	// mean the same as Key and go under the same safety checks.
	CRIOKey       = "cgroup2-mount-hierarchy-rw.crio.io"
	CRIOLegacyKey = "io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw"
	// MaxDescendantsKey and MaxDepthKey are pod annotations that lower the
	// pod cgroup bounds below the node caps.
	MaxDescendantsKey = "cgroup-max-descendants.cgdelegate.io"
	MaxDepthKey       = "cgroup-max-depth.cgdelegate.io"
)

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

// lookup finds the first key present, pod annotations first, then the
// container's own (CRI-O copies pod annotations to containers; containerd
// does not, so the pod is authoritative).
func lookup(pod *api.PodSandbox, ctr *api.Container, keys ...string) (string, string, bool) {
	for _, src := range []map[string]string{pod.GetAnnotations(), ctr.GetAnnotations()} {
		for _, k := range keys {
			if v, ok := src[k]; ok {
				return k, v, true
			}
		}
	}
	return "", "", false
}

// Resolve returns the container's request from its pod's and its own
// annotations. Our key, scoped, is looked at first; CRI-O's keys after it.
func Resolve(pod *api.PodSandbox, ctr *api.Container) (Request, error) {
	name := ctr.GetName()
	keys := []string{Key + "/container." + name, Key + "/pod", Key, CRIOKey, CRIOLegacyKey}
	k, v, ok := lookup(pod, ctr, keys...)
	if !ok {
		return Request{Mode: Unset}, nil
	}
	m, err := ParseMode(k, v)
	if err != nil {
		return Request{}, err
	}
	return Request{Mode: m, Source: k}, nil
}

// PodBound returns the pod's requested bound from annotation key, capped by
// nodeCap. A missing annotation yields nodeCap. A value above the cap is
// capped, not an error: the annotation may only lower the bound.
func PodBound(pod *api.PodSandbox, key string, nodeCap int) (int, error) {
	v, ok := pod.GetAnnotations()[key]
	if !ok {
		return nodeCap, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: %s=%q: want a whole number of at least 1", ErrBadAnnotation, key, v)
	}
	return min(n, nodeCap), nil
}
