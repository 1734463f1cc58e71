package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/internal/version"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

func TestContainers(t *testing.T) {
	cases := []struct {
		name    string
		outcome string
		err     error
		result  string
		cause   string
	}{
		{"unchanged", "unchanged", nil, "unchanged", ""},
		{"writable", "writable", nil, "writable", ""},
		{"readonly", "readonly", nil, "readonly", ""},
		{"guarded", "guarded", nil, "guarded", ""},
		{"privileged", "privileged", nil, "privileged", ""},
		{"refused", "refused", refusal.New(refusal.NoNsdelegate, host.ErrNoNsdelegate), "refused", "no_nsdelegate"},
		{"refused, unknown cause", "refused", errors.New("boom"), "refused", "other"},
		{"an outcome added later", "delegated", nil, "delegated", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Options{})
			r.Container(tc.outcome, tc.err)
			r.Container(tc.outcome, tc.err)
			for _, res := range append(Results, tc.result) {
				want := 0.0
				if res == tc.result {
					want = 2
				}
				if got := containerCount(t, r, res); got != want {
					t.Errorf("%s{result=%q} = %v, want %v", ContainersTotal, res, got, want)
				}
			}
			for _, c := range Causes {
				want := 0.0
				if c == tc.cause {
					want = 2
				}
				if got := testutil.ToFloat64(r.refusals[c]); got != want {
					t.Errorf("%s{cause=%q} = %v, want %v", RefusalsTotal, c, got, want)
				}
			}
		})
	}
}

// Every result and cause exists at 0 from the start, so rates work before
// the first event.
func TestSeriesFromTheStart(t *testing.T) {
	r := New(Options{})
	want := `
# HELP cgdelegate_refusals_total Refused containers, by cause: policy, bad_annotation, cgroup_v1, no_nsdelegate, no_cgroupns, pod_bounds, shared_cgroup, node_budget, pinning, other.
# TYPE cgdelegate_refusals_total counter
cgdelegate_refusals_total{cause="bad_annotation"} 0
cgdelegate_refusals_total{cause="cgroup_v1"} 0
cgdelegate_refusals_total{cause="no_cgroupns"} 0
cgdelegate_refusals_total{cause="no_nsdelegate"} 0
cgdelegate_refusals_total{cause="node_budget"} 0
cgdelegate_refusals_total{cause="other"} 0
cgdelegate_refusals_total{cause="pinning"} 0
cgdelegate_refusals_total{cause="pod_bounds"} 0
cgdelegate_refusals_total{cause="policy"} 0
cgdelegate_refusals_total{cause="shared_cgroup"} 0
`
	if err := testutil.GatherAndCompare(r.Registry(), strings.NewReader(want), RefusalsTotal); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(r.containers); n != len(Results) {
		t.Fatalf("%d container series, want %d", n, len(Results))
	}
	if n := testutil.CollectAndCount(r.events); n != len(Events) {
		t.Fatalf("%d event series, want %d", n, len(Events))
	}
	r.Event("UpdatePodSandbox", time.Microsecond, false)
	if n := testutil.CollectAndCount(r.events); n != len(Events)+1 {
		t.Fatalf("%d event series after a new event, want %d", n, len(Events)+1)
	}
}

