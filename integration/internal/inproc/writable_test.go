package inproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/metrics"
	"github.com/cgdelegate/cgdelegate/internal/nri"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

const (
	cgroupfsParent = "/kubepods/burstable/pod1111"
	systemdParent  = "kubepods-burstable-pod2222.slice"
)

type env struct {
	host *fakehost.Host
	rt   *Runtime
	p    *nri.Plugin
	adv  *advert.Advertiser
}

// setup starts a runtime side and connects the real plugin to it over
// ttrpc.
func setup(t *testing.T, nsdelegate bool, mutate func(*config.Config)) *env {
	t.Helper()
	return setupStub(t, nsdelegate, mutate, nil)
}

// setupStub is setup with the plugin built with opts and stubOpts added to
// its stub.
func setupStub(t *testing.T, nsdelegate bool, mutate func(*config.Config), stubOpts []stub.Option, opts ...nri.Option) *env {
	t.Helper()
	return setupRuntime(t, "containerd", nsdelegate, mutate, stubOpts, opts...)
}

// setupRuntime is setupStub with a runtime of that name (what Configure
// tells the plugin).
func setupRuntime(t *testing.T, runtime string, nsdelegate bool, mutate func(*config.Config), stubOpts []stub.Option, opts ...nri.Option) *env {
	t.Helper()
	mounts := fakehost.NoNsdelegate
	if nsdelegate {
		mounts = fakehost.Nsdelegate
	}
	host := fakehost.New(t, fakehost.WithMounts(mounts))
	for _, parent := range []string{cgroupfsParent, systemdParent} {
		if err := host.AddPodCgroup(parent); err != nil {
			t.Fatal(err)
		}
	}
	cfg := host.Config()
	if mutate != nil {
		mutate(&cfg)
	}
	// Wired as cmd/cgdelegate wires it: the opt-in policy follows the config,
	// the advertisement refreshes after every Configure.
	opts = append(opts, nri.WithAdmission(writable.OptInPolicy))
	p, err := nri.New(cfg, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		t.Fatal(err)
	}
	adv := advert.New(p, nil)
	p.OnConfigured(adv.Refresh)
	rt, err := NewRuntime(runtime, "v2.4.2-inproc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	s, err := rt.Connect(context.Background(), p, "cgdelegate", "50", stubOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return &env{host: host, rt: rt, p: p, adv: adv}
}

func writableAnn(scope string) map[string]string {
	return map[string]string{annotations.WritableCgroups.Name + scope: "true"}
}

func (e *env) create(t *testing.T, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	t.Helper()
	if err := e.rt.RunPod(context.Background(), pod); err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	resp, err := e.rt.CreateContainer(context.Background(), pod, ctr)
	if err != nil {
		return nil, err
	}
	return resp.GetAdjust(), nil
}

func cgroupMount(mounts []*api.Mount) *api.Mount {
	var found *api.Mount
	for _, m := range mounts {
		if m.Destination == "/sys/fs/cgroup" {
			found = m
		}
	}
	return found
}

func hasCgroupNS(c *api.Container, adj *api.ContainerAdjustment) bool {
	for _, n := range append(slices.Clone(c.GetLinux().GetNamespaces()), adj.GetLinux().GetNamespaces()...) {
		if n.Type == "cgroup" && n.Path == "" {
			return true
		}
	}
	return false
}

func TestWritableContainer(t *testing.T) {
	tests := []struct {
		name     string
		parent   string
		podAnn   map[string]string
		opts     []ContainerOption
		wantDesc string
		wantDep  string
		addsNS   bool
	}{
		{"pod annotation, cgroupfs driver", cgroupfsParent, writableAnn(""), nil, "250", "50", false},
		{"pod scope, systemd driver", systemdParent, writableAnn("/pod"), nil, "250", "50", false},
		{"container scope", cgroupfsParent, writableAnn("/container.app"), nil, "250", "50", false},
		{"CRI-O key", cgroupfsParent, map[string]string{annotations.CRIOWritable.Name: "true"}, nil, "250", "50", false},
		{"spec without cgroupns gets one", cgroupfsParent, writableAnn(""), []ContainerOption{WithoutCgroupNS()}, "250", "50", true},
		{
			"pod annotations lower the bounds", cgroupfsParent,
			map[string]string{annotations.WritableCgroups.Name: "Writable", annotations.MaxDescendants.Name: "100", annotations.MaxDepth.Name: "5"},
			nil, "100", "5", false,
		},
		{
			"annotations can not raise the bounds", cgroupfsParent,
			map[string]string{annotations.WritableCgroups.Name: "Writable", annotations.MaxDescendants.Name: "100000"},
			nil, "250", "50", false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, true, nil)
			pod := Pod("web", "u1", tc.parent, tc.podAnn)
			ctr := Container(pod, "app", tc.opts...)
			adj, err := e.create(t, pod, ctr)
			if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			m := cgroupMount(FinalMounts(ctr, adj))
			if m == nil || m.Type != "cgroup2" || !slices.Contains(m.Options, "rw") || slices.Contains(m.Options, "ro") {
				t.Fatalf("cgroup mount after adjustment = %+v", m)
			}
			for _, o := range []string{"nosuid", "noexec", "nodev", "relatime"} {
				if !slices.Contains(m.Options, o) {
					t.Errorf("mount lost %s: %v", o, m.Options)
				}
			}
			if !hasCgroupNS(ctr, adj) {
				t.Fatal("no private cgroup namespace after adjustment")
			}
			if got := len(adj.GetLinux().GetNamespaces()) > 0; got != tc.addsNS {
				t.Fatalf("adjustment added namespace = %v, want %v", got, tc.addsNS)
			}
			hooks := adj.GetHooks().GetCreateRuntime()
			if len(hooks) != 1 || hooks[0].Path != "/usr/local/bin/cgdelegate-hook" {
				t.Fatalf("createRuntime hooks = %v", hooks)
			}
			args := strings.Join(hooks[0].Args, " ")
			for _, want := range []string{"--max-descendants " + tc.wantDesc, "--max-depth " + tc.wantDep, "--cgroup-root " + e.host.CgroupRoot} {
				if !strings.Contains(args, want) {
					t.Errorf("hook args %q lack %q", args, want)
				}
			}
			env := map[string]string{}
			for _, kv := range adj.GetEnv() {
				env[kv.GetKey()] = kv.GetValue()
			}
			if env["CGDELEGATE_MAX_DESCENDANTS"] != tc.wantDesc || env["CGDELEGATE_MAX_DEPTH"] != tc.wantDep {
				t.Errorf("adjustment env = %v, want CGDELEGATE_MAX_DESCENDANTS=%s CGDELEGATE_MAX_DEPTH=%s", env, tc.wantDesc, tc.wantDep)
			}
			for file, want := range map[string]string{"cgroup.max.descendants": tc.wantDesc, "cgroup.max.depth": tc.wantDep} {
				got, err := e.host.ReadPodFile(tc.parent, file)
				if err != nil || got != want {
					t.Errorf("pod %s = %q (%v), want %q", file, got, err, want)
				}
			}
		})
	}
}

