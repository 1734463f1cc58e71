package advert

// The withdrawal at uninstall: FeatureLabel, FailClosedAnnotation and
// ReasonAnnotation removed from every Node that carries any, by `cgdelegate node-label
// withdraw` in the chart's pre-delete Job. The plugin removes them itself
// when it stops, but at `helm uninstall` its RBAC is usually deleted before
// its pods get SIGTERM, so that removal is refused and they would stay on
// every node.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// withdrawParallel is how many Nodes are patched at once.
const withdrawParallel = 4

// ClusterWithdrawer removes FeatureLabel, FailClosedAnnotation and
// ReasonAnnotation from every Node that has any.
type ClusterWithdrawer struct {
	client *kubeClient
}

// NewClusterWithdrawer returns a withdrawer that talks to the API server
// of the pod it runs in: $KUBERNETES_SERVICE_HOST and
// $KUBERNETES_SERVICE_PORT (read through getenv), and the token and ca.crt
// in saDir. Anything missing or malformed is an error naming each.
func NewClusterWithdrawer(saDir string, getenv func(string) string) (*ClusterWithdrawer, error) {
	env := lookInCluster(getenv, saDir, false)
	if probs := slices.Concat(env.missing, env.bad); len(probs) > 0 {
		return nil, fmt.Errorf("the Kubernetes API from a pod is needed, but %s", strings.Join(probs, "; "))
	}
	c, err := newKubeClient(env)
	if err != nil {
		return nil, err
	}
	return &ClusterWithdrawer{client: c}, nil
}

// API is the API server's address.
func (w *ClusterWithdrawer) API() string { return w.client.base }

// NodeWithdrawal is the outcome for one Node.
type NodeWithdrawal struct {
	Node string
	// Gone: the Node was deleted after the list, so it has no label.
	Gone bool
	// Err is why the label could not be removed; nil when it is gone.
	// An *APIError in it carries the HTTP status and the API's message.
	Err error
}

// Withdraw lists the Nodes (their metadata, every Node: no selector finds
// an annotation) and, from each that has FeatureLabel, FailClosedAnnotation
// or ReasonAnnotation (any value), removes all three with one merge patch, a
// few at a time, until ctx is done. It returns one outcome per listed Node, in the list's order; the
// error is the list's, with the outcomes of the Nodes listed before it
// failed. A Node the patch no longer finds (404) counts as done.
func (w *ClusterWithdrawer) Withdraw(ctx context.Context) ([]NodeWithdrawal, error) {
	nodes, err := w.client.listNodes(ctx, "", advertised)
	out := make([]NodeWithdrawal, len(nodes))
	patch := nodePatch(nil, map[string]*string{FailClosedAnnotation: nil, ReasonAnnotation: nil})
	sem := make(chan struct{}, withdrawParallel)
	var wg sync.WaitGroup
	for i, n := range nodes {
		out[i].Node = n
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = withdrawOne(ctx, w.client, n, patch)
		})
	}
	wg.Wait()
	if err != nil {
		return out, fmt.Errorf("list the nodes labelled %s or annotated %s or %s: %w", FeatureLabel, FailClosedAnnotation, ReasonAnnotation, err)
	}
	return out, nil
}

// advertised reports a Node that carries FeatureLabel,
// FailClosedAnnotation or ReasonAnnotation.
func advertised(labels, annotations map[string]string) bool {
	_, l := labels[FeatureLabel]
	_, a := annotations[FailClosedAnnotation]
	_, r := annotations[ReasonAnnotation]
	return l || a || r
}

// withdrawOne removes the label and the annotation from node.
func withdrawOne(ctx context.Context, c *kubeClient, node string, patch []byte) NodeWithdrawal {
	r := NodeWithdrawal{Node: node}
	if err := ctx.Err(); err != nil {
		r.Err = fmt.Errorf("remove label %s from node %q: not tried: %w", FeatureLabel, node, err)
		return r
	}
	err := c.patchNode(ctx, node, patch)
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Code == http.StatusNotFound {
		r.Gone = true
		return r
	}
	if err != nil {
		r.Err = fmt.Errorf("remove label %s from node %q: %w", FeatureLabel, node, err)
	}
	return r
}
