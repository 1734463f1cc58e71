//go:build integration_guest

package guest

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
	"github.com/cgdelegate/cgdelegate/integration/internal/kubelet"
)

// The kubelet harness: a standalone kubelet (no API server) that runs
// static pods from the manifests in testdata/pods, observed through its
// read-only /pods endpoint and containerd's CRI. cgdelegate runs as in
// every other variant (the guest starts it as an external NRI plugin).

// podManifests are the pod manifests of the Kubelet scenarios, written as
// a user writes them.
//
//go:embed testdata/pods/*.yaml
var podManifests embed.FS

const (
	// kubeletNode is the standalone kubelet's node name
	// (--hostname-override; static pods are named <manifest name>-<node>);
	// a cluster node's is the plan's (guestEnv.nodeName).
	kubeletNode = "cgd-vm"
	// staticNamespace is the namespace of the manifests (none says one).
	staticNamespace = "default"
	// The CRI labels a kubelet puts on every sandbox and container.
	labelPodName      = "io.kubernetes.pod.name"
	labelPodNamespace = "io.kubernetes.pod.namespace"
	labelPodUID       = "io.kubernetes.pod.uid"
	labelContainer    = "io.kubernetes.container.name"
)

// kubeletEnv is a running kubelet.
type kubeletEnv struct {
	daemon *daemon
	client *kubelet.Client
	pods   kubelet.StaticPods
	driver kubelet.CgroupDriver
	node   string
}

// kubeletConfig is the guest kubelet's configuration: the cgroup driver
// runc is configured with in containerdConfig (systemd on the systemd
// variants, cgroupfs otherwise), and no CPU manager, so that cgdelegate
// pins.
func (e *guestEnv) kubeletConfig() kubelet.Config {
	driver := kubelet.CgroupFS
	if e.variant.Systemd {
		driver = kubelet.Systemd
	}
	return kubelet.Config{
		CgroupDriver:     driver,
		StaticPodPath:    e.paths.StaticPods,
		RuntimeEndpoint:  "unix://" + e.paths.ContainerdSocket,
		CPUManagerPolicy: "none",
	}
}

// requireKubelet returns the running kubelet, starting it on first use. It
// fails the scenario when the variant has no kubelet or it does not run.
// The kubelet starts only when a scenario needs it: it kills every pod it
// did not make, so the CRI scenarios of the same boot run before it.
func (e *guestEnv) requireKubelet(t *testing.T) *kubeletEnv {
	t.Helper()
	if !e.variant.Kubelet {
		t.Fatalf("scenario needs a kubelet but variant %s has none", e.variant.Name)
	}
	if e.kubelet == nil && e.kubeletErr == nil {
		start := time.Now()
		e.kubeletErr = e.startKubelet(e.kubeletConfig())
		t.Logf("kubelet started in %s (err %v)", time.Since(start).Round(100*time.Millisecond), e.kubeletErr)
	}
	if e.kubeletErr != nil {
		t.Fatalf("kubelet: %v", e.kubeletErr)
	}
	if !e.kubelet.daemon.Running() {
		t.Fatalf("the kubelet has exited; log tail:\n%s", fileTail(e.paths.KubeletLog, 40))
	}
	return e.kubelet
}

