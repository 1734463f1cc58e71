package manifests_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

// root is the module root, from this package's directory.
const root = "../../.."

// shippedFile strictly decodes the one object of the plain manifest name in
// contrib/kubernetes (the files Shipped's embedded copies must equal).
func shippedFile[T any](t *testing.T, name string) *T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, manifests.PlainDir, name))
	if err != nil {
		t.Fatal(err)
	}
	obj := new(T)
	if err := sigsyaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return obj
}

// mountFor returns the volume behind the container's mount that holds the
// container path p (the longest mountPath above it), and p's path in that
// volume.
func mountFor(spec corev1.PodSpec, c corev1.Container, p string) (corev1.VolumeMount, corev1.Volume, string, bool) {
	var best corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if (p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/")) && len(m.MountPath) > len(best.MountPath) {
			best = m
		}
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == best.Name })
	if best.Name == "" || i < 0 {
		return corev1.VolumeMount{}, corev1.Volume{}, "", false
	}
	return best, spec.Volumes[i], strings.TrimPrefix(p, best.MountPath), true
}

// hostPathOf is where the container path p is on the host, if it is on a
// hostPath volume.
func hostPathOf(t *testing.T, spec corev1.PodSpec, c corev1.Container, p string) (string, corev1.VolumeMount) {
	t.Helper()
	m, v, rest, ok := mountFor(spec, c, p)
	if !ok || v.HostPath == nil {
		t.Errorf("container %s: %s is on no hostPath volume", c.Name, p)
		return "", m
	}
	return v.HostPath.Path + rest, m
}
