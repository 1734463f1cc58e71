package vm

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cgdelegate/cgdelegate/integration/internal/podnet"
)

// kubeconfigFile is what the tests read back of a kubeconfig.
type kubeconfigFile struct {
	Clusters []struct {
		Cluster struct {
			Server string `json:"server"`
			CA     string `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Cert string `json:"client-certificate-data"`
			Key  string `json:"client-key-data"`
		} `json:"user"`
	} `json:"users"`
	CurrentContext string `json:"current-context"`
}

func readCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("no PEM certificate in %q", data)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func unbase64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("base64 %q: %v", s, err)
	}
	return b
}

// TestClusterPKI: every kubeconfig names its server, trusts the CA that
// signed the serving certificate, and carries a client certificate for
// its identity that the CA verifies; the serving certificate is good for
// the addresses the host and the guest use.
func TestClusterPKI(t *testing.T) {
	now := time.Now()
	p, err := newClusterPKI(t.TempDir(), 6443, now)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.Path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, caPEM)
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	servingPEM, err := os.ReadFile(p.Path("apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	serving := readCert(t, servingPEM)
	for _, host := range []string{"127.0.0.1", "10.213.0.1", "10.96.0.1", "kubernetes.default.svc"} {
		if _, err := serving.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, CurrentTime: now}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	for _, other := range []string{"10.0.2.2", "10.213.0.2"} {
		if _, err := serving.Verify(x509.VerifyOptions{DNSName: other, Roots: roots, CurrentTime: now}); err == nil {
			t.Errorf("the serving certificate verifies for %s, an address it must not name", other)
		}
	}
	for _, f := range []string{"ca.key", "apiserver.key", "sa.key", "sa.pub"} {
		if b, err := os.ReadFile(p.Path(f)); err != nil || !strings.HasPrefix(string(b), "-----BEGIN ") {
			t.Errorf("%s: %v, %.30q", f, err, b)
		}
	}

	tests := []struct {
		file, server, user string
		groups             []string
	}{
		{"admin", "https://10.213.0.1:6443", "cgd-admin", []string{"system:masters"}},
		{"controller-manager", "https://10.213.0.1:6443", "system:kube-controller-manager", nil},
		{"scheduler", "https://10.213.0.1:6443", "system:kube-scheduler", nil},
		{"kubelet", "https://10.213.0.1:6443", "system:node:cgd-vm", []string{"system:nodes"}},
		{"kube-proxy", "https://10.213.0.1:6443", "system:kube-proxy", nil},
		{"guest-admin", "https://10.213.0.1:6443", "cgd-admin", []string{"system:masters"}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile(p.Kubeconfig(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var kc kubeconfigFile
			if err := yaml.Unmarshal(raw, &kc); err != nil {
				t.Fatalf("kubeconfig: %v", err)
			}
			if len(kc.Clusters) != 1 || len(kc.Users) != 1 || kc.CurrentContext != "cgd" {
				t.Fatalf("kubeconfig: %d clusters, %d users, context %q", len(kc.Clusters), len(kc.Users), kc.CurrentContext)
			}
			if got := kc.Clusters[0].Cluster.Server; got != tc.server {
				t.Errorf("server %s, want %s", got, tc.server)
			}
			if got := unbase64(t, kc.Clusters[0].Cluster.CA); string(got) != string(caPEM) {
				t.Error("certificate-authority-data is not the cluster CA")
			}
			cert := readCert(t, unbase64(t, kc.Users[0].User.Cert))
			if cert.Subject.CommonName != tc.user || !slices.Equal(cert.Subject.Organization, tc.groups) {
				t.Errorf("client certificate CN %q O %q, want %q %q", cert.Subject.CommonName, cert.Subject.Organization, tc.user, tc.groups)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("client certificate: %v", err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
				t.Error("a client certificate verifies for serving")
			}
			if b, _ := pem.Decode(unbase64(t, kc.Users[0].User.Key)); b == nil || b.Type != "EC PRIVATE KEY" {
				t.Errorf("client-key-data is not an EC private key")
			}
		})
	}
}

// TestClusterIdentitiesFor: every node of a plan gets a kubelet identity
// of its own, the first under the name the guest reads.
func TestClusterIdentitiesFor(t *testing.T) {
	ids := clusterIdentitiesFor(podnet.DefaultPlan(2))
	byFile := map[string]clusterIdentity{}
	for _, id := range ids {
		if _, dup := byFile[id.File]; dup {
			t.Errorf("kubeconfig %s twice", id.File)
		}
		byFile[id.File] = id
	}
	for file, user := range map[string]string{"kubelet": "system:node:cgd-vm", "kubelet-cgd-vm2": "system:node:cgd-vm2"} {
		id, ok := byFile[file]
		if !ok || id.User != user || !slices.Equal(id.Groups, []string{"system:nodes"}) {
			t.Errorf("%s: %+v (found %v), want user %s in system:nodes", file, id, ok, user)
		}
	}
	if one := clusterIdentitiesFor(podnet.DefaultPlan(1)); len(ids) != len(one)+1 {
		t.Errorf("%d identities for two nodes, %d for one", len(ids), len(one))
	}
}

func TestClusterPKIInvalidPort(t *testing.T) {
	for _, port := range []int{0, -1, 70000} {
		if _, err := newClusterPKI(t.TempDir(), port, time.Now()); err == nil || !strings.Contains(err.Error(), "port") {
			t.Errorf("port %d: err %v, want one naming the port", port, err)
		}
	}
}

func testControlPlane() controlPlane {
	return controlPlane{
		PKI: clusterPKI{Dir: "/pki", Port: 6443}, DataDir: "/data",
		EtcdClient: 2379, EtcdPeer: 2380, ControllerManager: 10257, Sched: 10259,
	}
}

// TestControlPlaneArgs: the flags the components run with, as the task
// needs them (a cluster the guests reach on the host's bridge, Node and RBAC
// authorization, each component its own identity).
func TestControlPlaneArgs(t *testing.T) {
	c := testControlPlane()
	tests := []struct {
		component string
		args      []string
		flag      string
		want      string
	}{
		{"etcd", c.EtcdArgs(), "client", "http://127.0.0.1:2379"},
		{"etcd", c.EtcdArgs(), "peer", "http://127.0.0.1:2380"},
		{"etcd", c.EtcdArgs(), "data-dir", "/data/etcd"},
		{"apiserver", c.APIServerArgs(), "etcd-servers", "http://127.0.0.1:2379"},
		{"apiserver", c.APIServerArgs(), "secure-port", "6443"},
		{"apiserver", c.APIServerArgs(), "bind-address", "10.213.0.1"},
		{"apiserver", c.APIServerArgs(), "advertise-address", "10.213.0.1"},
		{"apiserver", c.APIServerArgs(), "kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname"},
		{"apiserver", c.APIServerArgs(), "authorization-mode", "Node,RBAC"},
		{"apiserver", c.APIServerArgs(), "client-ca-file", "/pki/ca.crt"},
		{"apiserver", c.APIServerArgs(), "service-account-signing-key-file", "/pki/sa.key"},
		{"apiserver", c.APIServerArgs(), "service-account-key-file", "/pki/sa.pub"},
		{"controller-manager", c.ControllerManagerArgs(), "kubeconfig", "/pki/controller-manager.kubeconfig"},
		{"controller-manager", c.ControllerManagerArgs(), "secure-port", "10257"},
		{"controller-manager", c.ControllerManagerArgs(), "root-ca-file", "/pki/ca.crt"},
		{"controller-manager", c.ControllerManagerArgs(), "service-account-private-key-file", "/pki/sa.key"},
		{"scheduler", c.SchedulerArgs(), "kubeconfig", "/pki/scheduler.kubeconfig"},
		{"scheduler", c.SchedulerArgs(), "secure-port", "10259"},
		{"scheduler", c.SchedulerArgs(), "leader-elect", "false"},
	}
	for _, tc := range tests {
		t.Run(tc.component+"/"+tc.flag, func(t *testing.T) {
			got, ok := flagValue(tc.args, tc.flag)
			if !ok || got != tc.want {
				t.Errorf("--%s = %q (given %v), want %q; args %v", tc.flag, got, ok, tc.want, tc.args)
			}
		})
	}
	if got := c.APIServerURL(); got != "https://10.213.0.1:6443" {
		t.Errorf("APIServerURL = %s", got)
	}
}

func TestControlPlaneValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*controlPlane)
		words  []string
	}{
		{"valid", func(*controlPlane) {}, nil},
		{"port twice", func(c *controlPlane) { c.Sched = c.ControllerManager }, []string{"scheduler port 10257", "controller-manager"}},
		{"no port", func(c *controlPlane) { c.EtcdPeer = 0 }, []string{"etcd peer port 0"}},
		{"no data dir", func(c *controlPlane) { c.DataDir = "" }, []string{"data dir"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testControlPlane()
			tc.modify(&c)
			err := c.validate()
			if tc.words == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, errControlPlane) {
				t.Fatalf("err %v, want errControlPlane", err)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not say %q", err, w)
				}
			}
		})
	}
}

// TestRegistryConfig: the registry listens on the host's bridge address
// only, stores in its own directory, and the guest reaches it at that
// address.
func TestRegistryConfig(t *testing.T) {
	r := registryServer{IP: "10.213.0.1", Port: 25000, Dir: "/work/registry"}
	if err := r.validate(); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Version string `json:"version"`
		Storage struct {
			Filesystem struct {
				Root string `json:"rootdirectory"`
			} `json:"filesystem"`
		} `json:"storage"`
		HTTP struct {
			Addr string `json:"addr"`
			TLS  any    `json:"tls"`
		} `json:"http"`
		Auth any `json:"auth"`
	}
	if err := yaml.Unmarshal([]byte(r.Config()), &cfg); err != nil {
		t.Fatalf("config: %v\n%s", err, r.Config())
	}
	if cfg.Version != "0.1" || cfg.HTTP.Addr != "10.213.0.1:25000" || cfg.Storage.Filesystem.Root != "/work/registry/storage" ||
		cfg.HTTP.TLS != nil || cfg.Auth != nil {
		t.Errorf("config %+v, want version 0.1, 10.213.0.1:25000, /work/registry/storage, no TLS, no auth:\n%s", cfg, r.Config())
	}
	if got := r.GuestHost(); got != "10.213.0.1:25000" {
		t.Errorf("GuestHost = %s", got)
	}
	if got := r.ConfigPath(); got != "/work/registry/config.yml" {
		t.Errorf("ConfigPath = %s", got)
	}
}

func TestRegistryValidate(t *testing.T) {
	tests := []struct {
		name  string
		r     registryServer
		words []string
	}{
		{"no port", registryServer{IP: "10.213.0.1", Dir: "/r"}, []string{"port 0"}},
		{"port too big", registryServer{IP: "10.213.0.1", Port: 70000, Dir: "/r"}, []string{"port 70000"}},
		{"relative dir", registryServer{IP: "10.213.0.1", Port: 5000, Dir: "r"}, []string{`dir "r"`}},
		{"host name", registryServer{IP: "cgd-host", Port: 5000, Dir: "/r"}, []string{`ip "cgd-host"`}},
		{"all", registryServer{}, []string{`ip ""`, "port 0", `dir ""`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.validate()
			if !errors.Is(err, errRegistry) {
				t.Fatalf("err %v, want errRegistry", err)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not say %q", err, w)
				}
			}
		})
	}
}

// TestClusterReleases: two releases, each image tag the chart's
// appVersion, no two alike (the upgrade must change the chart and the
// image digest).
func TestClusterReleases(t *testing.T) {
	if len(clusterReleases) != 2 {
		t.Fatalf("%d releases, want two: install, upgrade to, roll back from", len(clusterReleases))
	}
	a, b := clusterReleases[0], clusterReleases[1]
	if a.Chart == b.Chart || a.AppVersion == b.AppVersion {
		t.Errorf("releases %+v and %+v: want different chart versions and appVersions", a, b)
	}
	for _, r := range clusterReleases {
		if "v"+r.Chart != r.AppVersion {
			t.Errorf("release %+v: appVersion is not v<chart version>", r)
		}
	}
}
