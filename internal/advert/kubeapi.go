package advert

// A minimal Kubernetes API client for the calls the node label needs: a
// JSON merge patch of a Node, and a list of the Nodes that carry a label
// (for the withdrawal at uninstall); and for the pod Events, a create of
// an events.k8s.io/v1 Event (events.go). It speaks plain HTTPS with the pod's
// service-account token, so the module needs no client library.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Environment variables read for the in-cluster API address and the node.
const (
	EnvServiceHost = "KUBERNETES_SERVICE_HOST"
	EnvServicePort = "KUBERNETES_SERVICE_PORT"
	// EnvNodeName names the plugin's node; the DaemonSet sets it from the
	// downward API (spec.nodeName).
	EnvNodeName = "NODE_NAME"
)

// Files in the service-account directory.
const (
	tokenFile = "token"
	caFile    = "ca.crt"
)

// requestTimeout bounds one API request, connection included.
const requestTimeout = 10 * time.Second

// maxErrorBody caps how much of an error response is read.
const maxErrorBody = 64 << 10

// maxListBody caps one page of a list. A page holds at most listPageSize
// objects' metadata.
const maxListBody = 32 << 20

// APIError is a response from the API server other than 2xx. Message is
// the API's Status message when the body is one (an admission policy's
// refusal, a missing RBAC rule), otherwise the start of the body.
type APIError struct {
	Method, Path string
	// Code is the HTTP status code.
	Code int
	// Reason is the Status reason ("Forbidden", "Invalid"), if any.
	Reason  string
	Message string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Code, msg)
}

// ErrRedirect means the API server (or whatever answered at its address)
// answered with a redirect, which the client does not follow.
var ErrRedirect = errors.New("redirect refused")

// refuseRedirect is the client's CheckRedirect: the API server never
// redirects the calls made here, and following one would send the
// service-account token and the request (a Node patch) to another
// address. The error names the location.
func refuseRedirect(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("%w: the API server answered with a redirect to %q; the service-account token is sent to the API server only", ErrRedirect, req.URL.Redacted())
}

// kubeClient talks to the API server as the pod's service account.
type kubeClient struct {
	base string // https://host:port
	// tokenPath is read on every request; token is a fixed bearer token
	// (a kubeconfig's) used when tokenPath is ""; neither for a client
	// certificate.
	tokenPath, token string
	http             *http.Client
}

// inClusterEnv is what an in-cluster client needs, found or not.
type inClusterEnv struct {
	host, port, node string
	token, ca        string // file paths
	// missing names what is not there (not in a pod); bad, what is there
	// but wrong.
	missing, bad []string
}

// lookInCluster reads the environment (through getenv) and checks the
// service-account files in saDir, naming everything that is missing.
// $NODE_NAME is needed only with needNode.
func lookInCluster(getenv func(string) string, saDir string, needNode bool) inClusterEnv {
	e := inClusterEnv{
		host:  getenv(EnvServiceHost),
		port:  getenv(EnvServicePort),
		node:  getenv(EnvNodeName),
		token: filepath.Join(saDir, tokenFile),
		ca:    filepath.Join(saDir, caFile),
	}
	for _, v := range []struct{ name, value string }{
		{EnvNodeName, e.node}, {EnvServiceHost, e.host}, {EnvServicePort, e.port},
	} {
		if v.value == "" && (needNode || v.name != EnvNodeName) {
			e.missing = append(e.missing, "$"+v.name+" is not set")
		}
	}
	if n, err := strconv.ParseUint(e.port, 10, 16); e.port != "" && (err != nil || n == 0) {
		e.bad = append(e.bad, fmt.Sprintf("$%s: %q is not a port number from 1 to 65535", EnvServicePort, e.port))
	}
	if strings.Contains(e.node, "/") {
		e.bad = append(e.bad, fmt.Sprintf("$%s: %q is not a node name", EnvNodeName, e.node))
	}
	for _, p := range []string{e.token, e.ca} {
		if _, err := os.Stat(p); err != nil {
			e.missing = append(e.missing, err.Error())
		}
	}
	return e
}

// newKubeClient builds a client for e; the CA is read now, the token on
// every request.
func newKubeClient(e inClusterEnv) (*kubeClient, error) {
	pem, err := os.ReadFile(e.ca)
	if err != nil {
		return nil, fmt.Errorf("read the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster CA %s: no PEM certificate in it", e.ca)
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: requestTimeout,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConns:        2,
	}
	return &kubeClient{
		base:      "https://" + net.JoinHostPort(e.host, e.port),
		tokenPath: e.token,
		http:      &http.Client{Transport: tr, Timeout: requestTimeout, CheckRedirect: refuseRedirect},
	}, nil
}

// nodePath is the API path of a Node.
func nodePath(node string) string { return "/api/v1/nodes/" + url.PathEscape(node) }

// labelPatch is the merge patch that sets FeatureLabel to value, or
// removes it when value is nil.
func labelPatch(value *string) []byte {
	patch := map[string]any{"metadata": map[string]any{"labels": map[string]any{FeatureLabel: value}}}
	b, err := json.Marshal(patch)
	if err != nil {
		panic(fmt.Sprintf("advert: marshal a label patch: %v", err)) // a map of strings always marshals
	}
	return b
}

