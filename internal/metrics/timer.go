// The event timer: NRI requests timed where they enter the plugin, by a
// ttrpc server interceptor on the plugin's stub, for every request the
// runtime sends (CreateContainer, StateChange events such as
// RunPodSandbox, Synchronize, ...): how long the plugin took to answer it,
// given to EventRecorder.Event.
//
// Use StubOption when building the stub of a plugin that records metrics
// (cmd/cgdelegate, the in-process tests). The clock is read twice per request
// here, on the ttrpc path, where a request already costs tens of
// microseconds (socket, framing, protobuf); cgdelegate's own handlers
// read no clock, so recording costs them only their counters. Do not use
// it for anything but timing: it never changes a request or its answer.

package metrics

import (
	"context"
	"path"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"
)

// EventRecorder is told how long each NRI request took (its NRI event name,
// e.g. "CreateContainer") and whether the answer was an error (a refused
// container, or a request that could not be decoded). Recorder is one.
type EventRecorder interface {
	Event(name string, d time.Duration, failed bool)
}

// StubOption installs Interceptor(r) on the stub's ttrpc server.
func StubOption(r EventRecorder) stub.Option {
	return stub.WithTTRPCOptions(nil, []ttrpc.ServerOpt{ttrpc.WithChainUnaryServerInterceptor(Interceptor(r))})
}

// Interceptor records the duration of every request it serves under the
// request's NRI event name (EventName): from the decoded frame reaching the
// plugin's ttrpc server to the answer being ready, so it covers decoding
// the request, the stub's dispatch and the plugin's handler, and not the
// encoding of the answer or the socket. A request answered with an error
// (a refused container, or one that could not be decoded) is recorded as
// failed.
func Interceptor(r EventRecorder) ttrpc.UnaryServerInterceptor {
	return func(ctx context.Context, unmarshal ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, m ttrpc.Method) (any, error) {
		start := time.Now()
		method := path.Base(info.FullMethod)
		var req any
		if method == stateChange {
			inner := unmarshal
			unmarshal = func(v any) error { req = v; return inner(v) }
		}
		resp, err := m(ctx, unmarshal)
		r.Event(EventName(method, req), time.Since(start), err != nil)
		return resp, err
	}
}

// stateChange is the NRI method that carries the pod and container
// lifecycle events besides CreateContainer, UpdateContainer and
// StopContainer.
const stateChange = "StateChange"

// EventName is the NRI event name of a request to method with the decoded
// request req: the method's name, or for StateChange the name of the event
// it carries (api.Event.PrettyName, e.g. RunPodSandbox).
func EventName(method string, req any) string {
	if evt, ok := req.(*api.StateChangeEvent); ok && method == stateChange {
		return evt.GetEvent().PrettyName()
	}
	return method
}
