package inproc

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	validator "github.com/containerd/nri/plugins/default-validator"

	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/nri"
	"github.com/cgdelegate/cgdelegate/internal/reconnect"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// slowPlugin is cgdelegate with CreateContainer delayed for one container
// name: a handler slower than the runtime's plugin_request_timeout, as on
// an overloaded node.
type slowPlugin struct {
	*nri.Plugin
	name  string
	delay time.Duration
}

func (s *slowPlugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if ctr.GetName() == s.name {
		time.Sleep(s.delay)
	}
	return s.Plugin.CreateContainer(ctx, pod, ctr)
}

// syncBuffer is a log sink read while the plugin writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// What containerd's NRI (the real adaptation, default validator on as in
// contrib/containerd/cgdelegate.toml) does when cgdelegate misses
// plugin_request_timeout on a CreateContainer, as docs/deploying.md says:
//   - the request is not failed: the container in flight is created without
//     cgdelegate's adjustments (no writable mount, no hook), even though its
//     pod requires cgdelegate, because cgdelegate was listed as present when
//     the request began;
//   - cgdelegate is dropped: until it is back, a pod that requires it is
//     refused and a plain pod runs;
//   - cgdelegate reconnects by itself (internal/reconnect, as cmd/cgdelegate
//     runs it) and the next annotated container is writable again.
func TestRequestTimeoutDropsAndReconnects(t *testing.T) {
	const timeout = 300 * time.Millisecond
	adaptation.SetPluginRequestTimeout(timeout)
	t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })

	host := fakehost.New(t, fakehost.WithMounts(fakehost.Nsdelegate))
	if err := host.AddPodCgroup(cgroupfsParent); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p, err := nri.New(host.Config(), log, nri.WithAdmission(writable.OptInPolicy))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := NewRuntime("containerd", "v2.4.2-inproc", adaptation.WithDefaultValidator(&validator.DefaultValidatorConfig{Enable: true}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	slow := &slowPlugin{Plugin: p, name: "slow", delay: 3 * timeout}
	s, err := stub.New(slow, stub.WithSocketPath(rt.Socket()), stub.WithPluginName("cgdelegate"), stub.WithPluginIdx("50"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The first reconnection waits 2 s: long enough to see the plugin gone.
	backoff := reconnect.Backoff{Min: 2 * time.Second, Max: 4 * time.Second, Reset: time.Minute}
	go func() { done <- reconnect.Run(ctx, log, backoff, s.Run) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("reconnect.Run: %v", err)
		}
	})

	pod := Pod("web", "u1", cgroupfsParent, writableAnn(""))
	pod.Annotations[validator.RequiredPlugins] = `["cgdelegate"]`
	if err := rt.RunPod(ctx, pod); err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	// create creates the container name in pod.
	create := func(name string) (*api.ContainerAdjustment, error) {
		c := Container(pod, name)
		resp, err := rt.CreateContainer(ctx, pod, c)
		return resp.GetAdjust(), err
	}
	isWritable := func(adj *api.ContainerAdjustment) bool {
		m := cgroupMount(adj.GetMounts())
		return m != nil && !slices.Contains(m.Options, "ro") && len(adj.GetHooks().GetCreateRuntime()) > 0
	}
	waitWritable := func(what string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for i := 0; ; i++ {
			adj, err := create(what + "-" + strconv.Itoa(i))
			if err == nil && isWritable(adj) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no writable container within 15s; last: %v, adjustment %v\nplugin log:\n%s", what, err, adj, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitWritable("connected")

	start := time.Now()
	adj, err := create("slow")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("the request cgdelegate timed out on failed (%v); NRI proceeds without the plugin", err)
	}
	if m := cgroupMount(adj.GetMounts()); m != nil || len(adj.GetHooks().GetCreateRuntime()) > 0 {
		t.Errorf("the container cgdelegate timed out on got mount %v, hooks %v: want none of cgdelegate's adjustments", m, adj.GetHooks())
	}
	if took < timeout || took >= slow.delay {
		t.Errorf("the timed-out request took %s, want the request timeout %s", took, timeout)
	}

	// The runtime reports the let-through container at the next
	// Synchronize, as it was created: without cgdelegate's change.
	slowCtr := Container(pod, "slow")
	slowCtr.State = api.ContainerState_CONTAINER_RUNNING
	rt.SetState([]*api.PodSandbox{pod}, []*api.Container{slowCtr})

	// Dropped: a pod that requires cgdelegate is refused, a plain one runs.
	if _, err := create("while-dropped"); err == nil || !strings.Contains(err.Error(), `required plugin "cgdelegate" not present`) {
		t.Errorf("an annotated container while cgdelegate is dropped: %v, want the validator's refusal", err)
	}
	plain := Pod("plain", "u2", cgroupfsParent, nil)
	if err := rt.RunPod(ctx, plain); err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if _, err := rt.CreateContainer(ctx, plain, Container(plain, "app")); err != nil {
		t.Errorf("a plain container while cgdelegate is dropped: %v", err)
	}

	waitWritable("reconnected")
	if !strings.Contains(logs.String(), "connection to the runtime lost; reconnecting") {
		t.Errorf("the plugin did not log the lost connection:\n%s", logs.String())
	}
	// The reconnect's Synchronize says what was let through, naming it.
	missed := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "container runs without cgdelegate") {
			missed = l
		}
	}
	if !strings.Contains(missed, "container=slow") || !strings.Contains(missed, "asked for writable cgroups") {
		t.Errorf("the reconnect did not report the let-through container (line %q):\n%s", missed, logs.String())
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "connection to the runtime lost") || strings.Contains(l, "without cgdelegate") {
			t.Logf("plugin: %s", l)
		}
	}
}

