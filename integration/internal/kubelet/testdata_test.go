package kubelet

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGuestManifests strictly decodes the Pod manifests the guest's
// Kubelet scenarios write (integration/guest/testdata/pods), so a typo
// fails here, with the ordinary go test, and not in a VM boot.
func TestGuestManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "guest", "testdata", "pods", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := DecodePod(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range p.Spec.Containers {
				if c.ImagePullPolicy != "Never" {
					t.Errorf("container %s: imagePullPolicy %q, want Never (the VM has no registry)", c.Name, c.ImagePullPolicy)
				}
			}
		})
	}
}
