package inproc

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"google.golang.org/protobuf/proto"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/nri"
	"github.com/cgdelegate/cgdelegate/internal/spec"
)

// noopPlugin subscribes to CreateContainer and changes nothing: the
// baseline cost of one NRI round trip.
type noopPlugin struct{}

func (noopPlugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

// fixedPlugin returns, without any checks, the adjustment cgdelegate
// returns for a writable container: the cost of carrying that adjustment
// through NRI, which any plugin making cgroups writable pays.
type fixedPlugin struct{ adj *api.ContainerAdjustment }

func (f fixedPlugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	// Not cloned: the stub only marshals it, and the runtime side gets
	// its own copy.
	return f.adj, nil, nil
}

// mountOptionsPlugin answers as containerd/nri's writable-cgroups sample
// plugin does (plugins/writable-cgroups): for a pod annotated for writable
// cgroups, the mount at /sys/fs/cgroup comes back with its options changed
// from ro to rw, the rest of it as the runtime built it, with the removal
// marker of the old one; nothing else (no hook, no environment, no
// namespace). Its host check (nsdelegate) is read once at start, so it
// costs nothing per call. It is the least any plugin making cgroups
// writable sends: cgdelegate-writable's round trip is read against it.
type mountOptionsPlugin struct{}

func (mountOptionsPlugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if pod.GetAnnotations()[annotations.WritableCgroups.Name] != "true" {
		return nil, nil, nil
	}
	for _, m := range ctr.GetMounts() {
		if m.GetDestination() != spec.CgroupMountPoint {
			continue
		}
		opts := make([]string, 0, len(m.GetOptions())+1)
		for _, o := range m.GetOptions() {
			if o != "ro" && o != "rw" {
				opts = append(opts, o)
			}
		}
		adj := &api.ContainerAdjustment{}
		adj.RemoveMount(m.GetDestination())
		adj.AddMount(&api.Mount{Destination: m.GetDestination(), Type: m.GetType(), Source: m.GetSource(), Options: append(opts, "rw")})
		return adj, nil, nil
	}
	return nil, nil, nil
}

// newPartPlugin is newFixedPlugin with part of the adjustment taken out by
// strip: what each part costs to carry.
func newPartPlugin(strip func(*api.ContainerAdjustment)) func(*fakehost.Host) (any, error) {
	return func(h *fakehost.Host) (any, error) {
		p, err := newFixedPlugin(h)
		if err != nil {
			return nil, err
		}
		adj := proto.Clone(p.(fixedPlugin).adj).(*api.ContainerAdjustment)
		strip(adj)
		return fixedPlugin{adj}, nil
	}
}

func newFixedPlugin(h *fakehost.Host) (any, error) {
	p, err := nri.New(h.Config(), slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	pod := Pod("bench", "u1", cgroupfsParent, map[string]string{annotations.WritableCgroups.Name: "true"})
	adj, _, err := p.CreateContainer(context.Background(), pod, Container(pod, "c"))
	if err != nil {
		return nil, err
	}
	return fixedPlugin{adj}, nil
}

// BenchmarkCreateContainer measures CreateContainer over the real ttrpc
// socket, one sub-benchmark per plugin (plugin=<case>, so that benchstat
// -col /plugin compares the cases of one run): wall time (ns/op), the
// process's CPU time per call (cpu-ns/op; `make bench-node` prints it
// beside the VM's numbers) and the allocations of both ends (B/op,
// allocs/op: the same on a loaded machine as on an idle one). The cases:
//
//   - noop changes nothing: the cost of one NRI round trip;
//   - mount-options-only answers as containerd/nri's writable-cgroups
//     sample plugin does (the cgroup mount's ro turned into rw, nothing
//     else): the least a plugin making cgroups writable sends, the case
//     cgdelegate-writable is read against;
//   - fixed-writable-adjustment returns cgdelegate's writable adjustment
//     without any work: what carrying it costs, apart from the decision;
//     the part- cases return parts of it (its mount alone, with the
//     environment, with the hook): what each part costs to carry;
//   - cgdelegate-default and cgdelegate-writable are the plugin, for a
//     container that asks for nothing and for a writable one;
//   - the metrics- cases are the cgdelegate cases with the Prometheus
//     recorder wired as cmd/cgdelegate wires it, the event timing on the
//     stub's ttrpc server included: the whole cost of metrics on a
//     container creation.
//
// This round trip, against the noop baseline in the same run, is the
// number that decides whether a speed-up in the handler is worth its code.
// The machine is noisy: `make bench-roundtrip` runs every case once per
// round, in rounds (interleaved, so that a burst of load elsewhere hits
// every case alike; -count would run one case's counts back to back),
// with -cpu 1, and compares the rounds with benchstat.
//
// The fake host's mount table is a plain file: cgdelegate's per-call check
// that it did not change is a stat(2) of its path; on a real host it is a
// poll(2) on the open /proc/1/mountinfo, cheaper. Either way the table is
// read again only after a change.
func BenchmarkCreateContainer(b *testing.B) {
	writable := map[string]string{annotations.WritableCgroups.Name: "true"}
	cases := []struct {
		name    string
		plugin  func(*fakehost.Host) (any, error)
		ann     map[string]string
		metrics bool
	}{
		{"noop", func(*fakehost.Host) (any, error) { return noopPlugin{}, nil }, nil, false},
		{"mount-options-only", func(*fakehost.Host) (any, error) { return mountOptionsPlugin{}, nil }, writable, false},
		{"fixed-writable-adjustment", newFixedPlugin, writable, false},
		{"part-mount", newPartPlugin(func(a *api.ContainerAdjustment) { a.Env, a.Hooks = nil, nil }), writable, false},
		{"part-mount-env", newPartPlugin(func(a *api.ContainerAdjustment) { a.Hooks = nil }), writable, false},
		{"part-mount-hook", newPartPlugin(func(a *api.ContainerAdjustment) { a.Env = nil }), writable, false},
		{"cgdelegate-default", newPlugin, nil, false},
		{"cgdelegate-writable", newPlugin, writable, false},
		{"metrics-cgdelegate-default", newPlugin, nil, true},
		{"metrics-cgdelegate-writable", newPlugin, writable, true},
	}
	for _, tc := range cases {
		b.Run("plugin="+tc.name, func(b *testing.B) {
			host := fakehost.New(b)
			if err := host.AddPodCgroup(cgroupfsParent); err != nil {
				b.Fatal(err)
			}
			var (
				p        any
				err      error
				stubOpts []stub.Option
			)
			if tc.metrics {
				// As cmd/cgdelegate wires a recorder: decisions counted by the
				// handler, events timed on the stub's ttrpc server.
				rec := metrics.New(metrics.Options{})
				stubOpts = append(stubOpts, metrics.StubOption(rec))
				p, err = nri.New(host.Config(), slog.New(slog.DiscardHandler), nri.WithMetrics(rec))
			} else {
				p, err = tc.plugin(host)
			}
			if err != nil {
				b.Fatal(err)
			}
			rt, err := NewRuntime("containerd", "bench")
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			s, err := rt.Connect(context.Background(), p, "bench", "50", stubOpts...)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Stop()
			pod := Pod("bench", "u1", cgroupfsParent, tc.ann)
			ctrs := make([]*api.Container, 64)
			for i := range ctrs {
				ctrs[i] = Container(pod, fmt.Sprintf("c%d", i))
			}
			ctx := context.Background()
			i := 0
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				// The runtime side appends adjusted hooks to the request's
				// container, so every request gets a fresh copy.
				ctr := proto.Clone(ctrs[i%len(ctrs)]).(*api.Container)
				if _, err := rt.CreateContainer(ctx, pod, ctr); err != nil {
					b.Fatal(err)
				}
				i++
			}
			// Both ends of the socket run in this process: the CPU of one
			// whole round trip, runtime side included, less noisy than
			// its wall time on a shared machine.
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(i), "cpu-ns/op")
		})
	}
}

