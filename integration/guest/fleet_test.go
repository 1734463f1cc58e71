//go:build integration_guest

package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/integration/internal/bench"
	"github.com/cgdelegate/cgdelegate/integration/internal/cri"
)

// The fleet of node-shared containers that `make bench-node` grows and
// ScaleRestart runs, and how it is polled.
const (
	// fleetPerPod node-shared containers share a pod: N=100 is 20 pods,
	// 20 shims (containerd 2.x runs one per pod).
	fleetPerPod = 5
	// pollPause is the pause between two polling rounds; a round reads
	// every node-shared container's cpuset.cpus.effective.
	pollPause = 5 * time.Millisecond
	// pollClear bounds the wait for an overlap to clear or a pool to widen:
	// the bench's kubelet anchor took up to 2 min at N=100 (one update a
	// container after its reconcile period) on a machine shared with
	// another guest.
	pollClear = 5 * time.Minute
	// fleetMilliCPU is the CPU request of a Burstable fleet container:
	// small, so that the kubelet anchor of the bench admits 50 of them
	// beside a pinned pod of 2 CPUs on the 3 CPUs it allocates (CPU 0 is
	// reserved).
	fleetMilliCPU = 10
)

// nodeFleet is the node-shared containers: their pods and the host cgroup
// directory of every container.
type nodeFleet struct {
	e   *guestEnv
	all cpuset.CPUSet
	// by pins the pinned pods of the bench: bench.ByCgdelegate or
	// bench.ByKubelet.
	by string
	// pods and inLast are the CRI's pods (cgdelegate's fleet); the
	// kubelet's fleet is static pods (benchAnchor).
	pods   []*cri.Pod
	inLast int // containers in the last pod
	dirs   []string
}

// nodeSharedPod is the i-th pod of node-shared containers (no pod-level
// resources): even ones BestEffort (the cgroup parent a kubelet gives that
// class), odd ones Burstable.
func nodeSharedPod(systemd bool, name string, i int) cri.PodSpec {
	spec := cri.PodSpec{Name: name}
	if i%2 == 0 {
		spec.UID = fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
		spec.CgroupParent = cri.PodCgroupParent(systemd, "besteffort", spec.UID)
	}
	return spec
}

// nodeSharedContainer is a container of the i-th node-shared pod: a
// sleeper, with a request of fleetMilliCPU and a 32 MiB limit in a
// Burstable pod.
func nodeSharedContainer(name string, i int) cri.ContainerSpec {
	spec := sleeper(name, 0)
	if i%2 == 1 {
		spec.Resources = &runtimeapi.LinuxContainerResources{CpuShares: fleetMilliCPU * 1024 / 1000, MemoryLimitInBytes: 32 * mib}
	}
	return spec
}

// grow adds node-shared containers until there are n, fleetPerPod to a
// pod (nodeSharedPod, nodeSharedContainer), and returns how many it added.
func (f *nodeFleet) grow(ctx context.Context, t *testing.T, n int) int {
	t.Helper()
	added := 0
	for len(f.dirs) < n {
		if len(f.pods) == 0 || f.inLast == fleetPerPod {
			i := len(f.pods)
			f.pods = append(f.pods, f.e.runPod(ctx, t, nodeSharedPod(f.e.variant.Systemd, fmt.Sprintf("fleet-%d", i), i)))
			f.inLast = 0
		}
		pod := f.pods[len(f.pods)-1]
		c := runContainer(ctx, t, pod, nodeSharedContainer(fmt.Sprintf("c%d", len(f.dirs)), len(f.pods)-1))
		f.dirs = append(f.dirs, f.e.containerCgroup(t, pod, c))
		f.inLast++
		added++
	}
	return added
}

// fleetPoller polls the fleet in rounds, in its own goroutine, until stop.
// It holds every file open and reads it with pread: one system call a
// container and round, on an emulated machine where each one is dear.
type fleetPoller struct {
	mu   sync.Mutex
	tr   bench.Trace
	err  error
	done chan struct{}
	out  chan struct{}
}

