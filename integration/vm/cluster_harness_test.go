package vm

// The control plane of the Cluster variants (variant.Variant.Cluster), the
// pure part: its certificates, keys and kubeconfigs (clusterPKI) and the
// flags of etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// (controlPlane). cluster_run_test.go builds the binaries and runs them on
// the host, the API server on the pod network's bridge
// (integration/internal/podnet), where the guests reach it at
// https://10.213.0.1:<port>; etcd and the other components' health ports
// stay on the host's loopback.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/podnet"
)

// clusterPlan is the cluster's network (integration/internal/podnet): the
// host's bridge, where the API server listens, and the guest nodes on it.
// Each node's kubelet certificate says system:node:<its name>
// (clusterIdentitiesFor); the first node is cgd-vm, which runs the
// scenarios, the second cgd-vm2, which the cluster boot starts beside it
// for ClusterMixedFleet (variant.MixedFleetNode, mixedfleet_test.go).
var clusterPlan = podnet.DefaultPlan(2)

// clusterHostIP is the host's address on the cluster's bridge: the API
// server binds and advertises it (the kubernetes Service's endpoint), and
// every kubeconfig names it.
var clusterHostIP = clusterPlan.Host.Addr().String()

const (
	// serviceCIDR is the cluster's service range; its first address is the
	// kubernetes Service's, which the serving certificate names too.
	serviceCIDR      = "10.96.0.0/24"
	kubernetesSvcIP  = "10.96.0.1"
	serviceIssuer    = "https://kubernetes.default.svc"
	clusterCertValid = 48 * time.Hour
)

// Where the guest finds the cluster's files (integration/guest reads the
// same paths): the kubelets' kubeconfigs, kube-proxy's and the admin's
// (the guest's API client reads it), all pointing at
// https://<clusterHostIP>:<port>. kubectl and helm are not in the guest:
// they run on the host (startWorkstation), and helm installs the chart
// from the cluster's registry (registry_harness_test.go).
const (
	// guestKubeletKubeconfigs holds each node's kubelet kubeconfig,
	// <podnet.KubeletKubeconfig>.kubeconfig.
	guestKubeletKubeconfigs  = "etc/kubernetes"
	guestKubeProxyKubeconfig = "etc/kubernetes/kube-proxy.kubeconfig"
	guestKubeProxy           = "usr/local/bin/kube-proxy"
	guestAdminKubeconfig     = "root/.kube/config"
	// guestNetModules holds the modules init.sh and guest-run.sh load for
	// eth0 (not under lib/, a symlink in the systemd root filesystem).
	guestNetModules = "cgd/net"
)

// clusterIdentity is one client certificate of the cluster and the
// kubeconfig that carries it.
type clusterIdentity struct {
	// File names the kubeconfig (<File>.kubeconfig) in the PKI directory.
	File string
	// User and Groups are the certificate's CN and O, which the API server
	// reads as the user name and groups.
	User   string
	Groups []string
	// Server is the API server host the kubeconfig names: clusterHostIP,
	// where the API server listens, for every one.
	Server string
}

// clusterIdentities are the cluster's clients: the host components, each
// node's kubelet (system:node:<name>, for the Node authorizer), kube-proxy
// (the bootstrap RBAC binds system:kube-proxy to system:node-proxier, as on
// a kubeadm cluster) and two admins, one for the host harness and one for
// kubectl in the guest.
var clusterIdentities = clusterIdentitiesFor(clusterPlan)

