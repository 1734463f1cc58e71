package vm

// The engines image of the user-story scenarios ClusterDocker and
// ClusterPodman: Debian's docker.io and podman, as a user's
// image would carry them, with cgdelegate-init and a busybox image to load
// (never a registry: the VM has none).

// enginesRootfs is the engines image's Debian root filesystem: dockerd
// with Debian's containerd and runc, podman with conmon, and crun, which
// both run their containers with (docs/stories/docker.md says why not
// Debian's runc 1.1.5).
// What no scenario runs is never unpacked: containerd's ctr and its v1
// shims (dockerd 20.10 runs io.containerd.runc.v2), libnetwork's test
// tools, and the CNI plugins (the pods' engines run containers with
// --network none).
var enginesRootfs = rootfsSpec{
	Name:     "engines",
	Packages: []string{"docker.io", "podman", "crun"},
	Exclude: []string{
		"/usr/bin/ctr", "/usr/bin/containerd-shim", "/usr/bin/containerd-shim-runc-v1",
		"/usr/bin/dnet", "/usr/sbin/ovrouter",
		"/usr/lib/cni/*",
	},
}

// The engines image and the image it loads inside the pod; the guest
// scenarios use the same names.
const (
	enginesImage = "cgd.local/engines:1"
	// enginesImagePath is where the initramfs of a boot that runs the
	// engines (variant.Variant.NeedsEngines) holds the image.
	enginesImagePath = "cgd/pod-images/engines.tar"
	// innerImage is the busybox image the engines load inside the pod
	// (docker load, podman load), at innerImagePath in the engines image.
	innerImage     = "cgd.local/inner:1"
	innerImagePath = "images/inner.tar"
)
