package variant

// RegistryFile is where the cluster boot's initramfs holds the Registry
// the harness pushed to (JSON), relative to the guest's root.
const RegistryFile = "cgd/registry.json"

// Registry is the cluster boot's OCI registry as the guest sees it: the
// harness (integration/vm) runs it on the host's loopback and pushes the
// releases before the boot; the guest's containerd pulls from it over
// plain HTTP and helm installs the charts from it.
type Registry struct {
	// Host is the registry's address from the guest: <the host's bridge address>:<port>.
	Host string `json:"host"`
	// ImageRepo is the image repository below Host; ChartRepo is the
	// OCI repository helm pushed the charts to (oci://<Host>/<ChartRepo>
	// is what helm push was given; the chart is <ChartRepo>/<name>).
	ImageRepo string `json:"imageRepo"`
	ChartRepo string `json:"chartRepo"`
	// Releases are the releases pushed, oldest first.
	Releases []Release `json:"releases"`
	// Previous is the previous release (built from a pinned commit of the
	// repository's history, older than every one of Releases), pushed only
	// for a boot that installs it (Variant.NeedsPrevious); nil otherwise.
	Previous *Release `json:"previous,omitempty"`
}

// Release is one release in the registry.
type Release struct {
	// Chart is the chart's version (helm --version).
	Chart string `json:"chart"`
	// AppVersion is the chart's appVersion, the image tag the chart runs
	// by default.
	AppVersion string `json:"appVersion"`
	// Digest is the image manifest's digest under that tag.
	Digest string `json:"digest"`
}