// clusterIdentitiesFor are the identities of a cluster on plan, each
// node's kubelet under podnet.KubeletKubeconfig.
func clusterIdentitiesFor(plan podnet.Plan) []clusterIdentity {
	ids := []clusterIdentity{
		{File: "admin", User: "cgd-admin", Groups: []string{"system:masters"}, Server: clusterHostIP},
		{File: "controller-manager", User: "system:kube-controller-manager", Server: clusterHostIP},
		{File: "scheduler", User: "system:kube-scheduler", Server: clusterHostIP},
		{File: "kube-proxy", User: "system:kube-proxy", Server: clusterHostIP},
		{File: "guest-admin", User: "cgd-admin", Groups: []string{"system:masters"}, Server: clusterHostIP},
	}
	for _, n := range plan.Nodes {
		ids = append(ids, clusterIdentity{File: podnet.KubeletKubeconfig(n.Name), User: "system:node:" + n.Name, Groups: []string{"system:nodes"}, Server: clusterHostIP})
	}
	return ids
}

// clusterPKI is a directory of the cluster's certificates, keys and
// kubeconfigs, made by newClusterPKI:
//
//	ca.crt ca.key                  the cluster CA (clients and serving)
//	apiserver.crt apiserver.key    serving, for 127.0.0.1, clusterHostIP
//	                               and the kubernetes Service
//	sa.key sa.pub                  the service-account token key pair
//	<identity>.kubeconfig          one per clusterIdentities entry
type clusterPKI struct {
	Dir string
	// Port is the API server's secure port the kubeconfigs name.
	Port int
}

// Path is the file name in the PKI directory.
func (p clusterPKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// Kubeconfig is the path of an identity's kubeconfig.
func (p clusterPKI) Kubeconfig(file string) string { return p.Path(file + ".kubeconfig") }

// newClusterPKI writes a fresh CA, the API server's serving certificate,
// the service-account key pair and one kubeconfig per identity into dir
// (which must exist), for an API server on port. Keys are ECDSA P-256.
func newClusterPKI(dir string, port int, now time.Time) (clusterPKI, error) {
	p := clusterPKI{Dir: dir, Port: port}
	if port < 1 || port > 65535 {
		return p, fmt.Errorf("cluster PKI: API server port %d: want a TCP port", port)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("cluster PKI: CA key: %w", err)
	}
	caTmpl := certTemplate(pkix.Name{CommonName: "cgd-cluster-ca"}, now)
	caTmpl.IsCA, caTmpl.BasicConstraintsValid = true, true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("cluster PKI: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, fmt.Errorf("cluster PKI: CA certificate: %w", err)
	}
	caPEM := pemBlock("CERTIFICATE", caDER)
	if err := writePEMKey(p.Path("ca.key"), caKey); err != nil {
		return p, err
	}
	if err := writeClusterFile(p.Path("ca.crt"), caPEM); err != nil {
		return p, err
	}
	// issue signs a leaf certificate for tmpl and returns its PEM and key.
	issue := func(tmpl *x509.Certificate) (certPEM []byte, key *ecdsa.PrivateKey, err error) {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, fmt.Errorf("cluster PKI: key of %s: %w", tmpl.Subject.CommonName, err)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("cluster PKI: certificate of %s: %w", tmpl.Subject.CommonName, err)
		}
		return pemBlock("CERTIFICATE", der), key, nil
	}

	serving := certTemplate(pkix.Name{CommonName: "kube-apiserver"}, now)
	serving.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	serving.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	for _, ip := range []string{"127.0.0.1", clusterHostIP, kubernetesSvcIP} {
		serving.IPAddresses = append(serving.IPAddresses, net.ParseIP(ip))
	}
	servingPEM, servingKey, err := issue(serving)
	if err != nil {
		return p, err
	}
	if err := writeClusterFile(p.Path("apiserver.crt"), servingPEM); err != nil {
		return p, err
	}
	if err := writePEMKey(p.Path("apiserver.key"), servingKey); err != nil {
		return p, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("cluster PKI: service-account key: %w", err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return p, fmt.Errorf("cluster PKI: service-account public key: %w", err)
	}
	if err := writePEMKey(p.Path("sa.key"), saKey); err != nil {
		return p, err
	}
	if err := writeClusterFile(p.Path("sa.pub"), pemBlock("PUBLIC KEY", saPub)); err != nil {
		return p, err
	}

	for _, id := range clusterIdentities {
		tmpl := certTemplate(pkix.Name{CommonName: id.User, Organization: id.Groups}, now)
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		certPEM, key, err := issue(tmpl)
		if err != nil {
			return p, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return p, fmt.Errorf("cluster PKI: key of %s: %w", id.User, err)
		}
		kc := kubeconfig(fmt.Sprintf("https://%s:%d", id.Server, port), id.User, caPEM, certPEM, pemBlock("EC PRIVATE KEY", keyDER))
		if err := writeClusterFile(p.Kubeconfig(id.File), []byte(kc)); err != nil {
			return p, err
		}
	}
	return p, nil
}

// certTemplate is a certificate valid from a minute before now (the
// guest's clock may lag) for clusterCertValid, with a random serial.
func certTemplate(subject pkix.Name, now time.Time) *x509.Certificate {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		// crypto/rand never fails on Linux; a fixed serial would still work.
		serial = big.NewInt(now.UnixNano())
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(clusterCertValid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func writePEMKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("cluster PKI: %s: %w", path, err)
	}
	return writeClusterFile(path, pemBlock("EC PRIVATE KEY", der))
}

func writeClusterFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("cluster PKI: %w", err)
	}
	return nil
}

