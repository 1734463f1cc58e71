package budget

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

const gib = 1 << 30

func podWith(r *api.LinuxResources, ann map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "p", Annotations: ann, Linux: &api.LinuxPodSandbox{PodResources: r}}
}

func ctrWith(r *api.LinuxResources, oom *int) *api.Container {
	c := &api.Container{Id: "c", Name: "app", Linux: &api.LinuxContainer{Resources: r}}
	if oom != nil {
		c.Linux.OomScoreAdj = api.Int(*oom)
	}
	return c
}

func intp(v int) *int { return &v }

func checkErr(t *testing.T, err error, sentinel error, want []string) {
	t.Helper()
	if sentinel == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %v is not %v", err, sentinel)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestPodBudget(t *testing.T) {
	tests := []struct {
		name     string
		pod      *api.PodSandbox
		want     Budget
		sentinel error
		wantErr  []string
	}{
		{name: "nil pod", pod: nil},
		{name: "no linux", pod: &api.PodSandbox{}},
		{name: "no pod resources", pod: podWith(nil, nil)},
		{
			name: "pod resources", pod: podWith(res(4096, 400000, 100000, 8*gib), nil),
			want: Budget{CPURequest: 4000, CPULimit: 4000, MemoryLimit: 8 * gib},
		},
		{
			name: "annotation alone", pod: podWith(nil, map[string]string{podKey: "cpu=4,memory=8Gi"}),
			want: Budget{CPURequest: 4000, CPULimit: 4000, MemoryRequest: 8 * gib, MemoryLimit: 8 * gib, Annotated: true},
		},
		{
			name: "annotation resolves tiny shares", pod: podWith(res(2, 1000, 100000, -2), map[string]string{podKey: "cpu=1m/10m"}),
			want: Budget{CPURequest: 1, CPULimit: 10, Annotated: true},
		},
		{
			// An in-place resize sends the pod's shares read back from
			// cpu.weight: 256 shares (250m) come back as 237.
			name: "annotation agrees with shares read back", pod: podWith(res(237, 50000, 100000, -2), map[string]string{podKey: "cpu=250m/500m"}),
			want: Budget{CPURequest: 250, CPULimit: 500, Annotated: true},
		},
		{
			name: "annotation agrees", pod: podWith(res(1536, 200000, 100000, 8*gib), map[string]string{podKey: "cpu=1.5/2,memory=8Gi"}),
			want: Budget{CPURequest: 1500, CPULimit: 2000, MemoryRequest: 8 * gib, MemoryLimit: 8 * gib, Annotated: true},
		},
		{
			name: "annotation fills missing memory only", pod: podWith(res(1024, -1, -1, -2), map[string]string{podKey: "memory=1Gi/2Gi"}),
			want: Budget{CPURequest: 1000, MemoryRequest: gib, MemoryLimit: 2 * gib, Annotated: true},
		},
		{name: "other annotations ignored", pod: podWith(nil, map[string]string{"resources.cgdelegate.io/container.x": "bogus"})},

		{
			name: "malformed annotation", pod: podWith(nil, map[string]string{podKey: "cpu=lots"}),
			sentinel: ErrAnnotation, wantErr: []string{podKey, `"cpu=lots"`},
		},
		{
			name: "annotation cpu request disagrees with shares", pod: podWith(res(1024, -2, -1, -2), map[string]string{podKey: "cpu=2"}),
			sentinel: ErrInconsistent, wantErr: []string{"cpu request 2000m (2048 shares)", "cpu shares 1024 (1000m)"},
		},
		{
			name: "annotation cpu limit disagrees with quota", pod: podWith(res(-1, 200000, 100000, -2), map[string]string{podKey: "cpu=4"}),
			sentinel: ErrInconsistent, wantErr: []string{"cpu limit 4000m (quota 400000)", "cpu quota 200000/100000 (2000m)"},
		},
		{
			name: "annotation drops cpu limit the runtime has", pod: podWith(res(-1, 200000, 0, -2), map[string]string{podKey: "cpu=1/"}),
			sentinel: ErrInconsistent, wantErr: []string{"cpu limit no limit", "cpu quota 200000/100000 (2000m)"},
		},
		{
			name: "annotation memory disagrees", pod: podWith(res(-1, -2, -1, gib), map[string]string{podKey: "memory=2Gi"}),
			sentinel: ErrInconsistent, wantErr: []string{"memory limit 2Gi", "memory limit 1Gi"},
		},
		{
			name: "annotation drops memory limit", pod: podWith(res(-1, -2, -1, gib), map[string]string{podKey: "memory=1Gi/"}),
			sentinel: ErrInconsistent, wantErr: []string{"memory limit no limit", "memory limit 1Gi"},
		},
		{
			name: "invalid runtime value", pod: podWith(res(1<<20, -2, -1, -2), nil),
			sentinel: ErrInvalid, wantErr: []string{"pod resources", "cpu shares"},
		},
		{
			name: "request above limit", pod: podWith(res(4096, 200000, 100000, -2), nil),
			sentinel: ErrInconsistent, wantErr: []string{"pod budget", "cpu request 4000m exceeds cpu limit 2000m"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ForPod(tc.pod)
			checkErr(t, err, tc.sentinel, tc.wantErr)
			if tc.sentinel == nil && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestContainerResources(t *testing.T) {
	tests := []struct {
		name      string
		pod       *api.PodSandbox
		ctr       *api.Container
		want      Budget
		qos       QoSClass
		exclusive int
		sentinel  error
		wantErr   []string
	}{
		{
			name: "guaranteed integer", ctr: ctrWith(res(2048, 200000, 100000, gib), intp(-997)),
			want: Budget{CPURequest: 2000, CPULimit: 2000, MemoryLimit: gib}, qos: QoSGuaranteed, exclusive: 2,
		},
		{
			name: "guaranteed fractional", ctr: ctrWith(res(1536, 150000, 100000, gib), intp(-997)),
			want: Budget{CPURequest: 1500, CPULimit: 1500, MemoryLimit: gib}, qos: QoSGuaranteed,
		},
		{
			name: "no memory limit is burstable", ctr: ctrWith(res(2048, 200000, 100000, -2), intp(500)),
			want: Budget{CPURequest: 2000, CPULimit: 2000}, qos: QoSBurstable,
		},
		{
			name: "request below limit is burstable", ctr: ctrWith(res(1024, 200000, 100000, gib), nil),
			want: Budget{CPURequest: 1000, CPULimit: 2000, MemoryLimit: gib}, qos: QoSBurstable,
		},
		{name: "besteffort", ctr: ctrWith(res(2, -1, 100000, -2), intp(1000)), qos: QoSBestEffort},
		{name: "no linux section", ctr: &api.Container{Name: "x"}, qos: QoSBestEffort},
		{name: "guaranteed by -997 without own limits stays besteffort by values", ctr: ctrWith(res(2, -1, 100000, -2), intp(-997)), qos: QoSBestEffort},
		{
			name: "annotation on pod", pod: podWith(nil, map[string]string{containerKey("app"): "cpu=1,memory=1Gi"}),
			ctr:  ctrWith(res(1024, 100000, 100000, gib), nil),
			want: Budget{CPURequest: 1000, CPULimit: 1000, MemoryRequest: gib, MemoryLimit: gib, Annotated: true}, qos: QoSGuaranteed, exclusive: 1,
		},
		{name: "annotation on container", ctr: func() *api.Container {
			c := ctrWith(nil, nil)
			c.Annotations = map[string]string{containerKey("app"): "cpu=3,memory=1Gi"}
			return c
		}(), want: Budget{CPURequest: 3000, CPULimit: 3000, MemoryRequest: gib, MemoryLimit: gib, Annotated: true}, qos: QoSGuaranteed, exclusive: 3},
		{
			name: "annotation for another container ignored", pod: podWith(nil, map[string]string{containerKey("other"): "cpu=1"}),
			ctr: ctrWith(nil, nil), qos: QoSBestEffort,
		},
		{
			name: "annotated memory request below limit is burstable", pod: podWith(nil, map[string]string{containerKey("app"): "cpu=1,memory=512Mi/1Gi"}),
			ctr: ctrWith(nil, nil), want: Budget{CPURequest: 1000, CPULimit: 1000, MemoryRequest: 512 << 20, MemoryLimit: gib, Annotated: true}, qos: QoSBurstable,
		},

		{
			name: "malformed annotation", pod: podWith(nil, map[string]string{containerKey("app"): "cpu=1;memory=1Gi"}),
			ctr: ctrWith(nil, nil), sentinel: ErrAnnotation, wantErr: []string{`container "app"`, containerKey("app"), "cpu=1;memory=1Gi"},
		},
		{
			name: "annotation disagrees", pod: podWith(nil, map[string]string{containerKey("app"): "cpu=2"}),
			ctr: ctrWith(res(1024, 100000, 100000, -2), nil), sentinel: ErrInconsistent, wantErr: []string{"2000m (2048 shares)", "cpu shares 1024 (1000m)", "2000m (quota 200000)", "cpu quota 100000/100000 (1000m)"},
		},
		{
			name: "oom besteffort with limits", ctr: ctrWith(res(1024, 100000, 100000, gib), intp(1000)),
			sentinel: ErrInconsistent, wantErr: []string{"oom_score_adj 1000 says BestEffort", "cpu=1000m/1000m,memory=-/1Gi say Guaranteed"},
		},
		{
			name: "invalid runtime value", ctr: ctrWith(res(-1, 1000, 10, -2), nil),
			sentinel: ErrInvalid, wantErr: []string{`container "app" resources`, "cpu period 10"},
		},
		{
			name: "request above limit", ctr: ctrWith(res(2048, 100000, 100000, -2), nil),
			sentinel: ErrInconsistent, wantErr: []string{`container "app"`, "cpu request 2000m exceeds cpu limit 1000m"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ForContainer(tc.pod, tc.ctr)
			checkErr(t, err, tc.sentinel, tc.wantErr)
			if tc.sentinel != nil {
				return
			}
			if got.Budget != tc.want || got.QoS != tc.qos {
				t.Errorf("got %+v %s, want %+v %s", got.Budget, got.QoS, tc.want, tc.qos)
			}
			if n := got.ExclusiveCPUs(); n != tc.exclusive {
				t.Errorf("ExclusiveCPUs %d, want %d", n, tc.exclusive)
			}
			if got.ExclusiveEligible() != (tc.exclusive > 0) {
				t.Errorf("ExclusiveEligible %v, want %v", got.ExclusiveEligible(), tc.exclusive > 0)
			}
		})
	}
}

func TestClassifyQoS(t *testing.T) {
	tests := []struct {
		name string
		b    Budget
		want QoSClass
	}{
		{"empty", Budget{}, QoSBestEffort},
		{"guaranteed", Budget{CPURequest: 1000, CPULimit: 1000, MemoryLimit: 1}, QoSGuaranteed},
		{"guaranteed with equal memory request", Budget{CPURequest: 1000, CPULimit: 1000, MemoryRequest: 1, MemoryLimit: 1}, QoSGuaranteed},
		{"memory request below limit", Budget{CPURequest: 1000, CPULimit: 1000, MemoryRequest: 1, MemoryLimit: 2}, QoSBurstable},
		{"no memory limit", Budget{CPURequest: 1000, CPULimit: 1000}, QoSBurstable},
		{"no cpu limit", Budget{CPURequest: 1000, MemoryLimit: 1}, QoSBurstable},
		{"memory only", Budget{MemoryLimit: 1}, QoSBurstable},
		{"memory request only", Budget{MemoryRequest: 1}, QoSBurstable},
		{"limit only", Budget{CPULimit: 1000, MemoryLimit: 1}, QoSBurstable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassifyQoS(tc.b); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestCheckOOMScoreAdj(t *testing.T) {
	tests := []struct {
		name  string
		class QoSClass
		adj   int64
		bad   bool
	}{
		{"guaranteed -997", QoSGuaranteed, GuaranteedOOMScoreAdj, false},
		{"besteffort 1000", QoSBestEffort, BestEffortOOMScoreAdj, false},
		{"besteffort -997 (guaranteed pod-level pod)", QoSBestEffort, GuaranteedOOMScoreAdj, false},
		{"burstable 500", QoSBurstable, 500, false},
		{"burstable 1000", QoSBurstable, BestEffortOOMScoreAdj, true},
		{"guaranteed 1000", QoSGuaranteed, BestEffortOOMScoreAdj, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckOOMScoreAdj(tc.class, Budget{}, tc.adj)
			if (err != nil) != tc.bad || (err != nil && !errors.Is(err, ErrInconsistent)) {
				t.Errorf("error %v, want bad=%v", err, tc.bad)
			}
		})
	}
}

func TestCheckPod(t *testing.T) {
	c := func(name string, req, lim, mem int64) NamedContainer {
		return NamedContainer{Name: name, Container: NewContainer(Budget{CPURequest: req, CPULimit: lim, MemoryLimit: mem})}
	}
	tests := []struct {
		name    string
		pod     Budget
		ctrs    []NamedContainer
		wantErr []string
	}{
		{name: "no budget bounds nothing", pod: Budget{}, ctrs: []NamedContainer{c("a", 64000, 64000, gib)}},
		{
			name: "fits request", pod: Budget{CPURequest: 4000, CPULimit: 4000, MemoryLimit: 8 * gib},
			ctrs: []NamedContainer{c("a", 2000, 2000, gib), c("b", 2000, 4000, 8*gib)},
		},
		{name: "limit-only pod bounds requests", pod: Budget{CPULimit: 4000}, ctrs: []NamedContainer{c("a", 4000, 4000, 0)}},
		{
			name: "requests sum exceed budget", pod: Budget{CPURequest: 4000, CPULimit: 4000},
			ctrs:    []NamedContainer{c("a", 3000, 3000, 0), c("b", 2000, 0, 0)},
			wantErr: []string{"container cpu requests sum 5000m exceed pod cpu budget 4000m"},
		},
		{
			name: "requests sum exceed limit-only budget", pod: Budget{CPULimit: 2000},
			ctrs:    []NamedContainer{c("a", 2500, 0, 0)},
			wantErr: []string{"container cpu requests sum 2500m exceed pod cpu budget 2000m"},
		},
		{
			name: "container cpu limit above pod", pod: Budget{CPURequest: 1000, CPULimit: 2000},
			ctrs:    []NamedContainer{c("a", 500, 3000, 0)},
			wantErr: []string{`container "a" cpu limit 3000m exceeds pod cpu limit 2000m`},
		},
		{
			name: "container memory limit above pod", pod: Budget{MemoryLimit: gib},
			ctrs:    []NamedContainer{c("a", 0, 0, 2*gib)},
			wantErr: []string{`container "a" memory limit 2Gi exceeds pod memory limit 1Gi`},
		},
		{
			name: "every problem reported", pod: Budget{CPURequest: 1000, CPULimit: 1000, MemoryLimit: gib},
			ctrs: []NamedContainer{c("a", 2000, 2000, 2*gib)},
			wantErr: []string{
				"requests sum 2000m exceed pod cpu budget 1000m", `"a" cpu limit 2000m exceeds`,
				`"a" memory limit 2Gi exceeds`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPod(tc.pod, tc.ctrs)
			if tc.wantErr == nil {
				checkErr(t, err, nil, nil)
				return
			}
			checkErr(t, err, ErrInconsistent, tc.wantErr)
		})
	}
}
