package nri

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// recorder is a Metrics that remembers what it was told.
type recorder struct {
	mu         sync.Mutex
	containers []string
	events     []string
	outcomes   metrics.Outcomes
}

func (r *recorder) Container(outcome string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		outcome += ": " + err.Error()
	}
	r.containers = append(r.containers, outcome)
}

func (r *recorder) Event(name string, d time.Duration, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d > 0 {
		r.events = append(r.events, name)
	}
}

func (r *recorder) Updates(int, int) {}

func (r *recorder) Outcomes() *metrics.Outcomes { return &r.outcomes }

// slowRecorder hands out no Outcomes: every decision goes to Container.
type slowRecorder struct{ *recorder }

func (slowRecorder) Outcomes() *metrics.Outcomes { return nil }

func testPod(t *testing.T, h *fakehost.Host, ann map[string]string) *api.PodSandbox {
	t.Helper()
	const parent = "/kubepods/burstable/pod1"
	if err := h.AddPodCgroup(parent); err != nil {
		t.Fatal(err)
	}
	return &api.PodSandbox{Id: "p1", Name: "web", Namespace: "team-a", Annotations: ann, Linux: &api.LinuxPodSandbox{CgroupParent: parent}}
}

func testContainer() *api.Container {
	return &api.Container{Id: "c1", Name: "app", Linux: &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{{Type: "cgroup"}}}}
}

func TestOptions(t *testing.T) {
	h := fakehost.New(t)
	rec := &recorder{}
	errPolicy := errors.New(`namespace "team-a" is not allowed`)
	var configured int
	p, err := New(h.Config(), nil,
		WithMetrics(rec),
		WithAdmission(func(config.Config) writable.Check {
			return func(c *writable.Candidate) error {
				if c.Pod.GetNamespace() == "team-a" && c.Ctr.GetName() == "denied" {
					return errPolicy
				}
				return nil
			}
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	p.OnConfigured(func() { configured++ })
	ctx := context.Background()
	if _, err := p.Configure(ctx, "", "cri-o", "1.34"); err != nil {
		t.Fatal(err)
	}
	if configured != 1 {
		t.Errorf("OnConfigured hook ran %d times, want 1", configured)
	}
	if rt := p.Runtime(); rt == nil || rt.Name != "cri-o" {
		t.Errorf("runtime after Configure from cri-o: %+v", rt)
	}

	pod := testPod(t, h, map[string]string{annotations.WritableCgroups.Name: "true"})
	if _, _, err := p.CreateContainer(ctx, pod, testContainer()); err != nil {
		t.Fatal(err)
	}
	denied := testContainer()
	denied.Name = "denied"
	_, _, err = p.CreateContainer(ctx, pod, denied)
	if !errors.Is(err, errPolicy) || !errors.Is(err, ErrRefused) {
		t.Fatalf("admission refusal: %v", err)
	}
	plain := testPod(t, h, nil)
	if _, _, err := p.CreateContainer(ctx, plain, testContainer()); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// Refusals go to Container; the other decisions are one atomic add
	// each on the recorder's Outcomes, by writable.Outcome.
	want := []string{"refused: " + errPolicy.Error()}
	if strings.Join(rec.containers, "|") != strings.Join(want, "|") {
		t.Errorf("recorded containers %q, want %q", rec.containers, want)
	}
	for o, n := range map[writable.Outcome]uint64{writable.Writable: 1, writable.Unchanged: 1, writable.Guarded: 0} {
		if got := rec.outcomes.Load(int(o)); got != n {
			t.Errorf("outcome %s counted %d times, want %d", o, got, n)
		}
	}
	// The handlers time nothing: events are timed on the stub's ttrpc
	// server (metrics.StubOption), so the handler path reads no clock.
	if len(rec.events) != 0 {
		t.Errorf("the handlers recorded events %q, want none", rec.events)
	}
}

// Before Configure no runtime is known.
func TestRuntimeBeforeConfigure(t *testing.T) {
	p, err := New(fakehost.New(t).Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rt, name := p.Runtime(), p.runtimeName(); rt != nil || name != "" {
		t.Fatalf("runtime before Configure: %+v %q", rt, name)
	}
}

// A recorder without Outcomes is told every decision through Container.
func TestMetricsWithoutOutcomes(t *testing.T) {
	h := fakehost.New(t)
	rec := &recorder{}
	p, err := New(h.Config(), nil, WithMetrics(slowRecorder{rec}))
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod(t, h, map[string]string{annotations.WritableCgroups.Name: "true"})
	if _, _, err := p.CreateContainer(context.Background(), pod, testContainer()); err != nil {
		t.Fatal(err)
	}
	if strings.Join(rec.containers, "|") != "writable" || rec.outcomes.Load(int(writable.Writable)) != 0 {
		t.Errorf("recorded containers %q, outcomes %d; want writable through Container only", rec.containers, rec.outcomes.Load(int(writable.Writable)))
	}
}