func TestLowerKubeletBoundsKept(t *testing.T) {
	e := setup(t, true, nil)
	dir := e.host.CgroupRoot + cgroupfsParent
	if err := os.WriteFile(dir+"/cgroup.max.descendants", []byte("64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := Pod("web", "u1", cgroupfsParent, writableAnn(""))
	if _, err := e.create(t, pod, Container(pod, "app")); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.host.ReadPodFile(cgroupfsParent, "cgroup.max.descendants"); got != "64" {
		t.Fatalf("cgroup.max.descendants = %q, want the kubelet's 64 kept", got)
	}
}

func TestNotWritable(t *testing.T) {
	tests := []struct {
		name   string
		podAnn map[string]string
		opts   []ContainerOption
	}{
		{"no annotation", nil, nil},
		{"annotation false", map[string]string{annotations.WritableCgroups.Name: "false"}, nil},
		{"other container's annotation", writableAnn("/container.other"), nil},
		{"privileged container left alone", writableAnn(""), []ContainerOption{WithPrivileged()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, true, nil)
			pod := Pod("web", "u1", cgroupfsParent, tc.podAnn)
			ctr := Container(pod, "app", tc.opts...)
			adj, err := e.create(t, pod, ctr)
			if err != nil {
				t.Fatal(err)
			}
			if len(adj.GetMounts()) != 0 || len(adj.GetHooks().GetCreateRuntime()) != 0 {
				t.Fatalf("unexpected adjustment: %v", adj)
			}
			if got, _ := e.host.ReadPodFile(cgroupfsParent, "cgroup.max.descendants"); got != "max" {
				t.Fatalf("bounds written for a non-writable container: %q", got)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	tests := []struct {
		name      string
		nsdel     bool
		v1        bool
		parent    string
		podAnn    map[string]string
		opts      []ContainerOption
		wantInErr []string
	}{
		{"no nsdelegate", false, false, cgroupfsParent, writableAnn(""), nil, []string{"nsdelegate", "remount"}},
		{"cgroup v1", true, true, cgroupfsParent, writableAnn(""), nil, []string{"cgroup v2", "tmpfs"}},
		{"bad annotation", true, false, cgroupfsParent, map[string]string{annotations.WritableCgroups.Name: "yes"}, nil, []string{annotations.WritableCgroups.Name, `"yes"`}},
		{"bad bound annotation", true, false, cgroupfsParent, map[string]string{annotations.WritableCgroups.Name: "true", annotations.MaxDepth.Name: "deep"}, nil, []string{annotations.MaxDepth.Name, `"deep"`}},
		{"shared cgroupns", true, false, cgroupfsParent, writableAnn(""), []ContainerOption{WithSharedCgroupNS("/proc/7/ns/cgroup")}, []string{"private cgroup namespace", "/proc/7/ns/cgroup"}},
		{"pod cgroup missing", true, false, "/kubepods/burstable/podgone", writableAnn(""), nil, []string{"pod bounds", "podgone"}},
		{"no cgroup parent", true, false, "", writableAnn(""), nil, []string{"pod cgroup is unknown"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, tc.nsdel, nil)
			if tc.v1 {
				if err := e.host.Remount(fakehost.CgroupV1); err != nil {
					t.Fatal(err)
				}
			}
			pod := Pod("web", "u1", tc.parent, tc.podAnn)
			_, err := e.create(t, pod, Container(pod, "app", tc.opts...))
			if err == nil {
				t.Fatal("container was not refused")
			}
			for _, w := range tc.wantInErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if got, _ := e.host.ReadPodFile(cgroupfsParent, "cgroup.max.descendants"); got != "max" && tc.parent == cgroupfsParent {
				t.Errorf("refused container left bounds behind: %q", got)
			}
		})
	}
}

// A remount that drops nsdelegate after the plugin started is seen by the
// next container creation.
func TestNsdelegateDroppedAfterStart(t *testing.T) {
	e := setup(t, true, nil)
	pod := Pod("web", "u1", cgroupfsParent, writableAnn(""))
	if _, err := e.create(t, pod, Container(pod, "first")); err != nil {
		t.Fatal(err)
	}
	if err := e.host.Remount(fakehost.NoNsdelegate); err != nil {
		t.Fatal(err)
	}
	if _, err := e.create(t, pod, Container(pod, "second")); err == nil || !strings.Contains(err.Error(), "nsdelegate") {
		t.Fatalf("after remount: err = %v, want a refusal naming nsdelegate", err)
	}
}

func TestGuard(t *testing.T) {
	tests := []struct {
		name      string
		guard     config.GuardMode
		nsdel     bool
		opts      []ContainerOption
		wantErr   bool
		wantHook  bool
		wantBound string
	}{
		{"enforce refuses runtime-writable on unsafe host", config.GuardEnforce, false, []ContainerOption{WithRuntimeWritable()}, true, false, "max"},
		{"enforce refuses runtime-writable without cgroupns", config.GuardEnforce, true, []ContainerOption{WithRuntimeWritable(), WithSharedCgroupNS("/proc/1/ns/cgroup")}, true, false, "max"},
		{"enforce bounds runtime-writable on safe host", config.GuardEnforce, true, []ContainerOption{WithRuntimeWritable()}, false, true, "250"},
		{"warn lets it through", config.GuardWarn, false, []ContainerOption{WithRuntimeWritable()}, false, false, "max"},
		{"off ignores it", config.GuardOff, false, []ContainerOption{WithRuntimeWritable()}, false, false, "max"},
		{"read-only containers are not guarded", config.GuardEnforce, false, nil, false, false, "max"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, tc.nsdel, func(c *config.Config) { c.Guard = tc.guard })
			pod := Pod("web", "u1", cgroupfsParent, nil)
			adj, err := e.create(t, pod, Container(pod, "app", tc.opts...))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && !strings.Contains(err.Error(), "runtime") {
				t.Errorf("error %q does not say the runtime made it writable", err)
			}
			if got := len(adj.GetHooks().GetCreateRuntime()) == 1; got != tc.wantHook {
				t.Errorf("hook injected = %v, want %v", got, tc.wantHook)
			}
			if got, _ := e.host.ReadPodFile(cgroupfsParent, "cgroup.max.descendants"); got != tc.wantBound {
				t.Errorf("cgroup.max.descendants = %q, want %q", got, tc.wantBound)
			}
		})
	}
}

// An explicit ReadOnly wins over a runtime that made the mount writable.
func TestReadOnlyAnnotationOverridesRuntime(t *testing.T) {
	e := setup(t, true, nil)
	pod := Pod("web", "u1", cgroupfsParent, map[string]string{annotations.WritableCgroups.Name: "ReadOnly"})
	ctr := Container(pod, "app", WithRuntimeWritable())
	adj, err := e.create(t, pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	m := cgroupMount(FinalMounts(ctr, adj))
	if m == nil || !slices.Contains(m.Options, "ro") {
		t.Fatalf("cgroup mount = %+v, want read-only", m)
	}
}

func TestFeatureFileFollowsHost(t *testing.T) {
	e := setup(t, true, nil)
	read := func() string {
		b, err := os.ReadFile(e.host.FeatureFile)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read(); got != advert.FeatureContent(true) {
		t.Fatalf("after Configure: %q", got)
	}
	if err := e.host.Remount(fakehost.NoNsdelegate); err != nil {
		t.Fatal(err)
	}
	e.adv.Refresh()
	if got := read(); got != advert.FeatureContent(false) {
		t.Fatalf("after losing nsdelegate: %q", got)
	}
	r := e.adv.Report()
	if r.Supported || r.Runtime == nil || r.Runtime.Name != "containerd" || r.Runtime.Version != "v2.4.2-inproc" {
		t.Fatalf("report = %+v", r)
	}
}

func TestErrorReachesRuntimeAsRefusal(t *testing.T) {
	e := setup(t, false, nil)
	pod := Pod("web", "u1", cgroupfsParent, writableAnn(""))
	_, err := e.create(t, pod, Container(pod, "app"))
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "cgdelegate refused the container web/app") {
		t.Fatalf("error %q does not name the pod and container", err)
	}
}

// TestOptInPolicy: a pod outside the node's opt-in policy is refused over
// NRI, asking by annotation or given a writable mount by the runtime, and
// the runtime gets the rule and the value; a pod inside it is served.
func TestOptInPolicy(t *testing.T) {
	tests := []struct {
		name      string
		namespace string
		handler   string
		ann       map[string]string
		opts      []ContainerOption
		wantErr   string
	}{
		{name: "namespace allowed", namespace: "team-a", handler: "runc", ann: writableAnn("")},
		{name: "namespace refused", namespace: "default", handler: "runc", ann: writableAnn(""), wantErr: `namespace "default" is not in optIn.namespaces ["team-*"]`},
		{name: "KubeRay key refused the same", namespace: "default", handler: "runc", ann: map[string]string{annotations.KubeRayWritable.Name: "true"}, wantErr: `namespace "default" is not in optIn.namespaces ["team-*"]`},
		{name: "runtime-writable refused the same", namespace: "default", handler: "runc", opts: []ContainerOption{WithRuntimeWritable()}, wantErr: `namespace "default" is not in optIn.namespaces ["team-*"]`},
		{name: "handler refused", namespace: "team-a", handler: "kata", ann: writableAnn(""), wantErr: `runtime handler "kata" is not in optIn.runtimeHandlers ["runc"]`},
		{name: "not asking is not judged", namespace: "default", handler: "kata"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, true, func(c *config.Config) {
				c.OptIn = config.OptIn{Namespaces: []string{"team-*"}, RuntimeHandlers: []string{"runc"}}
			})
			pod := Pod("web", "u1", cgroupfsParent, tc.ann)
			pod.Namespace, pod.RuntimeHandler = tc.namespace, tc.handler
			adj, err := e.create(t, pod, Container(pod, "app", tc.opts...))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if tc.ann != nil && len(adj.GetHooks().GetCreateRuntime()) != 1 {
					t.Fatalf("allowed pod did not get writable cgroups: %+v", adj)
				}
				return
			}
			if err == nil {
				t.Fatal("container was not refused")
			}
			for _, w := range []string{"cgdelegate refused the container web/app", "not allowed by the node's opt-in policy", tc.wantErr} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if got, _ := e.host.ReadPodFile(cgroupfsParent, "cgroup.max.descendants"); got != "max" {
				t.Errorf("refused container left bounds behind: %q", got)
			}
		})
	}
}

