// Package inproc runs the runtime side of NRI in this process, on a real
// ttrpc socket, so the real plugin can be driven the way containerd drives
// it: RunPodSandbox, CreateContainer and friends, with containerd-like specs.
//
// Use it from tests, benchmarks and the demo. It is not a container runtime:
// nothing is started, and adjustments are only returned, never applied.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
)

// Runtime is an in-process NRI runtime side.
type Runtime struct {
	// Name and Version are what plugins see in Configure.
	Name, Version string

	r      *adaptation.Adaptation
	dir    string
	socket string

	mu      sync.Mutex
	pods    []*api.PodSandbox
	ctrs    []*api.Container
	counts  chan pluginCount
	updates [][]*api.ContainerUpdate
	// synced counts the plugins synchronized so far; every plugin count
	// carries it, so Connect can tell a count that follows its own
	// plugin's synchronization from a stale one (the adaptation reports a
	// plugin count twice after a synchronization, the second one after
	// Connect may have returned).
	synced int
}

// pluginCount is a plugin count the adaptation reported, with the number
// of plugins synchronized before it.
type pluginCount struct{ plugins, synced int }

// NewRuntime creates and starts a runtime side listening on a socket in a
// short temporary directory (Unix socket paths are limited to ~108 bytes,
// which t.TempDir() can exceed). opts are added to the adaptation's own
// (e.g. adaptation.WithDefaultValidator). Close removes it.
func NewRuntime(name, version string, opts ...adaptation.Option) (*Runtime, error) {
	quietNRILogs()
	dir, err := os.MkdirTemp("", "cgd-nri-")
	if err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	rt := &Runtime{Name: name, Version: version, dir: dir, socket: filepath.Join(dir, "nri.sock"), counts: make(chan pluginCount, 16)}
	empty := filepath.Join(dir, "none")
	if err := os.Mkdir(empty, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("create plugin dir: %w", err)
	}
	opts = append([]adaptation.Option{
		adaptation.WithSocketPath(rt.socket),
		adaptation.WithPluginPath(empty),
		adaptation.WithPluginConfigPath(empty),
		adaptation.WithMetrics(countMetrics{rt}),
	}, opts...)
	rt.r, err = adaptation.New(name, version, rt.sync, rt.update, opts...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("create NRI adaptation: %w", err)
	}
	if err := rt.r.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start NRI adaptation: %w", err)
	}
	return rt, nil
}

// Close stops the runtime side and removes its socket.
func (rt *Runtime) Close() {
	rt.r.Stop()
	_ = os.RemoveAll(rt.dir)
}

// SetState sets the pods and containers reported to plugins in Synchronize.
func (rt *Runtime) SetState(pods []*api.PodSandbox, ctrs []*api.Container) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.pods, rt.ctrs = pods, ctrs
}

func (rt *Runtime) sync(ctx context.Context, cb adaptation.SyncCB) error {
	rt.mu.Lock()
	pods, ctrs := rt.pods, rt.ctrs
	rt.mu.Unlock()
	upd, err := cb(ctx, pods, ctrs)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	if len(upd) > 0 {
		rt.updates = append(rt.updates, upd)
	}
	rt.synced++
	rt.mu.Unlock()
	return nil
}

func (rt *Runtime) update(_ context.Context, upd []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.updates = append(rt.updates, upd)
	return nil, nil
}

// TakeUpdates returns and forgets the unsolicited updates plugins sent
// (from Synchronize or UpdateContainers).
func (rt *Runtime) TakeUpdates() [][]*api.ContainerUpdate {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	u := rt.updates
	rt.updates = nil
	return u
}