// nodePatch is labelPatch that also sets each of annotations to its
// value, or removes it when the value is nil.
func nodePatch(label *string, annotations map[string]*string) []byte {
	patch := map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{FeatureLabel: label},
		"annotations": annotations,
	}}
	b, err := json.Marshal(patch)
	if err != nil {
		panic(fmt.Sprintf("advert: marshal a node patch: %v", err)) // a map of strings always marshals
	}
	return b
}

// patchNode sends a JSON merge patch to the Node named node.
func (c *kubeClient) patchNode(ctx context.Context, node string, patch []byte) error {
	_, err := c.do(ctx, http.MethodPatch, nodePath(node), "application/merge-patch+json", "application/json", patch, 0)
	return err
}

// listPageSize is how many Nodes one list request asks for; more come in
// further pages (metadata.continue).
const listPageSize = 100

// metadataAccept asks for the objects' metadata only
// (PartialObjectMetadataList, what kubectl get -o name uses), with the full
// list as the fallback of an API server that cannot.
const metadataAccept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

// listNodes returns the names of the Nodes that match the label selector
// ("" for every Node) and that keep accepts (nil: all), in the API's
// order, following continue tokens page by page. keep sees each Node's
// labels and annotations.
func (c *kubeClient) listNodes(ctx context.Context, selector string, keep func(labels, annotations map[string]string) bool) ([]string, error) {
	var names []string
	err := c.list(ctx, "/api/v1/nodes", selector, metadataAccept, func(path string, i int, raw json.RawMessage) error {
		var it objectMeta
		if err := json.Unmarshal(raw, &it); err != nil {
			return fmt.Errorf("GET %s: item %d: %w", path, i, err)
		}
		if it.Metadata.Name == "" {
			return fmt.Errorf("GET %s: item %d has no metadata.name", path, i)
		}
		if keep == nil || keep(it.Metadata.Labels, it.Metadata.Annotations) {
			names = append(names, it.Metadata.Name)
		}
		return nil
	})
	return names, err
}

// objectMeta is the part of a listed object every list reads.
type objectMeta struct {
	Metadata struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// list GETs the collection at resource (an API path) whose objects match
// the label selector ("" for all), listPageSize at a time, following
// continue tokens, and calls item with each object in the API's order (and
// the page's path and the object's index in it, for errors). It stops at
// the first error.
func (c *kubeClient) list(ctx context.Context, resource, selector, accept string, item func(path string, i int, raw json.RawMessage) error) error {
	cont := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(listPageSize)}}
		if selector != "" {
			q.Set("labelSelector", selector)
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		path := resource + "?" + q.Encode()
		body, err := c.do(ctx, http.MethodGet, path, "", accept, nil, maxListBody)
		if err != nil {
			return err
		}
		var page struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("GET %s: the answer is not a list: %w", path, err)
		}
		for i, raw := range page.Items {
			if err := item(path, i, raw); err != nil {
				return err
			}
		}
		if page.Metadata.Continue == "" {
			return nil
		}
		cont = page.Metadata.Continue
	}
}

// eventsPath is the API path of the events.k8s.io/v1 Events of a
// namespace.
func eventsPath(namespace string) string {
	return "/apis/events.k8s.io/v1/namespaces/" + url.PathEscape(namespace) + "/events"
}

// createEvent POSTs an events.k8s.io/v1 Event (JSON) into namespace.
func (c *kubeClient) createEvent(ctx context.Context, namespace string, event []byte) error {
	_, err := c.do(ctx, http.MethodPost, eventsPath(namespace), "application/json", "application/json", event, 0)
	return err
}

// do sends one request with a freshly read bearer token and turns a non-2xx
// answer into an *APIError. It returns up to maxBody bytes of a 2xx answer
// (more is an error); with maxBody 0 the answer is discarded.
func (c *kubeClient) do(ctx context.Context, method, path, contentType, accept string, body []byte, maxBody int64) ([]byte, error) {
	token := c.token
	if c.tokenPath != "" {
		raw, err := os.ReadFile(c.tokenPath)
		if err != nil {
			return nil, fmt.Errorf("read the service-account token: %w", err)
		}
		if token = strings.TrimSpace(string(raw)); token == "" {
			return nil, fmt.Errorf("service-account token %s is empty", c.tokenPath)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", accept)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, apiError(method, path, resp)
	}
	if maxBody == 0 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if int64(len(b)) > maxBody {
		return nil, fmt.Errorf("%s %s: the answer is larger than %d bytes", method, path, maxBody)
	}
	return b, nil
}

// apiError reads a failed response: the API's Status, or the body's start.
func apiError(method, path string, resp *http.Response) error {
	e := &APIError{Method: method, Path: path, Code: resp.StatusCode}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return errors.Join(e, fmt.Errorf("read the error body: %w", err))
	}
	var st struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}
	if json.Unmarshal(b, &st) == nil && st.Kind == "Status" {
		e.Message, e.Reason = st.Message, st.Reason
		return e
	}
	e.Message = strings.TrimSpace(string(b))
	if len(e.Message) > 512 {
		e.Message = e.Message[:512] + "..."
	}
	return e
}
