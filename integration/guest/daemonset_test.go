//go:build integration_guest

package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
	"github.com/cgdelegate/cgdelegate/internal/ociimage"
)

// releaseImageTar is the release image (`make image`) in the initramfs of
// a variant that runs the DaemonSet's pod (integration/vm releaseImagePath).
const releaseImageTar = "/cgd/release/cgdelegate-image.tar"

// ctr runs ctr against the VM's containerd in the CRI's namespace.
func (e *guestEnv) ctr(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--address", e.paths.ContainerdSocket, "-n", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, "ctr", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// importRelease imports the release image archive with `ctr images
// import`, as a node operator would (podman load is the other documented
// way; there is no podman in the VM), and returns the name it was
// imported under (ociimage.DefaultRepo:<version>).
func (e *guestEnv) importRelease(ctx context.Context) (string, error) {
	if _, err := os.Stat(releaseImageTar); err != nil {
		return "", fmt.Errorf("release image: %w (the host puts it in the initramfs of variants that need it)", err)
	}
	if _, err := e.ctr(ctx, "images", "import", releaseImageTar); err != nil {
		return "", err
	}
	out, err := e.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return "", err
	}
	var names []string
	for _, n := range strings.Fields(out) {
		if strings.HasPrefix(n, ociimage.DefaultRepo+":") {
			names = append(names, n)
		}
	}
	if len(names) != 1 {
		return "", fmt.Errorf("release image: after the import, images %q of %s, want one", names, ociimage.DefaultRepo)
	}
	return names[0], nil
}

// renderDaemonSet renders the shipped DaemonSet's pod as a static pod.
// With CPU pinning the ConfigMap's config gets cpuPinning: true, as an
// operator would edit the ConfigMap; nothing else changes.
func (e *guestEnv) renderDaemonSet() (manifests.Static, error) {
	ds, cm, err := manifests.Shipped()
	if err != nil {
		return manifests.Static{}, err
	}
	if e.variant.Pinning {
		for k := range cm.Data {
			cm.Data[k] += "cpuPinning: true\n"
		}
	}
	return manifests.StaticPod(ds, cm)
}

// podImage is the one image every container of the pod runs.
func podImage(p *corev1.Pod) (string, error) {
	var imgs []string
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if !slices.Contains(imgs, c.Image) {
			imgs = append(imgs, c.Image)
		}
	}
	if len(imgs) != 1 {
		return "", fmt.Errorf("pod %s runs images %q, want one", p.Name, imgs)
	}
	return imgs[0], nil
}

// prepareDaemonSet readies the node for the DaemonSet's static pod: the
// release image imported and tagged as the pod's image, the ConfigMap's
// files on the host, and no hook on the host (the pod's init container
// installs it). It returns the static pod and the name the image was
// imported under.
func (e *guestEnv) prepareDaemonSet(ctx context.Context) (manifests.Static, string, error) {
	st, err := e.renderDaemonSet()
	if err != nil {
		return st, "", err
	}
	image, err := podImage(&st.Pod)
	if err != nil {
		return st, "", err
	}
	imported, err := e.importRelease(ctx)
	if err != nil {
		return st, "", err
	}
	if imported != image {
		if _, err := e.ctr(ctx, "images", "tag", imported, image); err != nil {
			return st, "", err
		}
	}
	for p, f := range st.Files {
		if err := writeFile(p, string(f.Data)); err != nil {
			return st, "", err
		}
		if err := os.Chmod(p, os.FileMode(f.Mode)); err != nil {
			return st, "", fmt.Errorf("static pod file %s: %w", p, err)
		}
	}
	if err := os.Remove(e.paths.HookBinary); err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, "", fmt.Errorf("remove the host's hook: %w", err)
	}
	e.log.Info("DaemonSet pod prepared", "image", image, "imported", imported, "files", len(st.Files))
	return st, imported, nil
}