// kubeconfig is a kubeconfig with one cluster, user and context, every
// certificate and key embedded.
func kubeconfig(server, user string, caPEM, certPEM, keyPEM []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return `apiVersion: v1
kind: Config
clusters:
- name: cgd
  cluster:
    server: ` + server + `
    certificate-authority-data: ` + b64(caPEM) + `
users:
- name: ` + strconv.Quote(user) + `
  user:
    client-certificate-data: ` + b64(certPEM) + `
    client-key-data: ` + b64(keyPEM) + `
contexts:
- name: cgd
  context:
    cluster: cgd
    user: ` + strconv.Quote(user) + `
current-context: cgd
`
}

// controlPlane is where the host's control plane listens and keeps its
// files: the API server on clusterHostIP (the bridge, which must be up)
// or Host, every other port on 127.0.0.1.
type controlPlane struct {
	PKI clusterPKI
	// Host is the address the API server binds; empty: clusterHostIP,
	// which it advertises (the kubernetes Service's endpoint) either way. The serving certificate names 127.0.0.1 too, where
	// the host-only tests run it (apiserver_policies_test.go).
	Host string
	// APIOnly runs etcd and kube-apiserver only: no controllers, no
	// scheduler (startControlPlane).
	APIOnly bool
	// DataDir holds etcd's data and the components' self-signed serving
	// certificates.
	DataDir                  string
	EtcdClient, EtcdPeer     int
	ControllerManager, Sched int // secure (health) ports
}

// errControlPlane is wrapped by every controlPlane.validate problem.
var errControlPlane = errors.New("invalid control plane")

func (c controlPlane) validate() error {
	var errs []error
	ports := map[int]string{}
	for _, p := range []struct {
		name string
		port int
	}{
		{"API server", c.PKI.Port},
		{"etcd client", c.EtcdClient},
		{"etcd peer", c.EtcdPeer},
		{"controller-manager", c.ControllerManager},
		{"scheduler", c.Sched},
	} {
		if p.port < 1 || p.port > 65535 {
			errs = append(errs, fmt.Errorf("%w: %s port %d: want a TCP port", errControlPlane, p.name, p.port))
			continue
		}
		if other, ok := ports[p.port]; ok {
			errs = append(errs, fmt.Errorf("%w: %s port %d is also the %s port", errControlPlane, p.name, p.port, other))
		}
		ports[p.port] = p.name
	}
	if c.PKI.Dir == "" || c.DataDir == "" {
		errs = append(errs, fmt.Errorf("%w: PKI dir %q, data dir %q: want both", errControlPlane, c.PKI.Dir, c.DataDir))
	}
	return errors.Join(errs...)
}

