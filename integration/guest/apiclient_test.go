//go:build integration_guest

package guest

// The Cluster scenarios poll pods and nodes many times a second. Each
// kubectl run is a large Go program started under TCG, which costs the
// guest more CPU than the poll is worth and slows the pods it watches; so
// getJSON reads pods and nodes straight from the API server with the same
// admin kubeconfig, and leaves everything else to kubectl.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
)

// guestKubeconfig is the admin kubeconfig integration/vm writes for the
// guest, kubectl's default.
const guestKubeconfig = "/root/.kube/config"

// apiClient is an HTTPS client of the API server with the admin's
// client certificate.
type apiClient struct {
	server string
	http   *http.Client
}

var (
	apiOnce sync.Once
	api     *apiClient
	errAPI  error
)

// theAPI returns the client made from guestKubeconfig, made on first use.
func theAPI() (*apiClient, error) {
	apiOnce.Do(func() {
		f, err := os.Open(guestKubeconfig)
		if err != nil {
			errAPI = fmt.Errorf("api client: %w", err)
			return
		}
		defer f.Close()
		api, errAPI = newAPIClient(f)
	})
	return api, errAPI
}

// kubeconfigFile is the part of a kubeconfig newAPIClient reads: its
// first cluster and first user, with embedded certificates.
type kubeconfigFile struct {
	Clusters []struct {
		Cluster struct {
			Server string `json:"server"`
			CA     string `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		User struct {
			Cert string `json:"client-certificate-data"`
			Key  string `json:"client-key-data"`
		} `json:"user"`
	} `json:"users"`
}

// newAPIClient reads a kubeconfig like integration/vm's (one cluster, one
// user, certificates embedded).
func newAPIClient(r io.Reader) (*apiClient, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	var kc kubeconfigFile
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if len(kc.Clusters) == 0 || len(kc.Users) == 0 {
		return nil, errors.New("kubeconfig: want a cluster and a user")
	}
	dec := func(field, s string) ([]byte, error) {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) == 0 {
			return nil, fmt.Errorf("kubeconfig: %s: not base64 data (%w)", field, err)
		}
		return b, nil
	}
	c, u := kc.Clusters[0].Cluster, kc.Users[0].User
	ca, err := dec("certificate-authority-data", c.CA)
	if err != nil {
		return nil, err
	}
	certPEM, err := dec("client-certificate-data", u.Cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := dec("client-key-data", u.Key)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: client certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("kubeconfig: certificate-authority-data holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}
	return &apiClient{server: c.Server, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// get reads path from the API server.
func (a *apiClient) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.server+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, tail(string(body), 5))
	}
	return body, nil
}

// apiPath is the API path kubectl get reads for args (kubectl's order:
// -n <namespace>, -l <selector>, <kind> [name]) when they name a pod, the
// pods of a namespace or a node; ok is false for anything else.
func apiPath(args []string) (path string, ok bool) {
	var ns, selector string
	var pos []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-n", "-l":
			if i+1 == len(args) {
				return "", false
			}
			if args[i] == "-n" {
				ns = args[i+1]
			} else {
				selector = args[i+1]
			}
			i++
		default:
			pos = append(pos, args[i])
		}
	}
	if len(pos) == 0 || len(pos) > 2 {
		return "", false
	}
	kind, name := pos[0], ""
	if len(pos) == 2 {
		name = pos[1]
	}
	switch {
	case (kind == "node" || kind == "nodes") && ns == "" && selector == "" && name != "":
		return "/api/v1/nodes/" + url.PathEscape(name), true
	case (kind == "pod" || kind == "pods") && ns != "" && name != "" && selector == "":
		return "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name), true
	case (kind == "pod" || kind == "pods") && ns != "" && name == "":
		p := "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods"
		if selector != "" {
			p += "?labelSelector=" + url.QueryEscape(selector)
		}
		return p, true
	}
	return "", false
}