// poll starts polling the fleet as it is now. After a round it pauses
// pollPause or as long as the round took, whichever is longer, so that it
// takes at most about half of one CPU from the node it measures.
func (f *nodeFleet) poll() (*fleetPoller, error) {
	files := make([]*os.File, 0, len(f.dirs))
	for _, d := range f.dirs {
		fl, err := os.Open(filepath.Join(d, "cpuset.cpus.effective"))
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("fleet container: %w", err)
		}
		files = append(files, fl)
	}
	p := &fleetPoller{done: make(chan struct{}), out: make(chan struct{})}
	go func() {
		defer close(p.out)
		defer closeAll(files)
		buf := make([]byte, 256)
		for {
			start := time.Now()
			s, err := f.snapshot(files, buf)
			took := time.Since(start)
			p.mu.Lock()
			if err == nil {
				p.tr.Add(s, took)
			}
			p.err = err
			p.mu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(max(pollPause, took)):
			}
		}
	}()
	return p, nil
}

func closeAll(files []*os.File) {
	for _, fl := range files {
		_ = fl.Close()
	}
}

// snapshot reads every fleet container's cpuset.cpus.effective once.
func (f *nodeFleet) snapshot(files []*os.File, buf []byte) (bench.Snapshot, error) {
	union, common := cpuset.New(), f.all
	for _, fl := range files {
		n, err := fl.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return bench.Snapshot{}, fmt.Errorf("read %s: %w", fl.Name(), err)
		}
		set, err := cpuset.Parse(strings.TrimSpace(string(buf[:n])))
		if err != nil {
			return bench.Snapshot{}, fmt.Errorf("%s %q: %w", fl.Name(), buf[:n], err)
		}
		union, common = union.Union(set), common.Intersection(set)
	}
	return bench.Snapshot{At: time.Now(), Union: union, Common: common}, nil
}

// waitFor waits until the last snapshot satisfies ok, then stops polling
// and returns the trace.
func (p *fleetPoller) waitFor(ctx context.Context, what string, ok func(bench.Snapshot) bool) (bench.Trace, error) {
	ctx, cancel := context.WithTimeout(ctx, pollClear)
	defer cancel()
	for {
		p.mu.Lock()
		n, err := len(p.tr.Snapshots), p.err
		met := n > 0 && ok(p.tr.Snapshots[n-1])
		p.mu.Unlock()
		if met || err != nil || ctx.Err() != nil {
			tr, perr := p.stop()
			switch {
			case perr != nil:
				return tr, perr
			case !met:
				last := "no round"
				if n > 0 {
					last = fmt.Sprintf("union %s, common %s", tr.Snapshots[n-1].Union, tr.Snapshots[n-1].Common)
				}
				return tr, fmt.Errorf("%s: not within %s: %w (last round: %s)", what, pollClear, ctx.Err(), last)
			}
			return tr, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the polling and returns the trace.
func (p *fleetPoller) stop() (bench.Trace, error) {
	close(p.done)
	<-p.out
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tr, p.err
}

// cgroupCPUs is cpuset.cpus of a container's cgroup, read on the node.
func (e *guestEnv) cgroupCPUs(t *testing.T, pod *cri.Pod, c *cri.Container) cpuset.CPUSet {
	t.Helper()
	return cgroupCPUsOf(t, e.containerCgroup(t, pod, c))
}

// cgroupCPUsOf is cpuset.cpus of the cgroup directory dir.
func cgroupCPUsOf(t *testing.T, dir string) cpuset.CPUSet {
	t.Helper()
	raw := readCgroupFile(t, dir, "cpuset.cpus")
	set, err := cpuset.Parse(raw)
	if err != nil {
		t.Fatalf("%s: cpuset.cpus %q: %v", dir, raw, err)
	}
	return set
}

// cgroupState is "cpuset.cpus cpuset.mems cpu.max" of every cgroup
// directory: what a restart of the plugin must leave as it was.
func cgroupState(t *testing.T, dirs []string) []string {
	t.Helper()
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = fmt.Sprintf("cpus=%s mems=%s cpu.max=%q",
			readCgroupFile(t, d, "cpuset.cpus"), readCgroupFile(t, d, "cpuset.mems"), readCgroupFile(t, d, "cpu.max"))
	}
	return out
}