// startKubelet writes the config, starts the kubelet with extraArgs after
// its own and waits for its /healthz. On error e.kubelet stays nil only
// when it never started.
func (e *guestEnv) startKubelet(cfg kubelet.Config, extraArgs ...string) error {
	y, err := cfg.YAML()
	if err != nil {
		return err
	}
	if err := writeFile(e.paths.KubeletConfig, string(y)); err != nil {
		return err
	}
	for _, d := range []string{e.paths.StaticPods, e.paths.KubeletRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("kubelet: %w", err)
		}
	}
	k := &kubeletEnv{
		daemon: &daemon{
			name: "kubelet", path: e.paths.KubeletBinary, logPath: e.paths.KubeletLog,
			args: append([]string{"--config=" + e.paths.KubeletConfig, "--hostname-override=" + e.nodeName(), "--root-dir=" + e.paths.KubeletRoot, "--v=1"}, extraArgs...),
		},
		client: kubelet.NewClient(fmt.Sprintf("http://127.0.0.1:%d", kubelet.DefaultReadOnlyPort)),
		pods:   kubelet.StaticPods{Dir: e.paths.StaticPods},
		driver: cfg.CgroupDriver,
		node:   e.nodeName(),
	}
	if err := k.daemon.Start(); err != nil {
		return err
	}
	e.kubelet = k
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		err := k.client.Healthz(ctx)
		if err == nil {
			return nil
		}
		if !k.daemon.Running() {
			return fmt.Errorf("the kubelet exited at start-up:\n%s", fileTail(e.paths.KubeletLog, 40))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelet /healthz never answered ok (%w; last: %w):\n%s", ctx.Err(), err, fileTail(e.paths.KubeletLog, 40))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// loadPod decodes one of the embedded manifests (testdata/pods/<file>).
func loadPod(t *testing.T, file string) *corev1.Pod {
	t.Helper()
	b, err := podManifests.ReadFile("testdata/pods/" + file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := kubelet.DecodePod(b)
	if err != nil {
		t.Fatalf("testdata/pods/%s: %v", file, err)
	}
	return p
}

// staticPod is a pod the kubelet runs from a manifest the scenario wrote.
type staticPod struct {
	// Name is the manifest's name; Full the kubelet's (with the node).
	Name, Full string
	// Written is when the manifest was renamed into place.
	Written time.Time
}

// write writes the pod's manifest and returns at once; the caller removes
// it (remove) when done.
func (k *kubeletEnv) write(p *corev1.Pod) (*staticPod, error) {
	sp := &staticPod{Name: p.Name, Full: kubelet.StaticPodName(p.Name, k.node)}
	if _, err := k.pods.Write(p); err != nil {
		return nil, err
	}
	sp.Written = time.Now()
	return sp, nil
}

// run writes the pod's manifest; at cleanup the manifest is removed and
// the test waits for the pod's containers to be gone, so the next scenario
// starts on a quiet node.
func (k *kubeletEnv) run(t *testing.T, e *guestEnv, p *corev1.Pod) *staticPod {
	t.Helper()
	sp, err := k.write(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if err := k.remove(ctx, e, sp); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return sp
}

// remove deletes the pod's manifest and waits until the kubelet no longer
// lists the pod and containerd runs none of its containers.
func (k *kubeletEnv) remove(ctx context.Context, e *guestEnv, sp *staticPod) error {
	if err := k.pods.Remove(sp.Name); err != nil {
		return err
	}
	if _, err := k.client.WaitPod(ctx, staticNamespace, sp.Full, 250*time.Millisecond, func(p *corev1.Pod) (bool, error) {
		return p == nil, nil
	}); err != nil {
		return fmt.Errorf("static pod %s still listed after its manifest went: %w", sp.Full, err)
	}
	for {
		cs, err := e.runningContainers(ctx, sp.Full)
		if err == nil && len(cs) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("static pod %s: containers still running after its manifest went (%d running, %s): %w",
				sp.Full, len(cs), e.describeContainers(context.Background(), sp.Full), ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runningContainers lists the running containers of the kubelet pod
// called full (CRI, by the kubelet's labels).
func (e *guestEnv) runningContainers(ctx context.Context, full string) ([]*runtimeapi.Container, error) {
	resp, err := e.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{labelPodName: full, labelPodNamespace: staticNamespace},
	}})
	if err != nil {
		return nil, fmt.Errorf("cri: ListContainers of %s: %w", full, err)
	}
	return resp.GetContainers(), nil
}

// waitPod polls /pods until done accepts the static pod, failing the test
// with the kubelet's last view of the pod on timeout.
func (k *kubeletEnv) waitPod(ctx context.Context, t *testing.T, sp *staticPod, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	p, err := k.client.WaitPod(ctx, staticNamespace, sp.Full, 250*time.Millisecond, func(p *corev1.Pod) (bool, error) {
		return p != nil && done(p), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return p
}

// waitRunning waits until the kubelet reports every named container of the
// static pod running, and returns the kubelet's view of the pod.
func (k *kubeletEnv) waitRunning(ctx context.Context, t *testing.T, sp *staticPod, containers ...string) *corev1.Pod {
	t.Helper()
	p := k.waitPod(ctx, t, sp, "static pod "+sp.Full+" running", func(p *corev1.Pod) bool {
		for _, c := range containers {
			if !kubelet.Running(p, c) {
				return false
			}
		}
		return true
	})
	t.Logf("kubelet: %s (%.1fs after the manifest)", kubelet.Describe(p), time.Since(sp.Written).Seconds())
	return p
}

// kubeletContainer is the CRI handle of a container of a kubelet pod, for
// exec and status.
func (e *guestEnv) kubeletContainer(ctx context.Context, t *testing.T, p *corev1.Pod, name string) *cri.Container {
	t.Helper()
	id, err := kubelet.ContainerID(kubelet.ContainerStatus(p, name))
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	resp, err := e.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
	if err != nil || len(resp.GetContainers()) != 1 {
		t.Fatalf("pod %s container %s (%s): not found in containerd: %v", p.Name, name, id, err)
	}
	c := resp.GetContainers()[0]
	if got := c.GetLabels()[labelContainer]; got != name {
		t.Fatalf("container %s is labelled %q, want %q", id, got, name)
	}
	return &cri.Container{ID: id, Name: name, Pod: e.cri.Adopt(c.GetPodSandboxId(), p.Name)}
}

// kubeletPodCgroup is the host directory of the pod cgroup the kubelet
// made for p; it must exist.
func (e *guestEnv) kubeletPodCgroup(t *testing.T, k *kubeletEnv, p *corev1.Pod) string {
	t.Helper()
	rel, err := kubelet.PodCgroup(k.driver, p)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.paths.CgroupRoot, rel)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		t.Fatalf("pod cgroup of %s: %v", p.Name, err)
	}
	return dir
}

// errKubeletWaiting is returned by waitWaiting's condition when the
// container got past waiting.
var errKubeletWaiting = errors.New("container left the waiting state")

// waitWaiting waits until the kubelet reports the container waiting with
// reason, and returns the pod; it fails at once if the container runs.
func (k *kubeletEnv) waitWaiting(ctx context.Context, t *testing.T, sp *staticPod, container, reason string) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	p, err := k.client.WaitPod(ctx, staticNamespace, sp.Full, 250*time.Millisecond, func(p *corev1.Pod) (bool, error) {
		cs := kubelet.ContainerStatus(p, container)
		switch {
		case cs == nil:
			return false, nil
		case cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0:
			return false, fmt.Errorf("%w: %s", errKubeletWaiting, kubelet.Describe(p))
		}
		return cs.State.Waiting != nil && cs.State.Waiting.Reason == reason, nil
	})
	if err != nil {
		t.Fatalf("static pod %s, container %s waiting with %s: %v", sp.Full, container, reason, err)
	}
	return p
}

// kubeletPodNames are the names of the containers in the pod's spec.
func kubeletPodNames(p *corev1.Pod) []string {
	var names []string
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

// describeContainers is the CRI's view of every container of the kubelet
// pod called full, for messages.
func (e *guestEnv) describeContainers(ctx context.Context, full string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := e.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{labelPodName: full, labelPodNamespace: staticNamespace},
	}})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, c := range resp.GetContainers() {
		out = append(out, fmt.Sprintf("%s=%s", c.GetMetadata().GetName(), c.GetState()))
	}
	return "[" + strings.Join(out, " ") + "]"
}