// containerCount reads cgdelegate_containers_total{result}, 0 if absent.
func containerCount(t *testing.T, r *Recorder, result string) float64 {
	t.Helper()
	families, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != ContainersTotal {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// OutcomeNames are writable.Outcome's names by value, and Results lists
// every one of them and refused; the plugin's fast path (Outcomes) counts
// under the same series as Container.
func TestResultAndEventIndexes(t *testing.T) {
	for i, name := range OutcomeNames {
		if got := writable.Outcome(i).String(); got != name {
			t.Errorf("OutcomeNames[%d] = %q, writable.Outcome(%d) is %q", i, name, i, got)
		}
		if outcomeIndex(name) != i {
			t.Errorf("outcomeIndex(%q) = %d, want %d", name, outcomeIndex(name), i)
		}
	}
	if len(OutcomeNames) != int(writable.Guarded)+1 || len(OutcomeNames) > MaxOutcomes {
		t.Errorf("%d OutcomeNames; writable.Guarded, the last outcome, is %d; Outcomes counts %d", len(OutcomeNames), writable.Guarded, MaxOutcomes)
	}
	if want := append(slices.Clone(OutcomeNames), "refused"); !sameSet(want, Results) {
		t.Errorf("Results %q, want %q", Results, want)
	}
	r := New(Options{})
	r.Outcomes().Inc(int(writable.Guarded))
	r.Container("guarded", nil)
	if got := containerCount(t, r, "guarded"); got != 2 {
		t.Errorf("guarded counted %v through Outcomes and Container, want 2", got)
	}
	for i, e := range Events {
		if r.events.get(e) != &r.events.known[i] {
			t.Errorf("the %s histogram is not known[%d]", e, i)
		}
	}
}

func TestEvents(t *testing.T) {
	cases := []struct {
		name  string
		event string
		d     time.Duration
		le    string // the smallest bucket holding d
	}{
		{"fast create", "CreateContainer", 3 * time.Microsecond, "5e-06"},
		{"create", "CreateContainer", 40 * time.Microsecond, "5e-05"},
		{"slow stop", "StopContainer", 2 * time.Millisecond, "0.0025"},
		{"an event added later", "UpdatePodSandbox", 7 * time.Microsecond, "1e-05"},
		{"on a bound", "CreateContainer", 10 * time.Microsecond, "1e-05"},
		{"over a second", "RemovePodSandbox", 2 * time.Second, "+Inf"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Options{})
			r.Event(tc.event, tc.d, false)
			out := scrape(t, r)
			line := EventDuration + `_bucket{event="` + tc.event + `",le="` + tc.le + `"} 1`
			if !strings.Contains(out, line) {
				t.Fatalf("no %q in\n%s", line, out)
			}
			for _, l := range []string{
				EventDuration + `_count{event="` + tc.event + `"} 1`,
				EventDuration + `_sum{event="` + tc.event + `"} ` + strconv.FormatFloat(tc.d.Seconds(), 'g', -1, 64),
			} {
				if !strings.Contains(out, l) {
					t.Fatalf("no %q in\n%s", l, out)
				}
			}
		})
	}
}

func TestUpdates(t *testing.T) {
	cases := []struct {
		name         string
		batches      [][2]int
		sent, failed float64
	}{
		{"none", nil, 0, 0},
		{"sent", [][2]int{{3, 0}, {2, 0}}, 5, 0},
		{"some failed", [][2]int{{3, 1}, {0, 4}}, 3, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Options{})
			for _, b := range tc.batches {
				r.Updates(b[0], b[1])
			}
			if got := testutil.ToFloat64(r.sent); got != tc.sent {
				t.Errorf("sent = %v, want %v", got, tc.sent)
			}
			if got := testutil.ToFloat64(r.failed); got != tc.failed {
				t.Errorf("failed = %v, want %v", got, tc.failed)
			}
		})
	}
}

func TestNodeSupported(t *testing.T) {
	supported := false
	r := New(Options{Supported: func() bool { return supported }})
	for _, want := range []bool{false, true, false} {
		supported = want
		line := NodeSupported + " 0"
		if want {
			line = NodeSupported + " 1"
		}
		if out := scrape(t, r); !strings.Contains(out, line) {
			t.Fatalf("supported=%v: no %q", want, line)
		}
	}
	if out := scrape(t, New(Options{})); strings.Contains(out, NodeSupported) {
		t.Fatal("node_supported exported without a Supported func")
	}
}

