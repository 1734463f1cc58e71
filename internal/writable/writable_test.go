package writable

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/refusal"
	"github.com/cgdelegate/cgdelegate/internal/spec"
)

var (
	safe    = host.Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "cgroup2", Version: 2, NsDelegate: true}
	noNsdel = host.Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "cgroup2", Version: 2, SuperOptions: "rw"}
	v1      = host.Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "tmpfs", Version: 1}
)

const parent = "/kubepods/burstable/pod1"

func pod(ann map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "p1", Name: "web", Namespace: "ns", Annotations: ann, Linux: &api.LinuxPodSandbox{CgroupParent: parent}}
}

type ctrOpt func(*api.Container)

func ctr(opts ...ctrOpt) *api.Container {
	c := &api.Container{
		Name: "app",
		Mounts: []*api.Mount{
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		Linux: &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{{Type: "cgroup"}}},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func runtimeWritable(c *api.Container) {
	c.Mounts[1].Options = []string{"nosuid", "noexec", "nodev", "relatime", "rw"}
}

func privileged(c *api.Container) { c.Mounts[0].Options = []string{"nosuid", "noexec", "nodev", "rw"} }
func noCgroupNS(c *api.Container) { c.Linux.Namespaces = nil }
func sharedCgroupNS(c *api.Container) {
	c.Linux.Namespaces = []*api.LinuxNamespace{{Type: "cgroup", Path: "/proc/1/ns/cgroup"}}
}

func hostCgroupBind(c *api.Container) {
	c.Mounts[1] = &api.Mount{Destination: "/sys/fs/cgroup", Type: "bind", Source: "/sys/fs/cgroup", Options: []string{"rbind", "rw"}}
}

func withHook(c *api.Container) {
	c.Hooks = &api.Hooks{CreateRuntime: []*api.Hook{{Path: config.DefaultHookPath}}}
}

func hostOf(st host.Status, err error) Host {
	return HostFunc(func() (host.Status, error) { return st, err })
}

func TestDecide(t *testing.T) {
	w := annotations.WritableCgroups.Name
	writable := map[string]string{w: "true"}
	tests := []struct {
		name    string
		guard   config.GuardMode
		ann     map[string]string
		ctr     *api.Container
		host    Host
		want    Outcome
		addNS   bool
		bounds  host.Bounds
		hook    bool
		warning string
		wantErr []string
		errIs   error
	}{
		{name: "nothing asked", ctr: ctr(), host: hostOf(safe, nil), want: Unchanged},
		{name: "nothing asked, unsafe host is not looked at", ctr: ctr(), host: hostOf(noNsdel, errors.New("must not be called")), want: Unchanged},
		{name: "annotated writable", ann: writable, ctr: ctr(), host: hostOf(safe, nil), want: Writable, bounds: host.Bounds{Descendants: 250, Depth: 50}, hook: true},
		{name: "writable adds a cgroup namespace", ann: writable, ctr: ctr(noCgroupNS), host: hostOf(safe, nil), want: Writable, addNS: true, bounds: host.Bounds{Descendants: 250, Depth: 50}, hook: true},
		{name: "writable keeps a hooks.d hook", ann: writable, ctr: ctr(withHook), host: hostOf(safe, nil), want: Writable, bounds: host.Bounds{Descendants: 250, Depth: 50}},
		{
			name: "annotations lower the bounds", ann: map[string]string{w: "Writable", annotations.MaxDescendants.Name: "100", annotations.MaxDepth.Name: "5"},
			ctr: ctr(), host: hostOf(safe, nil), want: Writable, bounds: host.Bounds{Descendants: 100, Depth: 5}, hook: true,
		},
		{
			name: "annotations never raise the bounds", ann: map[string]string{w: "Writable", annotations.MaxDescendants.Name: "100000"},
			ctr: ctr(), host: hostOf(safe, nil), want: Writable, bounds: host.Bounds{Descendants: 250, Depth: 50}, hook: true,
		},
		{name: "annotated read-only on a runtime-writable mount", ann: map[string]string{w: "ReadOnly"}, ctr: ctr(runtimeWritable), host: hostOf(safe, nil), want: ReadOnly},
		{name: "annotated read-only on a read-only mount", ann: map[string]string{w: "false"}, ctr: ctr(), host: hostOf(safe, nil), want: Unchanged},
		{name: "privileged is left alone", ann: writable, ctr: ctr(privileged), host: hostOf(noNsdel, nil), want: Privileged},
		{name: "guard enforce, safe host", ctr: ctr(runtimeWritable), host: hostOf(safe, nil), want: Guarded, bounds: host.Bounds{Descendants: 250, Depth: 50}, hook: true},
		{name: "guard enforce, unsafe host", ctr: ctr(runtimeWritable), host: hostOf(noNsdel, nil), wantErr: []string{"the runtime", "nsdelegate"}, errIs: host.ErrNoNsdelegate},
		{name: "guard warn, unsafe host", guard: config.GuardWarn, ctr: ctr(runtimeWritable), host: hostOf(noNsdel, nil), want: Unchanged, warning: "nsdelegate"},
		{name: "guard warn, safe host", guard: config.GuardWarn, ctr: ctr(runtimeWritable), host: hostOf(safe, nil), want: Guarded, bounds: host.Bounds{Descendants: 250, Depth: 50}, hook: true},
		{name: "guard off", guard: config.GuardOff, ctr: ctr(runtimeWritable), host: hostOf(noNsdel, nil), want: Unchanged},
		{name: "no nsdelegate", ann: writable, ctr: ctr(), host: hostOf(noNsdel, nil), wantErr: []string{"annotation " + w, "remount"}, errIs: host.ErrNoNsdelegate},
		{name: "cgroup v1", ann: writable, ctr: ctr(), host: hostOf(v1, nil), wantErr: []string{"cgroup v2"}, errIs: host.ErrCgroupV1},
		{name: "mount table unreadable", ann: writable, ctr: ctr(), host: hostOf(host.Status{}, errors.New("open: denied")), wantErr: []string{"host check failed", "denied"}},
		{name: "shared cgroup namespace", ann: writable, ctr: ctr(sharedCgroupNS), host: hostOf(safe, nil), wantErr: []string{"/proc/1/ns/cgroup"}, errIs: spec.ErrNoPrivateCgroupNS},
		{name: "host cgroup bind", ann: writable, ctr: ctr(hostCgroupBind), host: hostOf(safe, nil), errIs: spec.ErrHostCgroupBind},
		{name: "bad annotation", ann: map[string]string{w: "yes"}, ctr: ctr(), host: hostOf(safe, nil), wantErr: []string{w, `"yes"`}, errIs: ErrBadAnnotation},
		{
			name: "bad bounds annotations are all named", ann: map[string]string{w: "true", annotations.MaxDepth.Name: "deep", annotations.MaxDescendants.Name: "-1"},
			ctr: ctr(), host: hostOf(safe, nil), wantErr: []string{annotations.MaxDepth.Name, `"deep"`, annotations.MaxDescendants.Name, `"-1"`}, errIs: ErrBadAnnotation,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			if tc.guard != "" {
				cfg.Guard = tc.guard
			}
			plan, err := New(cfg).Decide(Input{Pod: pod(tc.ann), Ctr: tc.ctr, Host: tc.host})
			if tc.wantErr != nil || tc.errIs != nil {
				if err == nil {
					t.Fatalf("want a refusal, got plan %+v", plan)
				}
				if tc.errIs != nil && !errors.Is(err, tc.errIs) {
					t.Errorf("error %q is not %v", err, tc.errIs)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.Outcome != tc.want {
				t.Fatalf("outcome %s, want %s", plan.Outcome, tc.want)
			}
			if (plan.Warning != nil) != (tc.warning != "") || (plan.Warning != nil && !strings.Contains(plan.Warning.Error(), tc.warning)) {
				t.Errorf("warning %v, want one naming %q", plan.Warning, tc.warning)
			}
			if !plan.Delegates() {
				return
			}
			if plan.PodCgroup != parent || plan.Bounds != tc.bounds || plan.Spec.AddCgroupNS != tc.addNS || (plan.Hook != nil) != tc.hook {
				t.Errorf("plan = podCgroup %q bounds %v addNS %v hook %v", plan.PodCgroup, plan.Bounds, plan.Spec.AddCgroupNS, plan.Hook)
			}
			if plan.Hook != nil {
				want := "cgdelegate-hook --cgroup-root /sys/fs/cgroup --pod-cgroup " + parent + " --max-descendants " +
					strconv.Itoa(tc.bounds.Descendants) + " --max-depth " + strconv.Itoa(tc.bounds.Depth)
				if got := strings.Join(plan.Hook.Args, " "); got != want {
					t.Errorf("hook args %q, want %q", got, want)
				}
			}
		})
	}
}

// An extra check (an opt-in policy) runs first, on annotated and guarded
// containers alike, and its refusal is returned as is.
func TestAdmissionCheck(t *testing.T) {
	errPolicy := errors.New("namespace \"ns\" is not allowed")
	var seen []string
	deny := func(c *Candidate) error {
		seen = append(seen, c.Plan.Reason())
		return errPolicy
	}
	d := New(config.Default(), deny)
	for _, c := range []*api.Container{ctr(), ctr(runtimeWritable)} {
		ann := map[string]string{annotations.WritableCgroups.Name: "true"}
		if c.Mounts[1].Options[len(c.Mounts[1].Options)-1] == "rw" {
			ann = nil
		}
		// The host would refuse too; the policy must answer first.
		_, err := d.Decide(Input{Pod: pod(ann), Ctr: c, Host: hostOf(noNsdel, nil)})
		if !errors.Is(err, errPolicy) || !errors.Is(err, ErrNotAdmitted) || err.Error() != errPolicy.Error() {
			t.Fatalf("err = %v, want the policy's refusal, marked ErrNotAdmitted", err)
		}
	}
	if len(seen) != 2 || !strings.HasPrefix(seen[0], "annotation ") || !strings.HasPrefix(seen[1], "the runtime") {
		t.Fatalf("policy saw %q, want an annotated and a guarded container", seen)
	}
	// Containers that ask for nothing never meet the policy.
	seen = nil
	if _, err := d.Decide(Input{Pod: pod(nil), Ctr: ctr(), Host: hostOf(safe, nil)}); err != nil || len(seen) != 0 {
		t.Fatalf("plain container: err %v, policy calls %d", err, len(seen))
	}
}

// Refusals carry the mark of their kind (ErrNotAdmitted only from an
// admission check, ErrPodBounds for the pod cgroup), with their text as is.
func TestRefusalMarks(t *testing.T) {
	annotated := map[string]string{annotations.WritableCgroups.Name: "true"}
	noParent := pod(annotated)
	noParent.Linux.CgroupParent = ""
	cases := []struct {
		name      string
		pod       *api.PodSandbox
		host      host.Status
		bounds    bool
		admission bool
	}{
		{"host", pod(annotated), noNsdel, false, false},
		{"unknown pod cgroup", noParent, safe, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(config.Default()).Decide(Input{Pod: tc.pod, Ctr: ctr(), Host: hostOf(tc.host, nil)})
			if err == nil {
				t.Fatal("not refused")
			}
			if errors.Is(err, ErrPodBounds) != tc.bounds || errors.Is(err, ErrNotAdmitted) != tc.admission {
				t.Fatalf("err = %v: ErrPodBounds %v (want %v), ErrNotAdmitted %v (want %v)", err,
					errors.Is(err, ErrPodBounds), tc.bounds, errors.Is(err, ErrNotAdmitted), tc.admission)
			}
			if strings.Contains(err.Error(), ErrPodBounds.Error()) {
				t.Fatalf("err = %v: the mark changed the text", err)
			}
		})
	}
	err := BoundsError("/sys/fs/cgroup/pod", parent, host.ErrNotFound)
	if !errors.Is(err, ErrPodBounds) || !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("BoundsError = %v, want ErrPodBounds and the cause", err)
	}
}

func TestAdjustment(t *testing.T) {
	d := New(config.Default())
	plan, err := d.Decide(Input{Pod: pod(map[string]string{annotations.WritableCgroups.Name: "true"}), Ctr: ctr(noCgroupNS), Host: hostOf(safe, nil)})
	if err != nil {
		t.Fatal(err)
	}
	adj := plan.Adjustment()
	var mount *api.Mount
	for _, m := range adj.GetMounts() {
		if m.GetDestination() == spec.CgroupMountPoint && m.GetType() == "cgroup2" {
			mount = m
		}
	}
	if mount == nil || strings.Join(mount.GetOptions(), ",") != "nosuid,noexec,nodev,relatime,rw" {
		t.Errorf("mounts %v: want a rw cgroup2 mount at /sys/fs/cgroup", adj.GetMounts())
	}
	if ns := adj.GetLinux().GetNamespaces(); len(ns) != 1 || ns[0].GetType() != "cgroup" || ns[0].GetPath() != "" {
		t.Errorf("namespaces %v: want a new cgroup namespace", ns)
	}
	if h := adj.GetHooks().GetCreateRuntime(); len(h) != 1 || h[0].GetPath() != config.DefaultHookPath {
		t.Errorf("hooks %v: want cgdelegate-hook at createRuntime", h)
	}

	plan, err = d.Decide(Input{Pod: pod(map[string]string{annotations.WritableCgroups.Name: "ReadOnly"}), Ctr: ctr(runtimeWritable), Host: hostOf(safe, nil)})
	if err != nil {
		t.Fatal(err)
	}
	adj = plan.Adjustment()
	if ms := adj.GetMounts(); len(ms) != 2 || ms[1].GetOptions()[len(ms[1].GetOptions())-1] != "ro" {
		t.Errorf("read-only adjustment mounts %v", ms)
	}
	if (&Plan{}).Adjustment() != nil {
		t.Error("an unchanged plan must give no adjustment")
	}
}

// Every plan builds its own adjustment, which the caller may add to (CPU
// pinning does), and every pod its own hook.
func TestAdjustmentIsOwn(t *testing.T) {
	d := New(config.Default())
	ann := map[string]string{annotations.WritableCgroups.Name: "true"}
	decide := func(p *api.PodSandbox, c *api.Container) *Plan {
		t.Helper()
		plan, err := d.Decide(Input{Pod: p, Ctr: c, Host: hostOf(safe, nil)})
		if err != nil {
			t.Fatal(err)
		}
		return &plan
	}
	a := decide(pod(ann), ctr())
	own := a.Adjustment()
	own.SetLinuxCPUSetCPUs("0-1")
	if a.Adjustment().GetLinux().GetResources() != nil {
		t.Fatal("adding to one Adjustment changed the next")
	}
	other := pod(ann)
	other.Linux.CgroupParent = "/kubepods/burstable/pod2"
	if o := decide(other, ctr()); !strings.Contains(strings.Join(o.Hook.Args, " "), "pod2") {
		t.Error("another pod needs its own hook")
	}
}

// A writable container's adjustment carries its pod's bounds as env vars,
// as env vars.
func TestBoundsEnv(t *testing.T) {
	w := annotations.WritableCgroups.Name
	tests := []struct {
		name            string
		ann             map[string]string
		wantDesc, wantD string
	}{
		{"node caps", map[string]string{w: "true"}, strconv.Itoa(config.Default().MaxDescendants), strconv.Itoa(config.Default().MaxDepth)},
		{"lowered by annotations", map[string]string{w: "true", annotations.MaxDescendants.Name: "100", annotations.MaxDepth.Name: "5"}, "100", "5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := New(config.Default()).Decide(Input{Pod: pod(tc.ann), Ctr: ctr(), Host: hostOf(safe, nil)})
			if err != nil {
				t.Fatal(err)
			}
			for _, adj := range []*api.ContainerAdjustment{plan.Adjustment()} {
				got := map[string]string{}
				for _, kv := range adj.GetEnv() {
					got[kv.GetKey()] = kv.GetValue()
				}
				want := map[string]string{EnvMaxDescendants: tc.wantDesc, EnvMaxDepth: tc.wantD}
				if len(got) != 2 || got[EnvMaxDescendants] != want[EnvMaxDescendants] || got[EnvMaxDepth] != want[EnvMaxDepth] {
					t.Errorf("adjustment env = %v, want %v", got, want)
				}
			}
		})
	}
	if got := boundValue(host.Unlimited); got != "max" {
		t.Errorf("boundValue(Unlimited) = %q, want max", got)
	}
}