func newPlugin(h *fakehost.Host) (any, error) {
	return nri.New(h.Config(), slog.New(slog.DiscardHandler))
}

// BenchmarkHandler measures cgdelegate's CreateContainer handler alone,
// without the NRI round trip, as the plugin runs it. It has
// no target of its own: a handler cost matters only as far as it shows in
// BenchmarkCreateContainer's round trip. The metrics- cases
// record to the Prometheus recorder (cmd/cgdelegate with metricsAddress set):
// the handler counts its decision and reads no clock (events are timed on
// the stub's ttrpc server, which BenchmarkCreateContainer's metrics- cases
// include). The target: within 10% of the same case without, in one run.
// Compare the two halves with benchstat:
//
//	go test -run '^$' -bench BenchmarkHandler -count 8 -cpu 1 ./integration/inproc/ > h.txt
//	grep -v metrics- h.txt > off.txt; grep -e metrics- -e '^[a-z]' h.txt | sed 's/metrics-//' > on.txt
//	benchstat off.txt on.txt
//
// cpu-ns/op (the thread's CPU time per call) is the number to trust on a
// loaded machine.
func BenchmarkHandler(b *testing.B) {
	writable := map[string]string{annotations.WritableCgroups.Name: "true"}
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		metrics bool
	}{
		{"default", nil, false},
		{"writable", writable, false},
		{"metrics-default", nil, true},
		{"metrics-writable", writable, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			host := fakehost.New(b)
			if err := host.AddPodCgroup(cgroupfsParent); err != nil {
				b.Fatal(err)
			}
			var opts []nri.Option
			if tc.metrics {
				opts = append(opts, nri.WithMetrics(metrics.New(metrics.Options{})))
			}
			p, err := nri.New(host.Config(), slog.New(slog.DiscardHandler), opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			pod := Pod("bench", "u1", cgroupfsParent, tc.ann)
			ctr := Container(pod, "c")
			// The first container reads the table.
			if _, _, err := p.CreateContainer(ctx, pod, ctr); err != nil {
				b.Fatal(err)
			}
			// cpu-ns/op is this thread's CPU time per call: unlike ns/op it
			// leaves out the time the thread waited for a CPU, which on a
			// loaded machine is most of the noise.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			startCPU := threadCPU(b)
			for b.Loop() {
				if _, _, err := p.CreateContainer(context.Background(), pod, ctr); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((threadCPU(b)-startCPU).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestMountOptionsPlugin checks that the benchmark's stand-in for the
// sample plugin answers as the sample does: for a writable pod, the
// container's mounts come out the same but for the cgroup mount's ro,
// turned into rw; for any other pod, nothing.
func TestMountOptionsPlugin(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{"writable", map[string]string{annotations.WritableCgroups.Name: "true"}, true},
		{"default", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := Pod("p", "u1", cgroupfsParent, tc.ann)
			ctr := Container(pod, "c")
			adj, upd, err := mountOptionsPlugin{}.CreateContainer(context.Background(), pod, ctr)
			if err != nil || upd != nil {
				t.Fatalf("CreateContainer: %v, %v", upd, err)
			}
			if !tc.want {
				if adj != nil {
					t.Fatalf("adjustment %v for a pod that asked for nothing", adj)
				}
				return
			}
			// Only mounts: drop them and the rest must be empty.
			rest := proto.Clone(adj).(*api.ContainerAdjustment)
			rest.Mounts = nil
			if !proto.Equal(rest, &api.ContainerAdjustment{}) {
				t.Errorf("adjustment carries more than mounts: %v", rest)
			}
			want := map[string]*api.Mount{}
			for _, m := range Container(pod, "c", WithRuntimeWritable()).GetMounts() {
				m.Options = append(m.Options, "rw")
				if m.Destination != spec.CgroupMountPoint {
					m.Options = m.Options[:len(m.Options)-1]
				}
				want[m.Destination] = m
			}
			got := FinalMounts(ctr, adj)
			if len(got) != len(want) {
				t.Fatalf("%d mounts after the adjustment, want %d: %v", len(got), len(want), got)
			}
			for _, m := range got {
				if !proto.Equal(m, want[m.Destination]) {
					t.Errorf("mount %s: got %v, want %v", m.Destination, m, want[m.Destination])
				}
			}
		})
	}
}