// Connect starts a stub for plugin p on this runtime and waits until the
// runtime has synchronized it; opts are added to the stub's own. Stop the
// returned stub to disconnect.
func (rt *Runtime) Connect(ctx context.Context, p any, name, idx string, opts ...stub.Option) (stub.Stub, error) {
	opts = append([]stub.Option{stub.WithSocketPath(rt.socket), stub.WithPluginName(name), stub.WithPluginIdx(idx)}, opts...)
	s, err := stub.New(p, opts...)
	if err != nil {
		return nil, fmt.Errorf("create stub for %s: %w", name, err)
	}
	// Make room: counts are dropped when the channel is full.
	for len(rt.counts) > 0 {
		<-rt.counts
	}
	rt.mu.Lock()
	want := rt.synced + 1
	rt.mu.Unlock()
	if err := s.Start(ctx); err != nil {
		return nil, fmt.Errorf("start stub for %s: %w", name, err)
	}
	// The adaptation adds a plugin to its list only after synchronizing it,
	// and then reports the new plugin count. Counts reported before (at
	// start-up, at the end of every request, and the second report after
	// an earlier synchronization) carry a smaller synced.
	timeout := time.After(10 * time.Second)
	for {
		select {
		case c := <-rt.counts:
			if c.synced >= want {
				return s, nil
			}
		case <-timeout:
			s.Stop()
			return nil, errors.New("plugin " + name + " did not synchronize within 10s")
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		}
	}
}

// Socket is the path plugins connect to.
func (rt *Runtime) Socket() string { return rt.socket }

// RunPod relays RunPodSandbox.
func (rt *Runtime) RunPod(ctx context.Context, pod *api.PodSandbox) error {
	return rt.r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})
}

// StopPod relays StopPodSandbox.
func (rt *Runtime) StopPod(ctx context.Context, pod *api.PodSandbox) error {
	return rt.r.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod})
}

// RemovePod relays RemovePodSandbox.
func (rt *Runtime) RemovePod(ctx context.Context, pod *api.PodSandbox) error {
	return rt.r.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod})
}

// CreateContainer relays CreateContainer and returns the plugins' combined
// answer.
func (rt *Runtime) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.CreateContainerResponse, error) {
	return rt.r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
}

// StopContainer relays StopContainer.
func (rt *Runtime) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.StopContainerResponse, error) {
	return rt.r.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
}

// RemoveContainer relays RemoveContainer.
func (rt *Runtime) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return rt.r.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr})
}

// UpdateContainer relays UpdateContainer (an in-place resize of ctr to
// res) and returns the plugins' combined answer.
func (rt *Runtime) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (*api.UpdateContainerResponse, error) {
	return rt.r.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: res})
}

// UpdatePodSandbox relays UpdatePodSandbox (an in-place resize of the
// pod-level resources to res).
func (rt *Runtime) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, res *api.LinuxResources) error {
	_, err := rt.r.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{Pod: pod, LinuxResources: res})
	return err
}

// countMetrics passes the adaptation's plugin count on to Connect.
type countMetrics struct{ rt *Runtime }

func (countMetrics) RecordPluginInvocation(string, string, error)      {}
func (countMetrics) RecordPluginLatency(string, string, time.Duration) {}
func (countMetrics) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {
}

func (m countMetrics) UpdatePluginCount(n int) {
	m.rt.mu.Lock()
	c := pluginCount{plugins: n, synced: m.rt.synced}
	m.rt.mu.Unlock()
	select {
	case m.rt.counts <- c:
	default:
	}
}

var quietOnce sync.Once

// quietNRILogs silences the NRI library's own logging of every event.
func quietNRILogs() {
	quietOnce.Do(func() {
		if os.Getenv("NRI_DEBUG") == "" {
			nrilog.Set(nopLogger{})
			// ttrpc logs every connection torn down at shutdown.
			logrus.SetOutput(io.Discard)
		}
	})
}

type nopLogger struct{}

func (nopLogger) Debugf(context.Context, string, ...any) {}
func (nopLogger) Infof(context.Context, string, ...any)  {}
func (nopLogger) Warnf(context.Context, string, ...any)  {}
func (nopLogger) Errorf(context.Context, string, ...any) {}
