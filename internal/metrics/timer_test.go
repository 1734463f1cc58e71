package metrics

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/ttrpc"
)

func TestEventName(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		req          any
		want         string
	}{
		{"create", "CreateContainer", &api.CreateContainerRequest{}, "CreateContainer"},
		{"stop", "StopContainer", &api.StopContainerRequest{}, "StopContainer"},
		{"synchronize", "Synchronize", nil, "Synchronize"},
		{"run pod", "StateChange", &api.StateChangeEvent{Event: api.Event_RUN_POD_SANDBOX}, "RunPodSandbox"},
		{"remove container", "StateChange", &api.StateChangeEvent{Event: api.Event_REMOVE_CONTAINER}, "RemoveContainer"},
		{"remove pod", "StateChange", &api.StateChangeEvent{Event: api.Event_REMOVE_POD_SANDBOX}, "RemovePodSandbox"},
		{"state change not decoded", "StateChange", nil, "StateChange"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EventName(tc.method, tc.req); got != tc.want {
				t.Errorf("EventName(%q, %v) = %q, want %q", tc.method, tc.req, got, tc.want)
			}
		})
	}
}

type event struct {
	name   string
	d      time.Duration
	failed bool
}

type recorder struct{ events []event }

func (*recorder) Container(string, error) {}
func (r *recorder) Event(name string, d time.Duration, failed bool) {
	r.events = append(r.events, event{name, d, failed})
}
func (*recorder) Updates(int, int)    {}
func (*recorder) Outcomes() *Outcomes { return nil }

// The interceptor times the method, names the event from the decoded
// request, and passes the answer and the error through unchanged.
func TestInterceptor(t *testing.T) {
	errHandler := errors.New("refused")
	for _, tc := range []struct {
		name     string
		method   string
		decoded  *api.StateChangeEvent
		sleep    time.Duration
		err      error
		wantName string
	}{
		{"create", "/nri.pkg.api.v1alpha1.Plugin/CreateContainer", nil, 2 * time.Millisecond, nil, "CreateContainer"},
		{"create refused", "/nri.pkg.api.v1alpha1.Plugin/CreateContainer", nil, 0, errHandler, "CreateContainer"},
		{"state change", "/nri.pkg.api.v1alpha1.Plugin/StateChange", &api.StateChangeEvent{Event: api.Event_RUN_POD_SANDBOX}, time.Millisecond, nil, "RunPodSandbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			unmarshal := func(v any) error {
				if e, ok := v.(*api.StateChangeEvent); ok && tc.decoded != nil {
					e.Event = tc.decoded.Event
				}
				return nil
			}
			method := func(_ context.Context, unmarshal func(any) error) (any, error) {
				var req any = &api.CreateContainerRequest{}
				if tc.decoded != nil {
					req = &api.StateChangeEvent{}
				}
				if err := unmarshal(req); err != nil {
					return nil, err
				}
				time.Sleep(tc.sleep)
				return "answer", tc.err
			}
			resp, err := Interceptor(rec)(context.Background(), unmarshal, &ttrpc.UnaryServerInfo{FullMethod: tc.method}, method)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if resp != "answer" {
				t.Errorf("resp = %v, want the method's answer", resp)
			}
			if len(rec.events) != 1 {
				t.Fatalf("recorded %d events, want 1: %v", len(rec.events), rec.events)
			}
			if got := rec.events[0]; got.name != tc.wantName || got.d < tc.sleep || got.failed != (tc.err != nil) {
				t.Errorf("recorded %q %v failed %v, want %q, at least %v, failed %v", got.name, got.d, got.failed, tc.wantName, tc.sleep, tc.err != nil)
			}
		})
	}
}