// Building a writable adjustment, env included, is one allocation (a spec
// that already has a cgroup namespace needs none added).
func TestWritableAdjustmentAllocs(t *testing.T) {
	plan, err := New(config.Default()).Decide(Input{Pod: pod(map[string]string{annotations.WritableCgroups.Name: "true"}), Ctr: ctr(), Host: hostOf(safe, nil)})
	if err != nil {
		t.Fatal(err)
	}
	plan.Bounds = host.Bounds{Descendants: 50, Depth: 5} // small numbers: formatting them allocates nothing
	if n := testing.AllocsPerRun(100, func() { _ = plan.writableAdjustment() }); n != 1 {
		t.Errorf("writableAdjustment allocates %v times, want 1", n)
	}
}

// Every refusal carries the cause of the decision that made it, read with
// refusal.CauseOf (the cause label of cgdelegate_refusals_total).
func TestRefusalCauses(t *testing.T) {
	w := annotations.WritableCgroups.Name
	annotated := map[string]string{w: "true"}
	noParent := pod(annotated)
	noParent.Linux.CgroupParent = ""
	nodeRoot := pod(annotated)
	nodeRoot.Linux.CgroupParent = "/"
	deny := func(*Candidate) error { return errors.New("namespace not allowed") }
	denyOnBadAnnotation := func(c *Candidate) error {
		_, err := PodBound(c.Pod, annotations.MaxDepth, 5)
		return err
	}
	cases := []struct {
		name  string
		pod   *api.PodSandbox
		ctr   *api.Container
		host  Host
		check Check
		want  refusal.Cause
	}{
		{"admission", pod(annotated), ctr(), hostOf(safe, nil), deny, refusal.Policy},
		{"admission reading a bad annotation", pod(map[string]string{w: "true", annotations.MaxDepth.Name: "deep"}), ctr(), hostOf(safe, nil), denyOnBadAnnotation, refusal.Policy},
		{"cgroup mode annotation", pod(map[string]string{w: "yes"}), ctr(), hostOf(safe, nil), nil, refusal.BadAnnotation},
		{"bounds annotation", pod(map[string]string{w: "true", annotations.MaxDepth.Name: "deep"}), ctr(), hostOf(safe, nil), nil, refusal.BadAnnotation},
		{"cgroup v1", pod(annotated), ctr(), hostOf(v1, nil), nil, refusal.CgroupV1},
		{"nothing mounted", pod(annotated), ctr(), hostOf(host.Status{CgroupRoot: "/sys/fs/cgroup"}, nil), nil, refusal.CgroupV1},
		{"no nsdelegate", pod(annotated), ctr(), hostOf(noNsdel, nil), nil, refusal.NoNsdelegate},
		{"shared cgroup namespace", pod(annotated), ctr(sharedCgroupNS), hostOf(safe, nil), nil, refusal.NoCgroupNS},
		{"host cgroup bind", pod(annotated), ctr(hostCgroupBind), hostOf(safe, nil), nil, refusal.NoCgroupNS},
		{"unknown pod cgroup", noParent, ctr(), hostOf(safe, nil), nil, refusal.PodBounds},
		{"pod cgroup is the cgroup root", nodeRoot, ctr(), hostOf(safe, nil), nil, refusal.SharedCgroup},
		{"mount table unreadable", pod(annotated), ctr(), hostOf(host.Status{}, errors.New("open: denied")), nil, refusal.Other},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var extra []Check
			if tc.check != nil {
				extra = append(extra, tc.check)
			}
			_, err := New(config.Default(), extra...).Decide(Input{Pod: tc.pod, Ctr: tc.ctr, Host: tc.host})
			if err == nil {
				t.Fatal("not refused")
			}
			if got := refusal.CauseOf(err); got != tc.want {
				t.Fatalf("CauseOf(%v) = %q, want %q", err, got, tc.want)
			}
		})
	}
	if got := refusal.CauseOf(BoundsError("/sys/fs/cgroup/pod", parent, host.ErrNotFound)); got != refusal.PodBounds {
		t.Fatalf("BoundsError cause %q, want %q", got, refusal.PodBounds)
	}
}