// The bounds of a pod are read once per pod; RemovePodSandbox forgets them,
// so a pod cgroup re-created under the same parent is bounded again.
func TestBoundsCacheForgetsRemovedPods(t *testing.T) {
	e := setup(t, true, nil)
	pod := Pod("web", "u1", cgroupfsParent, writableAnn(""))
	if _, err := e.create(t, pod, Container(pod, "a")); err != nil {
		t.Fatal(err)
	}
	// Someone loosens the bound behind the plugin's back: the cache does not
	// see it (the hook does, at start), but a new pod does.
	dir := e.host.CgroupRoot + cgroupfsParent
	if err := os.WriteFile(dir+"/cgroup.max.descendants", []byte("max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.create(t, pod, Container(pod, "b")); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.host.ReadPodFile(cgroupfsParent, "cgroup.max.descendants"); got != "max" {
		t.Fatalf("second container of the pod re-read the bounds: %q", got)
	}
	if err := e.rt.RemovePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if _, err := e.create(t, pod, Container(pod, "c")); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.host.ReadPodFile(cgroupfsParent, "cgroup.max.descendants"); got != "250" {
		t.Fatalf("after RemovePodSandbox the pod was not bounded again: %q", got)
	}
}

// Containers of one pod created at the same time share one read-only
// adjustment inside the plugin; every one of them must still reach the
// runtime whole (run with -race: the shared message is only marshalled).
func TestConcurrentWritableContainers(t *testing.T) {
	e := setup(t, true, nil)
	pod := Pod("web", "u1", cgroupfsParent, writableAnn(""))
	if err := e.rt.RunPod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			ctr := Container(pod, fmt.Sprintf("c%d", i))
			resp, err := e.rt.CreateContainer(context.Background(), pod, ctr)
			switch {
			case err != nil:
				errs <- err
			case cgroupMount(resp.GetAdjust().GetMounts()) == nil || len(resp.GetAdjust().GetHooks().GetCreateRuntime()) != 1:
				errs <- fmt.Errorf("container %s: adjustment %v", ctr.GetName(), resp.GetAdjust())
			default:
				errs <- nil
			}
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestSharedPodCgroupRefused plays a CRI client that creates a sandbox with
// a cgroup parent of the node's root, the kubelet's cgroup of every pod or
// of a QoS class, or the parent of a kubelet's cgroup root (/k8s), then
// asks for writable cgroups: the container is refused with the cause and
// the parent named, and not one bound file of those cgroups is written. A
// container of the same sandbox that asked for nothing is created
// unchanged.
func TestSharedPodCgroupRefused(t *testing.T) {
	shared := []string{"/", "kubepods.slice", "kubepods-burstable.slice", "/kubepods", "/kubepods/burstable", "/k8s"}
	for _, parent := range shared {
		t.Run(parent, func(t *testing.T) {
			rec := metrics.New(metrics.Options{})
			e := setupStub(t, true, nil, nil, nri.WithMetrics(rec))
			// The node's shared cgroups, unbounded, as on a real node;
			// /k8s holds a second kubelet's pods (--cgroup-root /k8s).
			for _, p := range append(shared, "/k8s/kubepods/burstable/pod3333") {
				if err := e.host.AddPodCgroup(p); err != nil {
					t.Fatal(err)
				}
			}
			pod := Pod("intruder", "u9", parent, writableAnn(""))
			_, err := e.create(t, pod, Container(pod, "app"))
			if err == nil {
				t.Fatal("a writable container in a shared cgroup parent was not refused")
			}
			for _, want := range []string{"cgroup parent " + strconv.Quote(parent), "not a pod's own cgroup"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
			if got := counter(t, rec, "cgdelegate_refusals_total", "cause", "shared_cgroup"); got != 1 {
				t.Errorf("cgdelegate_refusals_total{cause=shared_cgroup} = %v, want 1", got)
			}
			for _, p := range shared {
				for _, file := range []string{"cgroup.max.descendants", "cgroup.max.depth"} {
					if got, err := e.host.ReadPodFile(p, file); err != nil || got != "max" {
						t.Errorf("%s of %q = %q (%v), want max: the refused container bounded a shared cgroup", file, p, got, err)
					}
				}
			}
			plain := Pod("plain", "u10", parent, nil)
			adj, err := e.create(t, plain, Container(plain, "app"))
			if err != nil {
				t.Fatalf("a container that asked for nothing was refused: %v", err)
			}
			if len(adj.GetMounts()) != 0 || len(adj.GetHooks().GetCreateRuntime()) != 0 || len(adj.GetEnv()) != 0 {
				t.Fatalf("a container that asked for nothing was changed: %v", adj)
			}
		})
	}
}
