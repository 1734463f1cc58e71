// Package annotations is the one registry of the annotation keys a pod
// author (or another implementation we accept) can write, and the one
// lookup that reads them.
//
// Use it whenever cgdelegate reads a user-written annotation: declare the
// key here (with the values it takes, for docs/writable-cgroups.md) and read it with
// ForPod, ForContainer or First. Do not use it for annotations cgdelegate writes itself
// (the CPU assignment stamp belongs to internal/cpumanager/policy). Parsing a value is
// the owner's job (optin, cpumanager/budget, cpumanager); this package only finds it.
package annotations

import (
	"strings"

	"github.com/containerd/nri/pkg/api"
)

// Scope says which forms of a key are looked up.
type Scope int

const (
	// Effective is NRI's effective-annotation convention
	// (plugin.GetEffectiveAnnotation): Name+"/container.<name>", then
	// Name+"/pod", then Name; the first found wins.
	Effective Scope = iota
	// Pod is the key exactly as Name.
	Pod
	// PerContainer is Name+"/container.<name>" only: a value for one
	// container with no pod-wide fallback.
	PerContainer
)

// Key is one annotation key.
type Key struct {
	// Name is the key, or the base of its scoped forms.
	Name string
	// Scope says which forms are read.
	Scope Scope
	// Owner is who defines the key: "cgdelegate", or the other
	// implementation whose key we accept.
	Owner string
	// Values says what the value may be, as docs/writable-cgroups.md documents it.
	Values string
}

// Forms returns the keys as a user writes them, in lookup order, with the
// container name written as <name>.
func (k Key) Forms() []string {
	switch k.Scope {
	case Pod:
		return []string{k.Name}
	case PerContainer:
		return []string{k.Name + containerInfix + "<name>"}
	}
	return []string{k.Name + containerInfix + "<name>", k.Name + podSuffix, k.Name}
}

const (
	containerInfix = "/container."
	podSuffix      = "/pod"
)

// The registry. Every key a user can write is declared here, once.
var (
	// WritableCgroups asks for a read-write /sys/fs/cgroup (KEP-5474's
	// cgroupMountMode).
	WritableCgroups = Key{
		Name: "writable-cgroups.noderesource.dev", Scope: Effective, Owner: "cgdelegate",
		Values: "`Writable`, `true`, `ReadOnly`, `false`",
	}
	// CRIOWritable and CRIOWritableLegacy are CRI-O's own opt-in keys;
	// they mean the same as WritableCgroups and pass the same checks.
	CRIOWritable = Key{
		Name: "cgroup2-mount-hierarchy-rw.crio.io", Scope: Pod, Owner: "CRI-O",
		Values: "same as writable-cgroups.noderesource.dev",
	}
	CRIOWritableLegacy = Key{
		Name: "io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw", Scope: Pod, Owner: "CRI-O",
		Values: "same as writable-cgroups.noderesource.dev",
	}
	// KubeRayWritable is the opt-in key of the third-party NRI plugin
	// (pmengelbert/nri-writable-cgroups) that KubeRay's writable-cgroups
	// guide installs; accepted so that its users can switch without
	// touching their manifests. That plugin acts on "true" only.
	KubeRayWritable = Key{
		Name: "writable-cgroups.nri.io/enable", Scope: Pod, Owner: "the NRI plugin of KubeRay's writable-cgroups guide",
		Values: "`true`, `false`",
	}
	// MaxDescendants and MaxDepth lower the pod cgroup bounds below the
	// node caps.
	MaxDescendants = Key{
		Name: "cgroup-max-descendants.cgdelegate.io", Scope: Pod, Owner: "cgdelegate",
		Values: "whole number ≥ 1; may only lower the node cap",
	}
	MaxDepth = Key{
		Name: "cgroup-max-depth.cgdelegate.io", Scope: Pod, Owner: "cgdelegate",
		Values: "whole number ≥ 1; may only lower the node cap",
	}
	// PodResources and ContainerResources state budgets exactly when the
	// values the runtime converted are ambiguous (internal/cpumanager/budget).
	PodResources = Key{
		Name: "resources.cgdelegate.io/pod", Scope: Pod, Owner: "cgdelegate",
		Values: "`cpu=<amt>,memory=<amt>` (see internal/cpumanager/budget)",
	}
	ContainerResources = Key{
		Name: "resources.cgdelegate.io", Scope: PerContainer, Owner: "cgdelegate",
		Values: "`cpu=<amt>,memory=<amt>` (see internal/cpumanager/budget)",
	}
	// Lifecycle marks init containers and sidecars for the CPU policy; NRI
	// does not say which containers are init containers.
	Lifecycle = Key{
		Name: "lifecycle.cgdelegate.io", Scope: PerContainer, Owner: "cgdelegate",
		Values: "`init`, `sidecar`, `regular`",
	}
)

// All returns every registered key, in the order docs/writable-cgroups.md lists them.
func All() []Key {
	return []Key{
		WritableCgroups, CRIOWritable, CRIOWritableLegacy, KubeRayWritable,
		MaxDescendants, MaxDepth,
		PodResources, ContainerResources, Lifecycle,
	}
}

// Found is one annotation found by a lookup.
type Found struct {
	// Key is the key as written (e.g. "writable-cgroups.noderesource.dev/pod").
	Key string
	// Value is its value, untrimmed.
	Value string
}

// First finds the first of keys for the container called ctrName: first in
// the pod's annotations, then in the container's own (CRI-O copies pod
// annotations to its containers, containerd does not, so the pod is
// authoritative). Within one source the keys are tried in order, and each
// key's forms in Forms order. ctrAnn may be nil.
func First(podAnn, ctrAnn map[string]string, ctrName string, keys ...Key) (Found, bool) {
	for _, src := range [2]map[string]string{podAnn, ctrAnn} {
		if len(src) == 0 {
			continue
		}
		for _, k := range keys {
			if f, ok := find(src, ctrName, k); ok {
				return f, true
			}
		}
	}
	return Found{}, false
}

// ForPod finds a pod-wide key in the pod's annotations.
func ForPod(pod *api.PodSandbox, key Key) (Found, bool) {
	return First(pod.GetAnnotations(), nil, "", key)
}

// ForContainer finds the first of keys for ctr in its pod's annotations,
// then in its own.
func ForContainer(pod *api.PodSandbox, ctr *api.Container, keys ...Key) (Found, bool) {
	return First(pod.GetAnnotations(), ctr.GetAnnotations(), ctr.GetName(), keys...)
}

// find looks key up in one map. It walks the map instead of building the
// scoped key strings, so the lookup on every container start allocates
// nothing; pods carry a handful of annotations.
func find(m map[string]string, ctrName string, k Key) (Found, bool) {
	if k.Scope == Pod {
		v, ok := m[k.Name]
		return Found{Key: k.Name, Value: v}, ok
	}
	// rank: 3 container scope, 2 pod scope, 1 bare key.
	best, bestRank := Found{}, 0
	for ak, v := range m {
		rest, ok := strings.CutPrefix(ak, k.Name)
		if !ok {
			continue
		}
		rank := 0
		switch {
		case rest == "":
			rank = 1
		case rest == podSuffix:
			rank = 2
		case strings.HasPrefix(rest, containerInfix) && rest[len(containerInfix):] == ctrName:
			rank = 3
		}
		if k.Scope == PerContainer && rank != 3 {
			continue
		}
		if rank > bestRank {
			best, bestRank = Found{Key: ak, Value: v}, rank
		}
	}
	return best, bestRank > 0
}
