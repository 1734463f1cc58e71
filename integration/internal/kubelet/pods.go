package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Client reads a kubelet's read-only HTTP endpoint.
type Client struct {
	// URL is the endpoint, e.g. http://127.0.0.1:10255.
	URL  string
	HTTP *http.Client
}

// NewClient returns a client of the read-only endpoint at url with a
// short per-request timeout.
func NewClient(url string) *Client {
	return &Client{URL: strings.TrimRight(url, "/"), HTTP: &http.Client{Timeout: 10 * time.Second}}
}

func (c *Client) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+path, nil)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: %w", path, err)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// Healthz returns nil when the kubelet answers /healthz with ok.
func (c *Client) Healthz(ctx context.Context) error {
	b, err := c.get(ctx, "/healthz")
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(string(b)); s != "ok" {
		return fmt.Errorf("kubelet /healthz: %q", s)
	}
	return nil
}

// Pods returns the kubelet's pods from /pods. For static pods of a kubelet
// without an API server the status is the kubelet's own: phase, QoS class,
// and each container's state with its waiting reason and message.
func (c *Client) Pods(ctx context.Context) ([]corev1.Pod, error) {
	b, err := c.get(ctx, "/pods")
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("kubelet /pods: %w", err)
	}
	return list.Items, nil
}

// Pod returns the pod namespace/name from /pods, or nil when the kubelet
// does not list it.
func (c *Client) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pods, err := c.Pods(ctx)
	if err != nil {
		return nil, err
	}
	return FindPod(pods, namespace, name), nil
}

// FindPod returns the pod namespace/name, or nil.
func FindPod(pods []corev1.Pod, namespace, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Namespace == namespace && pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

// ErrWait is wrapped by WaitPod when the condition was not met in time.
var ErrWait = errors.New("kubelet pod condition not met")

// WaitPod polls /pods every interval until done accepts the pod
// namespace/name (nil while the kubelet does not list it), done fails, or
// ctx ends. The timeout error describes the last view of the pod.
func (c *Client) WaitPod(ctx context.Context, namespace, name string, interval time.Duration,
	done func(*corev1.Pod) (bool, error),
) (*corev1.Pod, error) {
	var last *corev1.Pod
	var lastErr error
	for {
		p, err := c.Pod(ctx, namespace, name)
		if err == nil {
			last, lastErr = p, nil
			ok, derr := done(p)
			if derr != nil {
				return p, derr
			}
			if ok {
				return p, nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			err := fmt.Errorf("%w: pod %s/%s: %w; last seen: %s", ErrWait, namespace, name, ctx.Err(), Describe(last))
			if lastErr != nil {
				err = fmt.Errorf("%w (last error: %w)", err, lastErr)
			}
			return last, err
		case <-time.After(interval):
		}
	}
}

// ContainerStatus returns the status of the named container of the pod, or
// nil when the kubelet reports none (yet).
func ContainerStatus(p *corev1.Pod, container string) *corev1.ContainerStatus {
	if p == nil {
		return nil
	}
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == container {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// Running reports whether the named container of the pod is running.
func Running(p *corev1.Pod, container string) bool {
	cs := ContainerStatus(p, container)
	return cs != nil && cs.State.Running != nil
}

// ContainerID returns the runtime's ID of a container from its status
// ("containerd://<id>" gives "<id>").
func ContainerID(cs *corev1.ContainerStatus) (string, error) {
	if cs == nil {
		return "", errors.New("no container status")
	}
	_, id, ok := strings.Cut(cs.ContainerID, "://")
	if !ok || id == "" {
		return "", fmt.Errorf("container %s: containerID %q: want <runtime>://<id>", cs.Name, cs.ContainerID)
	}
	return id, nil
}

// Describe is a one-line summary of a pod's status for test messages: its
// phase and QoS class and each container's state, with waiting and
// termination reasons and messages.
func Describe(p *corev1.Pod) string {
	if p == nil {
		return "not listed by the kubelet"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s uid=%s phase=%s qos=%s", p.Namespace, p.Name, p.UID, p.Status.Phase, p.Status.QOSClass)
	for _, cs := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, "; %s: restarts=%d ", cs.Name, cs.RestartCount)
		switch s := cs.State; {
		case s.Running != nil:
			fmt.Fprintf(&b, "running since %s", s.Running.StartedAt.Format(time.RFC3339))
		case s.Waiting != nil:
			fmt.Fprintf(&b, "waiting %s: %q", s.Waiting.Reason, s.Waiting.Message)
		case s.Terminated != nil:
			fmt.Fprintf(&b, "terminated %s (exit %d): %q", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
		default:
			b.WriteString("no state")
		}
	}
	return b.String()
}