// Why cgdelegate asks for no NRI failure policy (stub.WithFailurePolicy,
// NRI v0.12.4+; docs/deploying.md, "Request timeouts"): the policy is the
// plugin's, not a pod's. With fail_request, the runtime (the real
// adaptation of go.mod's NRI) fails every request cgdelegate misses, so a
// plain pod's container is refused when cgdelegate is slow on it; without
// a policy that container is created, untouched.
func TestFailRequestPolicyRefusesPlainPods(t *testing.T) {
	const timeout = 300 * time.Millisecond
	adaptation.SetPluginRequestTimeout(timeout)
	t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })
	for _, tc := range []struct {
		name    string
		policy  *api.FailurePolicy
		refused bool
	}{
		{"no policy (cgdelegate's)", nil, false},
		{"fail_request", &api.FailurePolicy{FailRequest: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := fakehost.New(t, fakehost.WithMounts(fakehost.Nsdelegate))
			if err := host.AddPodCgroup(cgroupfsParent); err != nil {
				t.Fatal(err)
			}
			p, err := nri.New(host.Config(), slog.New(slog.DiscardHandler), nri.WithAdmission(writable.OptInPolicy))
			if err != nil {
				t.Fatal(err)
			}
			rt, err := NewRuntime("containerd", "v2.4.2-inproc", adaptation.WithDefaultValidator(&validator.DefaultValidatorConfig{Enable: true}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rt.Close)
			opts := []stub.Option{stub.WithSocketPath(rt.Socket()), stub.WithPluginName("cgdelegate"), stub.WithPluginIdx("50")}
			if tc.policy != nil {
				opts = append(opts, stub.WithFailurePolicy(tc.policy))
			}
			s, err := stub.New(&slowPlugin{Plugin: p, name: "slow", delay: 3 * timeout}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go func() { _ = s.Run(ctx) }()
			// Registered once a pod that requires it gets a container.
			req := Pod("req", "u3", cgroupfsParent, nil)
			req.Annotations = map[string]string{validator.RequiredPlugins: `["cgdelegate"]`}
			plain := Pod("plain", "u2", cgroupfsParent, nil)
			if err := errors.Join(rt.RunPod(ctx, req), rt.RunPod(ctx, plain)); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(15 * time.Second)
			for i := 0; ; i++ {
				if _, err := rt.CreateContainer(ctx, req, Container(req, "probe-"+strconv.Itoa(i))); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("cgdelegate did not register")
				}
				time.Sleep(50 * time.Millisecond)
			}
			_, err = rt.CreateContainer(ctx, plain, Container(plain, "slow"))
			if refused := err != nil; refused != tc.refused {
				t.Errorf("a plain pod's container cgdelegate timed out on: error %v, want refused %t", err, tc.refused)
			}
		})
	}
}
