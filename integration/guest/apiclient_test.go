//go:build integration_guest

package guest

// The Cluster scenarios poll pods and nodes many times a second. Each
// kubectl run is a large Go program started under TCG, which costs the
// guest more CPU than the poll is worth and slows the pods it watches; so
// getJSON reads pods and nodes straight from the API server with the same
// admin kubeconfig; so do the scenarios' own creations and deletions of
// pods and namespaces (applyObject, deletePods), the requests kubectl
// would send. What a user types is left to kubectl.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// adminCluster is the API server's URL and CA (base64, as a kubeconfig
// holds it) from guestKubeconfig, read without a kubectl run.
func adminCluster() (server, ca string, err error) {
	raw, err := os.ReadFile(guestKubeconfig)
	if err != nil {
		return "", "", fmt.Errorf("kubeconfig: %w", err)
	}
	var kc kubeconfigFile
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		return "", "", fmt.Errorf("kubeconfig %s: %w", guestKubeconfig, err)
	}
	if len(kc.Clusters) == 0 || kc.Clusters[0].Cluster.Server == "" || kc.Clusters[0].Cluster.CA == "" {
		return "", "", fmt.Errorf("kubeconfig %s: no cluster with a server and certificate-authority-data", guestKubeconfig)
	}
	return kc.Clusters[0].Cluster.Server, kc.Clusters[0].Cluster.CA, nil
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
	return a.do(ctx, http.MethodGet, path, "", nil)
}

// errNotFound is a 404 from the API server.
var errNotFound = errors.New("not found")

// do sends one request and returns the body of a 2xx answer. Any other
// answer is an error with the status and the message of the API's Status
// object (a policy's denial, say), as kubectl prints it; a 404 wraps
// errNotFound.
func (a *apiClient) do(ctx context.Context, method, path, contentType string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.server+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return out, nil
	}
	msg := tail(string(out), 5)
	var st metav1.Status
	if json.Unmarshal(out, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%s %s: %w: %s", method, path, errNotFound, msg)
	}
	return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
}

// objectPath is the API path of a Pod or a Namespace, the kinds the
// scenarios create; ok is false for any other kind.
func objectPath(kind, namespace, name string) (path string, ok bool) {
	switch {
	case kind == "Pod" && namespace != "" && name != "":
		return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods/" + url.PathEscape(name), true
	case kind == "Namespace" && namespace == "" && name != "":
		return "/api/v1/namespaces/" + url.PathEscape(name), true
	}
	return "", false
}

// apply creates or updates obj (JSON of a Pod or a Namespace) by
// server-side apply, the request `kubectl apply --server-side` sends, as
// field manager cgd-guest. ok is false for any other kind.
func (a *apiClient) apply(ctx context.Context, obj []byte) (out []byte, ok bool, err error) {
	var meta struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(obj, &meta); err != nil {
		return nil, true, fmt.Errorf("apply: %w", err)
	}
	path, ok := objectPath(meta.Kind, meta.Metadata.Namespace, meta.Metadata.Name)
	if !ok || meta.APIVersion != "v1" {
		return nil, false, nil
	}
	out, err = a.do(ctx, http.MethodPatch, path+"?fieldManager=cgd-guest&force=true", "application/apply-patch+yaml", obj)
	return out, true, err
}

// mergePatch sends a JSON merge patch to path: what kubectl annotate and
// kubectl label send.
func (a *apiClient) mergePatch(ctx context.Context, path string, patch []byte) error {
	_, err := a.do(ctx, http.MethodPatch, path, "application/merge-patch+json", patch)
	return err
}

// deletePod deletes namespace/name, its default grace period kept, and
// waits until it is gone (kubectl delete --wait); a pod already gone is
// no error.
func (a *apiClient) deletePod(ctx context.Context, namespace, name string) error {
	path, _ := objectPath("Pod", namespace, name)
	if _, err := a.do(ctx, http.MethodDelete, path, "", nil); err != nil {
		if errors.Is(err, errNotFound) {
			return nil
		}
		return err
	}
	return poll(ctx, 250*time.Millisecond, func() (bool, error) {
		_, err := a.get(ctx, path)
		if errors.Is(err, errNotFound) {
			return true, nil
		}
		return false, nil
	})
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
