package budget

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
)

const mi = 1 << 20

// The issue's pod: spec.resources requests = limits = {cpu: 2, memory:
// 256Mi}. These are the exact CRI values the kubelet sends for the pod and
// for a container with no resources of its own in it (see doc.go).
var (
	issuePod   = func() *api.LinuxResources { return res(2048, 200000, 100000, 256*mi) }
	issueNoRes = func() *api.LinuxResources { return res(2048, 200000, 100000, 256*mi) }
)

func TestPodLimitsOnly(t *testing.T) {
	tests := []struct {
		name     string
		pod, ctr *api.LinuxResources
		want     bool
	}{
		{"container without resources", issuePod(), issueNoRes(), true},
		{"default period on both sides", res(2048, 200000, -1, 256*mi), res(2048, 200000, 0, 256*mi), true},
		{"pod without memory limit", res(2048, 200000, 100000, -2), res(2048, 200000, 100000, -2), true},
		{"fractional pod limit", res(1536, 150000, 100000, 256*mi), res(1536, 150000, 100000, 256*mi), true},
		{"no pod resources", nil, issueNoRes(), false},
		{"pod without cpu limit", res(2048, -1, 100000, 256*mi), res(2, -1, 100000, 256*mi), false},
		{"own cpu request 500m", issuePod(), res(512, 200000, 100000, 256*mi), false},
		{"own guaranteed 1 cpu", issuePod(), res(1024, 100000, 100000, 64*mi), false},
		{"own memory limit", issuePod(), res(2048, 200000, 100000, 64*mi), false},
		{"other period", issuePod(), res(2048, 100000, 50000, 256*mi), false},
		{"quota disabled", issuePod(), res(2048, -1, 100000, 256*mi), false},
		{"no container resources", issuePod(), nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodLimitsOnly(tc.pod, tc.ctr); got != tc.want {
				t.Errorf("PodLimitsOnly = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestContainerWithoutResources reproduces the issue's pod: g Guaranteed
// (cpu 1, memory 64Mi) and s without resources, in a pod with cpu 2 and
// memory 256Mi. s has no request of its own, so the pod is consistent.
func TestContainerWithoutResources(t *testing.T) {
	pod := podWith(issuePod(), nil)
	g, err := ForContainer(pod, ctrWith(res(1024, 100000, 100000, 64*mi), intp(GuaranteedOOMScoreAdj)))
	if err != nil {
		t.Fatal(err)
	}
	sc := ctrWith(issueNoRes(), intp(GuaranteedOOMScoreAdj))
	sc.Name = "s"
	s, err := ForContainer(pod, sc)
	if err != nil {
		t.Fatal(err)
	}
	if g.ExclusiveCPUs() != 1 || g.PodLimits {
		t.Errorf("g = %+v, want exclusive 1 cpu of its own", g)
	}
	want := Budget{CPULimit: 2000, MemoryLimit: 256 * mi}
	if s.Budget != want || s.QoS != QoSBurstable || !s.PodLimits || s.ExclusiveEligible() {
		t.Errorf("s = %+v, want %+v Burstable with PodLimits, not exclusive", s, want)
	}
	pb, err := ForPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPod(pb, []NamedContainer{{"g", g}, {"s", s}}); err != nil {
		t.Errorf("CheckPod: %v", err)
	}

	t.Run("annotated cpu is the container's own", func(t *testing.T) {
		ann := podWith(issuePod(), map[string]string{containerKey("s"): "cpu=2"})
		got, err := ForContainer(ann, sc)
		if err != nil {
			t.Fatal(err)
		}
		if got.PodLimits || got.CPURequest != 2000 || got.ExclusiveCPUs() != 2 {
			t.Errorf("annotated s = %+v, want its own 2 exclusive cpus", got)
		}
	})
	t.Run("annotated memory only keeps the pod limits reading", func(t *testing.T) {
		ann := podWith(issuePod(), map[string]string{containerKey("s"): "memory=256Mi"})
		got, err := ForContainer(ann, sc)
		if err != nil {
			t.Fatal(err)
		}
		if !got.PodLimits || got.CPURequest != 0 {
			t.Errorf("annotated s = %+v, want PodLimits and no cpu request", got)
		}
	})
}