func TestCPUs(t *testing.T) {
	alloc := policy.Status{
		ReservedCPUs:   "0-1",
		NodeSharedPool: "2-5",
		Pods: []policy.PodStatus{
			{ID: "p1", Bubble: "6-9", Containers: []policy.ContainerStatus{
				{ID: "init", Pool: policy.PoolExclusive, CPUs: "6-7"},
				{ID: "app", Pool: policy.PoolExclusive, CPUs: "6-7"},
				{ID: "side", Pool: policy.PoolPodShared, CPUs: "8-9"},
			}},
			{ID: "p2", Bubble: "10-11"},
			{ID: "p3", Containers: []policy.ContainerStatus{{ID: "c", Pool: policy.PoolExclusive, CPUs: "12"}}},
		},
	}
	cases := []struct {
		name    string
		pinning *status.Pinning
		want    string
	}{
		{"pinning off", nil, ""},
		{"inactive", &status.Pinning{Reason: "static CPU manager"}, ""},
		{"active", &status.Pinning{Active: true, Allocations: &alloc}, `
# HELP cgdelegate_cpus CPUs by pool while CPU pinning is active: reserved (never handed out), node_shared (the node shared pool), pod_bubbles (in pod bubbles), exclusive (held by exclusive containers).
# TYPE cgdelegate_cpus gauge
cgdelegate_cpus{pool="exclusive"} 3
cgdelegate_cpus{pool="node_shared"} 4
cgdelegate_cpus{pool="pod_bubbles"} 6
cgdelegate_cpus{pool="reserved"} 2
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Options{Pinning: func() *status.Pinning { return tc.pinning }})
			if err := testutil.GatherAndCompare(r.Registry(), strings.NewReader(tc.want), CPUs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// cgdelegate_build_info is 1 with the running build's version and Go
// release, on every recorder.
func TestBuildInfo(t *testing.T) {
	want := fmt.Sprintf(`# HELP cgdelegate_build_info Always 1; the labels say which build of cgdelegate runs: version (as -version prints it) and goversion.
# TYPE cgdelegate_build_info gauge
cgdelegate_build_info{goversion=%q,version=%q} 1
`, runtime.Version(), version.String())
	if err := testutil.GatherAndCompare(New(Options{}).Registry(), strings.NewReader(want), BuildInfo); err != nil {
		t.Fatal(err)
	}
	// The labels are the arguments, not fixed strings.
	if err := testutil.CollectAndCompare(buildInfo("v9.9.9", "go0.1"), strings.NewReader(`# HELP cgdelegate_build_info Always 1; the labels say which build of cgdelegate runs: version (as -version prints it) and goversion.
# TYPE cgdelegate_build_info gauge
cgdelegate_build_info{goversion="go0.1",version="v9.9.9"} 1
`), BuildInfo); err != nil {
		t.Fatal(err)
	}
}

// The Go and process collectors are registered.
func TestRuntimeCollectors(t *testing.T) {
	out := scrape(t, New(Options{}))
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(out, "\n"+name+" ") {
			t.Errorf("no %s", name)
		}
	}
}

func TestServer(t *testing.T) {
	r := New(Options{})
	r.Container("writable", nil)
	s, err := Listen("127.0.0.1:0", r.Handler(), false)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	resp, err := http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), ContainersTotal+`{result="writable"} 1`) {
		t.Fatalf("scrape:\n%s", body)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve after Shutdown = %v", err)
	}

	// A busy address is an error naming it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Listen(ln.Addr().String(), r.Handler(), false); err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("Listen on a busy address = %v, want an error naming it", err)
	}
}

// TestServerProfiling: /debug/pprof/ is served exactly with profiling.
func TestServerProfiling(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		t.Run(fmt.Sprintf("profiling=%t", profiling), func(t *testing.T) {
			s, err := Listen("127.0.0.1:0", New(Options{}).Handler(), profiling)
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = s.Serve() }()
			defer func() { _ = s.Shutdown(context.Background()) }()
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap?debug=1"} {
				resp, err := http.Get("http://" + s.Addr().String() + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if want := map[bool]int{true: http.StatusOK, false: http.StatusNotFound}[profiling]; resp.StatusCode != want {
					t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
				}
			}
		})
	}
}

// TestServerProfilingLoopbackOnly: the profiles are never served on an
// address beyond loopback, where the pod network (or anyone) could take
// them; the metrics alone still are.
func TestServerProfilingLoopbackOnly(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		t.Run(addr, func(t *testing.T) {
			s, err := Listen(addr, New(Options{}).Handler(), true)
			if err == nil {
				_ = s.Shutdown(context.Background())
				t.Fatalf("Listen(%q, profiling) served the profiles on %s", addr, s.Addr())
			}
			if !errors.Is(err, ErrProfilingExposed) || !strings.Contains(err.Error(), strconv.Quote(addr)) {
				t.Fatalf("Listen(%q, profiling) = %v, want ErrProfilingExposed naming the address", addr, err)
			}
			s, err = Listen(addr, New(Options{}).Handler(), false)
			if err != nil {
				t.Skipf("%s can not be bound here: %v", addr, err)
			}
			_ = s.Shutdown(context.Background())
		})
	}
}

// scrape returns the registry in the text format.
func scrape(t *testing.T, r *Recorder) string {
	t.Helper()
	s, err := Listen("127.0.0.1:0", r.Handler(), false)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	defer func() { _ = s.Shutdown(context.Background()) }()
	resp, err := http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}

// BenchmarkOutcome is what counting one container costs the plugin with
// metrics on: one atomic add (writable), or none once unchanged is derived.
func BenchmarkOutcome(b *testing.B) {
	for _, tc := range []struct {
		name    string
		outcome writable.Outcome
	}{{"writable", writable.Writable}, {"unchanged-derived", writable.Unchanged}} {
		b.Run(tc.name, func(b *testing.B) {
			r := New(Options{})
			r.Event(createContainer, time.Microsecond, false) // the interceptor is there: unchanged is derived
			o := r.Outcomes()
			for b.Loop() {
				o.Inc(int(tc.outcome))
			}
		})
	}
}

// BenchmarkRecord is what one container start costs the recorder through
// the Recorder interface (refusals take this path), and an event's
// duration (recorded on the ttrpc server, not in the handler).
func BenchmarkRecord(b *testing.B) {
	r := New(Options{})
	b.ReportAllocs()
	for b.Loop() {
		r.Container("writable", nil)
		r.Event("CreateContainer", 40*time.Microsecond, false)
	}
}

// The delegation gauges say what the ledger says at the scrape.
func TestDelegationGauges(t *testing.T) {
	d := &status.Delegation{
		Budget: 1000, Reserved: 350, DyingInPods: 42, Node: &host.CgroupStat{Descendants: 90, DyingDescendants: 400},
		Pods: []status.DelegatedPod{
			{Pod: "a/x", Reserved: 250, Containers: []status.WritableContainer{{Container: "app"}, {Container: "side"}}},
			{Pod: "a/y", Reserved: 100, Containers: []status.WritableContainer{{Container: "app"}}},
		},
		Unsafe: []status.WritableContainer{{Pod: "a/x", Container: "app"}},
	}
	r := New(Options{})
	r.ObserveNode(Options{Delegation: func() *status.Delegation { return d }})
	want := `
# HELP cgdelegate_delegated_cgroups_budget The node budget of delegated cgroups (nodeMaxDelegatedCgroups); 0 when it is off.
# TYPE cgdelegate_delegated_cgroups_budget gauge
cgdelegate_delegated_cgroups_budget 1000
# HELP cgdelegate_delegated_cgroups_reserved Delegated cgroups reserved by the live writable pods: the sum of their cgroup.max.descendants.
# TYPE cgdelegate_delegated_cgroups_reserved gauge
cgdelegate_delegated_cgroups_reserved 350
# HELP cgdelegate_dying_cgroups Removed cgroups the kernel still keeps (nr_dying_descendants), by scope: writable_pods (below the writable pods' cgroups, each pod's within its own reservation) or node (below the cgroup root; those outside the writable pods count against the node budget).
# TYPE cgdelegate_dying_cgroups gauge
cgdelegate_dying_cgroups{scope="node"} 400
cgdelegate_dying_cgroups{scope="writable_pods"} 42
# HELP cgdelegate_unsafe_writable_containers Writable containers running while the host is not safe for writable cgroups (no cgroup2 with nsdelegate).
# TYPE cgdelegate_unsafe_writable_containers gauge
cgdelegate_unsafe_writable_containers 1
# HELP cgdelegate_writable_containers Containers with writable cgroups that run or are created.
# TYPE cgdelegate_writable_containers gauge
cgdelegate_writable_containers 3
# HELP cgdelegate_writable_pods Live pods with writable cgroups.
# TYPE cgdelegate_writable_pods gauge
cgdelegate_writable_pods 2
`
	if err := testutil.GatherAndCompare(r.Registry(), strings.NewReader(want), DelegatedCgroupsBudget, DelegatedCgroupsReserved,
		DyingCgroups, UnsafeWritableContainers, WritableContainers, WritablePods); err != nil {
		t.Fatal(err)
	}
}

// TestPodEvents: every reason and result is a series from the start; a
// count lands on its own series; a value the poster never sends is not
// counted (and makes no series).
func TestPodEvents(t *testing.T) {
	tests := []struct {
		name  string
		calls [][2]string
		want  map[[2]string]float64
	}{
		{name: "none"},
		{
			name:  "posted and dropped",
			calls: [][2]string{{"HostUnsafe", "posted"}, {"HostUnsafe", "posted"}, {"CPUPinningUpdateFailed", "queue_full"}, {"CgroupDelegationMissed", "rate_limited"}},
			want:  map[[2]string]float64{{"HostUnsafe", "posted"}: 2, {"CPUPinningUpdateFailed", "queue_full"}: 1, {"CgroupDelegationMissed", "rate_limited"}: 1},
		},
		{name: "unknown values", calls: [][2]string{{"Other", "posted"}, {"HostUnsafe", "lost"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Options{})
			for _, c := range tc.calls {
				r.PodEvent(c[0], c[1])
			}
			if n := testutil.CollectAndCount(r.Registry(), PodEventsTotal); n != 3*4 {
				t.Errorf("%d series, want 12 (3 reasons, 4 results)", n)
			}
			for k, c := range r.podEvents {
				if got := testutil.ToFloat64(c); got != tc.want[k] {
					t.Errorf("%v = %v, want %v", k, got, tc.want[k])
				}
			}
		})
	}
}
