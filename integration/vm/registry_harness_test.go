package vm

// The cluster boot's OCI registry, the pure part: the CNCF distribution
// registry's config (registryConfig) and the releases the harness pushes
// before the boot (clusterReleases). registry_run_test.go starts
// `docker-registry serve` on the host's address on the cluster's bridge
// (clusterHostIP, where the API server listens too) and pushes; the
// guest reaches it there over plain HTTP.

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
)

const (
	// registryImageRepo and registryChartRepo are where the releases go in
	// the registry: the image at <host>/cgdelegate:<appVersion>, the chart
	// at <host>/charts/cgdelegate:<version> (helm push to
	// oci://<host>/charts).
	registryImageRepo = "cgdelegate"
	registryChartRepo = "charts"
)

// clusterRelease is one release the harness pushes: the chart packaged
// with Chart as its version and AppVersion as its appVersion (the image
// tag the chart runs by default), and the release image under that tag.
type clusterRelease struct {
	Chart, AppVersion string
}

// clusterReleases are the two releases of the cluster boot, oldest first:
// installed, upgraded to, rolled back from. Their images differ in the
// version label, so in their digests, and the upgrade really rolls the
// pod.
var clusterReleases = []clusterRelease{
	{Chart: "0.0.1-ci.1", AppVersion: "v0.0.1-ci.1"},
	{Chart: "0.0.2-ci.1", AppVersion: "v0.0.2-ci.1"},
}

// registryServer is one run of the registry: where it listens (the
// cluster boot's: clusterHostIP) and where it keeps its blobs.
type registryServer struct {
	// IP is the address it listens on and is reached at.
	IP   string
	Port int
	// Dir holds the config file and, below it, the storage.
	Dir string
}

// errRegistry is wrapped by every registryServer.validate problem.
var errRegistry = errors.New("invalid registry")

func (r registryServer) validate() error {
	var errs []error
	if ip := net.ParseIP(r.IP); ip == nil {
		errs = append(errs, fmt.Errorf("%w: ip %q: want an IP address", errRegistry, r.IP))
	}
	if r.Port < 1 || r.Port > 65535 {
		errs = append(errs, fmt.Errorf("%w: port %d: want a TCP port", errRegistry, r.Port))
	}
	if r.Dir == "" || !filepath.IsAbs(r.Dir) {
		errs = append(errs, fmt.Errorf("%w: dir %q: want an absolute path", errRegistry, r.Dir))
	}
	return errors.Join(errs...)
}

// Addr is where the registry listens, which the host's pushes and the
// guest's pulls both use.
func (r registryServer) Addr() string { return net.JoinHostPort(r.IP, strconv.Itoa(r.Port)) }

// GuestHost is the registry as the guest reaches it: the same address.
func (r registryServer) GuestHost() string { return r.Addr() }

// ConfigPath is the config file docker-registry serve reads.
func (r registryServer) ConfigPath() string { return filepath.Join(r.Dir, "config.yml") }

// StorageDir is the filesystem storage's root.
func (r registryServer) StorageDir() string { return filepath.Join(r.Dir, "storage") }

// Config is the distribution registry's config: filesystem storage in
// StorageDir, HTTP on IP only (no TLS: the guest's containerd is
// told the registry is plain HTTP, as docs/deploying.md tells a user),
// no authentication, no deletes, no access log (the pushes and pulls are
// logged by their clients).
func (r registryServer) Config() string {
	return `# Written by the cgdelegate VM harness for one boot.
version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: ` + strconv.Quote(r.StorageDir()) + `
  delete:
    enabled: false
http:
  addr: ` + r.Addr() + `
`
}
