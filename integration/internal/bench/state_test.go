package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

func TestLeaks(t *testing.T) {
	const mib = 1 << 20
	start := Footprint{RSS: 16 * mib, FDs: 10, Goroutines: 18}
	warm := Footprint{RSS: 20 * mib, FDs: 11, Goroutines: 19}
	for _, tc := range []struct {
		name string
		end  Footprint
		want []string // a word of each sentence, in order
	}{
		{name: "back to the warm-up", end: Footprint{RSS: 20 * mib, FDs: 11, Goroutines: 18}},
		{name: "RSS within the tolerance, fds below", end: Footprint{RSS: 24 * mib, FDs: 10, Goroutines: 17}},
		{name: "one goroutine more than the start", end: Footprint{RSS: 20 * mib, FDs: 11, Goroutines: 19}, want: []string{"goroutines"}},
		{name: "one fd more than the warm-up", end: Footprint{RSS: 20 * mib, FDs: 12, Goroutines: 18}, want: []string{"fds"}},
		{name: "RSS over the tolerance", end: Footprint{RSS: 24*mib + 1, FDs: 11, Goroutines: 18}, want: []string{"RSS 24.0 MiB"}},
		{name: "everything", end: Footprint{RSS: 40 * mib, FDs: 30, Goroutines: 90}, want: []string{"90 goroutines", "30 open fds", "RSS 40.0 MiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantSaying(t, "Leaks", Leaks(start, warm, tc.end, 4*mib), tc.want)
		})
	}
}

func TestStatusDiff(t *testing.T) {
	table := func(edit func(*policy.Status)) policy.Status {
		s := policy.Status{
			Scope: "pod", UsableCPUs: "0-3", NodeSharedPool: "0", NodeSharedMems: "0-1",
			Pods: []policy.PodStatus{
				{ID: "p1", Name: "pinned", Budget: "2", Bubble: "2-3", SharedPool: "3", Mems: "1", Containers: []policy.ContainerStatus{
					{ID: "c1", Name: "exclusive", Pool: policy.PoolExclusive, CPUs: "2", Mems: "1"},
					{ID: "c2", Name: "shared", Pool: policy.PoolPodShared, CPUs: "3", Mems: "1"},
				}},
				{ID: "p2", Name: "fleet", Containers: []policy.ContainerStatus{{ID: "c3", Name: "c0", Pool: policy.PoolNodeShared, CPUs: "0", Mems: "0-1"}}},
			},
		}
		if edit != nil {
			edit(&s)
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		after policy.Status
		want  []string // a word of each difference, in order
	}{
		{name: "equal", after: table(nil)},
		{name: "node shared pool", after: table(func(s *policy.Status) { s.NodeSharedPool = "0-1" }), want: []string{"node:"}},
		{name: "a container moved", after: table(func(s *policy.Status) { s.Pods[0].Containers[0].CPUs = "3" }), want: []string{"pod pinned (p1)"}},
		{name: "a pool changed", after: table(func(s *policy.Status) { s.Pods[0].Containers[1].Pool = policy.PoolExclusive }), want: []string{"pod pinned"}},
		{name: "a pod gone", after: table(func(s *policy.Status) { s.Pods = s.Pods[:1] }), want: []string{"fleet (p2) is gone"}},
		{
			name: "a pod new and a bubble lost",
			after: table(func(s *policy.Status) {
				s.Pods[0].Bubble = ""
				s.Pods = append(s.Pods, policy.PodStatus{ID: "p3", Name: "late"})
			}),
			want: []string{"pod pinned (p1)", "late (p3) is new"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantSaying(t, "StatusDiff", StatusDiff(table(nil), tc.after), tc.want)
		})
	}
}

func TestWithoutContainers(t *testing.T) {
	s := policy.Status{Pods: []policy.PodStatus{
		{ID: "p1", Containers: []policy.ContainerStatus{{ID: "c1"}, {ID: "probe"}}},
		{ID: "p2", Containers: []policy.ContainerStatus{{ID: "c2"}}},
	}}
	got := WithoutContainers(s, "probe")
	want := policy.Status{Pods: []policy.PodStatus{
		{ID: "p1", Containers: []policy.ContainerStatus{{ID: "c1"}}},
		{ID: "p2", Containers: []policy.ContainerStatus{{ID: "c2"}}},
	}}
	if d := StatusDiff(want, got); len(d) > 0 {
		t.Errorf("WithoutContainers: %q", d)
	}
	if len(s.Pods[0].Containers) != 2 {
		t.Errorf("WithoutContainers changed its argument: %+v", s.Pods[0])
	}
}

// wantSaying checks that got has one sentence per word of want, in order,
// each containing its word.
func wantSaying(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s = %q, want %d sentences", what, got, len(want))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("%s: sentence %d %q does not say %q", what, i, got[i], w)
		}
	}
}

func TestWithLowestRSS(t *testing.T) {
	last := Footprint{RSS: 30, FDs: 12, Goroutines: 18}
	for _, tc := range []struct {
		name     string
		readings []Footprint
		want     int64
	}{
		{name: "no readings", want: 30},
		{name: "a spike before", readings: []Footprint{{RSS: 40}, {RSS: 22}}, want: 22},
		{name: "all higher", readings: []Footprint{{RSS: 31}, {RSS: 35}}, want: 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WithLowestRSS(last, tc.readings...)
			if got.RSS != tc.want || got.FDs != last.FDs || got.Goroutines != last.Goroutines {
				t.Errorf("WithLowestRSS = %+v, want RSS %d and the rest of %+v", got, tc.want, last)
			}
		})
	}
}

func TestFailedUpdate(t *testing.T) {
	at := time.Date(2026, 11, 25, 23, 19, 18, 622000000, time.UTC)
	for _, tc := range []struct {
		name string
		line string
		ids  []string
	}{
		{
			name: "the call failed",
			line: `time=2026-11-25T23:19:18.622Z level=WARN msg="cannot send container updates; they are retried" containers=[71f3 a2b4] error="rpc error: code = Unknown desc = NRI update of some containers failed"`,
			ids:  []string{"71f3", "a2b4"},
		},
		{
			name: "the runtime failed some",
			line: `time=2026-11-25T23:19:18.622Z level=WARN msg="runtime failed some container updates; they are retried" failed=[c9]`,
			ids:  []string{"c9"},
		},
		{name: "no containers", line: `time=2026-11-25T23:19:18.622Z level=WARN msg="cannot send container updates; they are retried" containers=[]`},
		{name: "no time", line: `level=WARN msg="cannot send container updates; they are retried" containers=[c9]`},
		{name: "a bad time", line: `time=yesterday level=WARN containers=[c9]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ids, ok := FailedUpdate(tc.line)
			if ok != (tc.ids != nil) || !slices.Equal(ids, tc.ids) || (ok && !got.Equal(at)) {
				t.Errorf("FailedUpdate = %s, %q, %v; want %s, %q", got, ids, ok, at, tc.ids)
			}
		})
	}
}
