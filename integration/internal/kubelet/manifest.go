package kubelet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// ErrInvalidManifest is wrapped by every DecodePod problem.
var ErrInvalidManifest = errors.New("invalid pod manifest")

// DecodePod strictly decodes a Pod manifest (YAML or JSON): unknown or
// duplicated fields are errors, and it must be a v1 Pod with a name.
func DecodePod(b []byte) (*corev1.Pod, error) {
	var p corev1.Pod
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidManifest, err)
	}
	var errs []error
	if p.APIVersion != "v1" || p.Kind != "Pod" {
		errs = append(errs, fmt.Errorf("%w: apiVersion %q, kind %q: want v1 Pod", ErrInvalidManifest, p.APIVersion, p.Kind))
	}
	if p.Name == "" {
		errs = append(errs, fmt.Errorf("%w: metadata.name is empty", ErrInvalidManifest))
	}
	if len(p.Spec.Containers) == 0 {
		errs = append(errs, fmt.Errorf("%w: pod %q has no containers", ErrInvalidManifest, p.Name))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &p, nil
}

// StaticPods is a kubelet's static pod directory (staticPodPath).
type StaticPods struct {
	Dir string
}

// path is the manifest file of the pod called name.
func (s StaticPods) path(name string) string { return filepath.Join(s.Dir, name+".yaml") }

// Write writes the pod's manifest as <name>.yaml and returns its path. It
// writes a dot file first and renames it into place, so the kubelet (which
// ignores dot files) never reads half a manifest.
func (s StaticPods) Write(p *corev1.Pod) (string, error) {
	if p.Name == "" {
		return "", fmt.Errorf("%w: metadata.name is empty", ErrInvalidManifest)
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("static pod %s: %w", p.Name, err)
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return "", fmt.Errorf("static pod %s: %w", p.Name, err)
	}
	tmp := filepath.Join(s.Dir, "."+p.Name+".yaml.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return "", fmt.Errorf("static pod %s: %w", p.Name, err)
	}
	final := s.path(p.Name)
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("static pod %s: %w", p.Name, err)
	}
	return final, nil
}

// Remove deletes the manifest of the pod called name; the kubelet then
// stops the pod. A manifest that is not there is not an error.
func (s StaticPods) Remove(name string) error {
	if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("static pod %s: %w", name, err)
	}
	return nil
}

// StaticPodName is the name the kubelet gives the static pod called name
// on node: the manifest's name, a dash and the node name.
func StaticPodName(name, node string) string { return name + "-" + node }