func loopbackURL(scheme string, port int) string {
	return scheme + "://127.0.0.1:" + strconv.Itoa(port)
}

// host is the API server's address: Host, else clusterHostIP.
func (c controlPlane) host() string {
	if c.Host != "" {
		return c.Host
	}
	return clusterHostIP
}

// APIServerURL is the API server, as the host and the guests reach it.
func (c controlPlane) APIServerURL() string {
	return "https://" + net.JoinHostPort(c.host(), strconv.Itoa(c.PKI.Port))
}

// EtcdArgs are the flags of our etcd main (testdata/etcd).
func (c controlPlane) EtcdArgs() []string {
	return []string{
		"-data-dir=" + filepath.Join(c.DataDir, "etcd"),
		"-client=" + loopbackURL("http", c.EtcdClient),
		"-peer=" + loopbackURL("http", c.EtcdPeer),
	}
}

// APIServerArgs: kube-apiserver on the host's bridge address only (the
// nodes' network; it is also the kubernetes Service's endpoint; or Host), which it
// reaches the kubelets from; client certificates signed by the cluster CA;
// Node and RBAC authorization with the NodeRestriction admission plugin.
// No feature gate is set: in 1.37 in-place resize
// (InPlacePodVerticalScaling) is GA and PodLevelResources is beta and on.
func (c controlPlane) APIServerArgs() []string {
	args := []string{
		"--etcd-servers=" + loopbackURL("http", c.EtcdClient),
		"--bind-address=" + c.host(),
		"--secure-port=" + strconv.Itoa(c.PKI.Port),
		// Always the bridge's: the endpoint reconciler refuses a loopback
		// address, and where Host is loopback nothing uses the Service.
		"--advertise-address=" + clusterHostIP,
		// The kubelets by their address on the bridge, as kubeadm has it:
		// the default tries the node's host name first, which nothing
		// resolves.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--client-ca-file=" + c.PKI.Path("ca.crt"),
		"--tls-cert-file=" + c.PKI.Path("apiserver.crt"),
		"--tls-private-key-file=" + c.PKI.Path("apiserver.key"),
		"--service-account-issuer=" + serviceIssuer,
		"--service-account-key-file=" + c.PKI.Path("sa.pub"),
		"--service-account-signing-key-file=" + c.PKI.Path("sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--cert-dir=" + filepath.Join(c.DataDir, "apiserver"),
		"--v=1",
	}
	if ip := net.ParseIP(c.host()); ip != nil && ip.IsLoopback() {
		// The kubernetes Service's endpoint reconciler refuses a loopback
		// advertise address ("may not be in the loopback range") and the
		// API server exits; the host-only tests have no Service clients.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	return args
}

// ControllerManagerArgs: its own identity, service-account tokens for each
// controller, the CA and service-account key for the tokens it mints, no
// leader election (one instance).
func (c controlPlane) ControllerManagerArgs() []string {
	return append(c.componentArgs("controller-manager", c.ControllerManager),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.PKI.Path("sa.key"),
		"--root-ca-file="+c.PKI.Path("ca.crt"),
	)
}

// SchedulerArgs: its own identity, no leader election.
func (c controlPlane) SchedulerArgs() []string {
	return c.componentArgs("scheduler", c.Sched)
}

// componentArgs are the flags the controller manager and the scheduler
// share: the identity's kubeconfig for the API server and for checking
// its own clients, its health port on loopback, a directory for its
// self-signed serving certificate, and no leader election (one instance).
func (c controlPlane) componentArgs(identity string, port int) []string {
	kc := c.PKI.Kubeconfig(identity)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.DataDir, identity),
		"--leader-elect=false",
		"--v=1",
	}
}

// flagValue is the value of --name=value (or -name=value) in args, for
// tests and messages.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), name+"="); ok {
			return v, true
		}
	}
	return "", false
}