// TestSharedPodCgroup: a cgroup parent that is not the pod's own refuses a
// container that asked for writable cgroups (or was given them by the
// runtime), naming the parent, before any bounds are planned; a container
// that asked for nothing is left alone whatever the parent.
func TestSharedPodCgroup(t *testing.T) {
	for _, parent := range []string{"/", "kubepods.slice", "/kubepods", "/kubepods/burstable", "kubepods-besteffort.slice", "system.slice", "/system.slice/containerd.service"} {
		t.Run(parent, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				ann  map[string]string
				opts []ctrOpt
			}{
				{"annotated", map[string]string{annotations.WritableCgroups.Name: "true"}, nil},
				{"guarded", nil, []ctrOpt{runtimeWritable}},
			} {
				p := pod(tc.ann)
				p.Linux.CgroupParent = parent
				plan, err := New(config.Default()).Decide(Input{Pod: p, Ctr: ctr(tc.opts...), Host: hostOf(safe, nil)})
				if !errors.Is(err, host.ErrSharedCgroup) || refusal.CauseOf(err) != refusal.SharedCgroup {
					t.Fatalf("%s: Decide = %+v, %v; want a shared_cgroup refusal", tc.name, plan, err)
				}
				if !strings.Contains(err.Error(), strconv.Quote(parent)) {
					t.Errorf("%s: refusal %q does not name the cgroup parent %q", tc.name, err, parent)
				}
			}
			p := pod(nil)
			p.Linux.CgroupParent = parent
			plan, err := New(config.Default()).Decide(Input{Pod: p, Ctr: ctr(), Host: hostOf(safe, nil)})
			if err != nil || plan.Outcome != Unchanged || plan.Adjustment() != nil {
				t.Fatalf("a container that asked for nothing: %+v, %v; want it unchanged", plan, err)
			}
		})
	}
}

func TestEnvBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		n    int
		ok   bool
	}{
		{"absent", []string{"PATH=/bin"}, 0, false},
		{"a count", []string{"PATH=/bin", EnvMaxDescendants + "=12"}, 12, true},
		{"max", []string{EnvMaxDescendants + "=max"}, host.Unlimited, true},
		{"not a count", []string{EnvMaxDescendants + "=twelve"}, 0, false},
		{"negative", []string{EnvMaxDescendants + "=-3"}, 0, false},
		{"the lowest of several", []string{EnvMaxDescendants + "=40", EnvMaxDescendants + "=max", EnvMaxDescendants + "=12"}, 12, true},
		{"a prefix of another name", []string{EnvMaxDescendants + "X=3"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, ok := EnvBound(&api.Container{Env: tc.env})
			if n != tc.n || ok != tc.ok {
				t.Errorf("EnvBound(%q) = %d, %v; want %d, %v", tc.env, n, ok, tc.n, tc.ok)
			}
		})
	}
}
