package writable_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

const (
	runc = "runc"
	kata = "kata"
)

type podOpt func(*api.PodSandbox)

func handler(h string) podOpt { return func(p *api.PodSandbox) { p.RuntimeHandler = h } }

// userNS is a hostUsers: false pod as containerd 2.x reports it: the
// sandbox has a user namespace of its own.
func userNS(p *api.PodSandbox) {
	p.Linux.Namespaces = append(p.Linux.Namespaces, &api.LinuxNamespace{Type: "user", Path: "/proc/42/ns/user"})
}

func pod(ns string, ann map[string]string, opts ...podOpt) *api.PodSandbox {
	p := &api.PodSandbox{
		Id: "p1", Name: "web", Namespace: ns, RuntimeHandler: runc, Annotations: ann,
		Linux: &api.LinuxPodSandbox{
			CgroupParent: "/kubepods/burstable/pod1",
			Namespaces:   []*api.LinuxNamespace{{Type: "network", Path: "/var/run/netns/cni-1"}, {Type: "ipc"}, {Type: "uts"}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// ctr is a container as containerd builds it; rw makes its cgroup mount
// read-write, as cgroup_writable = true does.
func ctr(rw bool, namespaces ...*api.LinuxNamespace) *api.Container {
	opt := "ro"
	if rw {
		opt = "rw"
	}
	return &api.Container{
		Name: "app",
		Mounts: []*api.Mount{
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", opt}},
		},
		Linux: &api.LinuxContainer{Namespaces: append([]*api.LinuxNamespace{{Type: "cgroup"}}, namespaces...)},
	}
}

var safe = writable.HostFunc(func() (host.Status, error) {
	return host.Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "cgroup2", Version: 2, NsDelegate: true}, nil
})

func TestOptInPolicyEmpty(t *testing.T) {
	if writable.OptInPolicy(config.Default()) != nil {
		t.Fatal("the default config has no policy, want a nil check")
	}
	cfg := config.Default()
	cfg.OptIn.Namespaces = []string{}
	if writable.OptInPolicy(cfg) != nil {
		t.Fatal("an empty namespace list allows every namespace, want a nil check")
	}
}

// TestPolicy runs every rule through the real decision, for a container
// that asks by annotation and for one the runtime made writable (guard):
// both are judged the same.
func TestPolicy(t *testing.T) {
	writableAnn := map[string]string{annotations.WritableCgroups.Name: "true"}
	tests := []struct {
		name    string
		optIn   config.OptIn
		pod     *api.PodSandbox
		ctrNS   []*api.LinuxNamespace
		wantErr string
	}{
		{name: "no rules", pod: pod("default", nil)},
		{name: "namespace listed", optIn: config.OptIn{Namespaces: []string{"ml"}}, pod: pod("ml", nil)},
		{name: "namespace glob", optIn: config.OptIn{Namespaces: []string{"team-*", "ml"}}, pod: pod("team-a", nil)},
		{name: "namespace character class", optIn: config.OptIn{Namespaces: []string{"team-[ab]"}}, pod: pod("team-b", nil)},
		{
			name: "namespace not listed", optIn: config.OptIn{Namespaces: []string{"team-*"}}, pod: pod("default", nil),
			wantErr: `namespace "default" is not in optIn.namespaces ["team-*"]`,
		},
		{
			name: "glob does not cross the whole name", optIn: config.OptIn{Namespaces: []string{"team-*", "ml"}}, pod: pod("ml-prod", nil),
			wantErr: `namespace "ml-prod" is not in optIn.namespaces ["team-*", "ml"]`,
		},
		{
			name: "glob is anchored", optIn: config.OptIn{Namespaces: []string{"team-*"}}, pod: pod("my-team-a", nil),
			wantErr: `namespace "my-team-a" is not in optIn.namespaces ["team-*"]`,
		},
		{name: "handler listed", optIn: config.OptIn{RuntimeHandlers: []string{runc}}, pod: pod("default", nil)},
		{name: "handler glob", optIn: config.OptIn{RuntimeHandlers: []string{"kata-*"}}, pod: pod("default", nil, handler("kata-qemu"))},
		{name: "default handler listed as empty", optIn: config.OptIn{RuntimeHandlers: []string{"", runc}}, pod: pod("default", nil, handler(""))},
		{
			name: "handler not listed", optIn: config.OptIn{RuntimeHandlers: []string{runc}}, pod: pod("default", nil, handler(kata)),
			wantErr: `runtime handler "kata" is not in optIn.runtimeHandlers ["runc"]`,
		},
		{
			name: "empty handler not listed", optIn: config.OptIn{RuntimeHandlers: []string{runc}}, pod: pod("default", nil, handler("")),
			wantErr: `runtime handler "" is not in optIn.runtimeHandlers ["runc"]`,
		},
		{name: "user namespace on the pod", optIn: config.OptIn{RequireUserNamespace: true}, pod: pod("default", nil, userNS)},
		{
			name: "user namespace on the container", optIn: config.OptIn{RequireUserNamespace: true}, pod: pod("default", nil),
			ctrNS: []*api.LinuxNamespace{{Type: "user", Path: "/proc/42/ns/user"}},
		},
		{
			name: "no user namespace", optIn: config.OptIn{RequireUserNamespace: true}, pod: pod("default", nil),
			wantErr: "the pod is not in a user namespace (hostUsers: false) and optIn.requireUserNamespace is true",
		},
		{
			name:  "every rule passes",
			optIn: config.OptIn{Namespaces: []string{"team-*"}, RuntimeHandlers: []string{runc}, RequireUserNamespace: true},
			pod:   pod("team-a", nil, userNS),
		},
		{
			name:    "first failing rule is named",
			optIn:   config.OptIn{Namespaces: []string{"team-*"}, RuntimeHandlers: []string{runc}, RequireUserNamespace: true},
			pod:     pod("team-a", nil, handler(kata)),
			wantErr: `runtime handler "kata" is not in optIn.runtimeHandlers ["runc"]`,
		},
	}
	for _, tc := range tests {
		for _, mode := range []struct {
			name   string
			ann    map[string]string
			rw     bool
			reason string
			want   writable.Outcome
		}{
			{"annotated", writableAnn, false, "annotation " + annotations.WritableCgroups.Name, writable.Writable},
			{"guarded", nil, true, "the runtime", writable.Guarded},
		} {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				cfg := config.Default()
				cfg.OptIn = tc.optIn
				if err := cfg.Validate(); err != nil {
					t.Fatal(err)
				}
				var checks []writable.Check
				if c := writable.OptInPolicy(cfg); c != nil {
					checks = append(checks, c)
				}
				p := tc.pod
				p.Annotations = mode.ann
				plan, err := writable.New(cfg, checks...).Decide(writable.Input{Pod: p, Ctr: ctr(mode.rw, tc.ctrNS...), Host: safe})
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					if plan.Outcome != mode.want {
						t.Fatalf("Outcome = %v, want %v", plan.Outcome, mode.want)
					}
					return
				}
				if !errors.Is(err, config.ErrNotAllowed) {
					t.Fatalf("err = %v, want config.ErrNotAllowed", err)
				}
				for _, want := range []string{tc.wantErr, mode.reason} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not mention %q", err, want)
					}
				}
			})
		}
	}
}

// TestPolicyLeavesOthersAlone: a pod that asks for nothing, or for
// read-only cgroups, is not judged.
func TestPolicyLeavesOthersAlone(t *testing.T) {
	cfg := config.Default()
	cfg.OptIn = config.OptIn{Namespaces: []string{"team-*"}, RequireUserNamespace: true}
	d := writable.New(cfg, writable.OptInPolicy(cfg))
	for _, ann := range []map[string]string{nil, {annotations.WritableCgroups.Name: "false"}} {
		plan, err := d.Decide(writable.Input{Pod: pod("default", ann), Ctr: ctr(false), Host: safe})
		if err != nil || plan.Delegates() {
			t.Fatalf("annotations %v: plan %v, err %v; want left alone", ann, plan.Outcome, err)
		}
	}
}
