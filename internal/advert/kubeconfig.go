package advert

// Where a command run by a person (`cgdelegate nodes`) finds the API: a
// kubeconfig, read as kubectl reads it (-kubeconfig, else $KUBECONFIG's
// files merged, else ~/.kube/config), or the pod's service account when
// there is none. Only what a static client needs is read: the server and
// its CA, and a bearer token or a client certificate. A credential plugin
// (exec, auth-provider) is refused, naming the field: the pure-kubectl
// command in docs/troubleshooting.md serves those clusters.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// EnvKubeconfig is the list of kubeconfig files kubectl reads.
const EnvKubeconfig = "KUBECONFIG"

// ErrKubeconfig marks a kubeconfig that can not be used; the error names
// the file and the field.
var ErrKubeconfig = errors.New("unusable kubeconfig")

// ErrNoAPI means no kubeconfig was found and the command does not run in
// a pod.
var ErrNoAPI = errors.New("no Kubernetes API to talk to")

// kubeconfigFile is the part of a kubeconfig read here (clientcmd's v1
// Config, by its YAML names).
type kubeconfigFile struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string    `json:"name"`
		Cluster kcCluster `json:"cluster"`
	} `json:"clusters"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Users []struct {
		Name string `json:"name"`
		User kcUser `json:"user"`
	} `json:"users"`
}

type kcCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	ProxyURL                 string `json:"proxy-url"`
	// dir resolves the relative paths: the directory of the file that
	// defines the cluster.
	dir string
}

type kcUser struct {
	Token                 string   `json:"token"`
	TokenFile             string   `json:"tokenFile"`
	ClientCertificate     string   `json:"client-certificate"`
	ClientCertificateData []byte   `json:"client-certificate-data"`
	ClientKey             string   `json:"client-key"`
	ClientKeyData         []byte   `json:"client-key-data"`
	Username              string   `json:"username"`
	Password              string   `json:"password"`
	Impersonate           string   `json:"as"`
	Exec                  any      `json:"exec"`
	AuthProvider          any      `json:"auth-provider"`
	ImpersonateGroups     []string `json:"as-groups"`
	dir                   string
}

// ClientSource says where the API is: Kubeconfig (a path, the -kubeconfig
// flag) and Context (-context) as kubectl takes them; Getenv reads
// $KUBECONFIG, $HOME and, for the pod's service account in SADir, the
// in-cluster variables.
type ClientSource struct {
	Kubeconfig, Context, SADir string
	Getenv                     func(string) string
}

// newClientFrom finds the API as kubectl would: s.Kubeconfig, else the
// files of $KUBECONFIG (merged: the first file that names a cluster,
// context or user, or sets current-context, wins; missing files are
// skipped), else ~/.kube/config; with none of them, the pod's service
// account. It returns the client and where it came from.
func newClientFrom(s ClientSource) (*kubeClient, string, error) {
	var paths []string
	switch {
	case s.Kubeconfig != "":
		paths = []string{s.Kubeconfig}
	case s.Getenv(EnvKubeconfig) != "":
		for _, p := range filepath.SplitList(s.Getenv(EnvKubeconfig)) {
			if _, err := os.Stat(p); p != "" && err == nil {
				paths = append(paths, p)
			}
		}
		if len(paths) == 0 {
			return nil, "", fmt.Errorf("%w: $%s=%q: none of its files exists", ErrKubeconfig, EnvKubeconfig, s.Getenv(EnvKubeconfig))
		}
	default:
		if home := s.Getenv("HOME"); home != "" {
			p := filepath.Join(home, ".kube", "config")
			if _, err := os.Stat(p); err == nil {
				paths = []string{p}
			}
		}
	}
	if len(paths) > 0 {
		c, err := clientFromKubeconfig(paths, s.Context)
		return c, strings.Join(paths, string(filepath.ListSeparator)), err
	}
	if s.Context != "" {
		return nil, "", fmt.Errorf("%w: -context %q: no kubeconfig names it (no -kubeconfig, no $%s, no ~/.kube/config)", ErrKubeconfig, s.Context, EnvKubeconfig)
	}
	env := lookInCluster(s.Getenv, s.SADir, false)
	if len(env.missing) > 0 || len(env.bad) > 0 {
		return nil, "", fmt.Errorf("%w: no -kubeconfig, no $%s, no ~/.kube/config, and not in a pod: %s", ErrNoAPI, EnvKubeconfig,
			strings.Join(append(env.missing, env.bad...), "; "))
	}
	c, err := newKubeClient(env)
	return c, "service account " + s.SADir, err
}

// clientFromKubeconfig reads and merges the files at paths and builds the
// client of the context named context (current-context when "").
func clientFromKubeconfig(paths []string, context string) (*kubeClient, error) {
	var merged kubeconfigFile
	clusters, users := map[string]kcCluster{}, map[string]kcUser{}
	contexts := map[string]struct{ cluster, user string }{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKubeconfig, err)
		}
		var f kubeconfigFile
		if err := yaml.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrKubeconfig, p, err)
		}
		dir := filepath.Dir(p)
		if merged.CurrentContext == "" {
			merged.CurrentContext = f.CurrentContext
		}
		for _, c := range f.Clusters {
			if _, ok := clusters[c.Name]; !ok {
				c.Cluster.dir = dir
				clusters[c.Name] = c.Cluster
			}
		}
		for _, u := range f.Users {
			if _, ok := users[u.Name]; !ok {
				u.User.dir = dir
				users[u.Name] = u.User
			}
		}
		for _, c := range f.Contexts {
			if _, ok := contexts[c.Name]; !ok {
				contexts[c.Name] = struct{ cluster, user string }{c.Context.Cluster, c.Context.User}
			}
		}
	}
	where := strings.Join(paths, string(filepath.ListSeparator))
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrKubeconfig, where, fmt.Sprintf(format, a...))
	}
	name, field := context, "-context"
	if name == "" {
		name, field = merged.CurrentContext, "current-context"
	}
	if name == "" {
		return nil, bad("current-context is not set; name a context with -context")
	}
	ctx, ok := contexts[name]
	if !ok {
		return nil, bad("%s %q: no such context", field, name)
	}
	cl, ok := clusters[ctx.cluster]
	if !ok {
		return nil, bad("contexts[%q].context.cluster %q: no such cluster", name, ctx.cluster)
	}
	u, ok := users[ctx.user]
	if !ok && ctx.user != "" {
		return nil, bad("contexts[%q].context.user %q: no such user", name, ctx.user)
	}
	c, err := kubeClientOf(cl, fmt.Sprintf("clusters[%q].cluster.", ctx.cluster), u, fmt.Sprintf("users[%q].user.", ctx.user))
	if err != nil {
		return nil, bad("%v", err)
	}
	return c, nil
}

// kubeClientOf builds the client of one cluster and user. Its errors name
// the field: cf and uf are the prefixes of the cluster's and the user's
// fields (clusters["name"].cluster.).
func kubeClientOf(cl kcCluster, cf string, u kcUser, uf string) (*kubeClient, error) {
	path := func(dir, p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	srv, err := url.Parse(cl.Server)
	switch {
	case cl.Server == "":
		return nil, errors.New(cf + "server is empty")
	case err != nil:
		return nil, fmt.Errorf("%sserver %q: %w", cf, cl.Server, err)
	case srv.Scheme != "https" || srv.Host == "":
		return nil, fmt.Errorf("%sserver %q: want https://host[:port]", cf, cl.Server)
	}
	switch {
	case u.Exec != nil:
		return nil, errors.New(uf + "exec: credential plugins are not supported; use a kubeconfig with a token or a client certificate, or the kubectl command of docs/troubleshooting.md")
	case u.AuthProvider != nil:
		return nil, errors.New(uf + "auth-provider: not supported; use a kubeconfig with a token or a client certificate, or the kubectl command of docs/troubleshooting.md")
	case u.Username != "" || u.Password != "":
		return nil, errors.New(uf + "username, " + uf + "password: basic authentication is not supported (Kubernetes removed it in 1.19)")
	case u.Impersonate != "" || len(u.ImpersonateGroups) > 0:
		return nil, errors.New(uf + "as: impersonation is not supported")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cl.TLSServerName, InsecureSkipVerify: cl.InsecureSkipTLSVerify} //nolint:gosec // as the kubeconfig asks, as kubectl does
	ca := cl.CertificateAuthorityData
	if cl.CertificateAuthority != "" {
		if ca, err = os.ReadFile(path(cl.dir, cl.CertificateAuthority)); err != nil {
			return nil, fmt.Errorf("%scertificate-authority: %w", cf, err)
		}
	}
	if len(ca) > 0 {
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(ca) {
			return nil, errors.New(cf + "certificate-authority(-data): no PEM certificate in it")
		}
	}
	cert, key := u.ClientCertificateData, u.ClientKeyData
	if u.ClientCertificate != "" {
		if cert, err = os.ReadFile(path(u.dir, u.ClientCertificate)); err != nil {
			return nil, fmt.Errorf("%sclient-certificate: %w", uf, err)
		}
	}
	if u.ClientKey != "" {
		if key, err = os.ReadFile(path(u.dir, u.ClientKey)); err != nil {
			return nil, fmt.Errorf("%sclient-key: %w", uf, err)
		}
	}
	if len(cert) > 0 || len(key) > 0 {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%sclient-certificate(-data), %sclient-key(-data): %w", uf, uf, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	proxy := http.ProxyFromEnvironment
	if cl.ProxyURL != "" {
		pu, err := url.Parse(cl.ProxyURL)
		if err != nil || pu.Host == "" {
			return nil, fmt.Errorf("%sproxy-url %q: want scheme://host[:port]", cf, cl.ProxyURL)
		}
		proxy = http.ProxyURL(pu)
	}
	tr := &http.Transport{Proxy: proxy, TLSClientConfig: tc, TLSHandshakeTimeout: requestTimeout, IdleConnTimeout: 90 * time.Second, MaxIdleConns: 2}
	return &kubeClient{
		base:      "https://" + srv.Host + strings.TrimSuffix(srv.Path, "/"),
		token:     u.Token,
		tokenPath: path(u.dir, u.TokenFile),
		http:      &http.Client{Transport: tr, Timeout: requestTimeout, CheckRedirect: refuseRedirect},
	}, nil
}
