package writable

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
)

// applied is c as the runtime creates it with adj: removed mounts gone,
// added mounts in place, hooks appended.
func applied(c *api.Container, adj *api.ContainerAdjustment) *api.Container {
	out := &api.Container{Id: c.Id, PodSandboxId: c.PodSandboxId, Name: c.Name, State: c.State, Annotations: c.Annotations, Linux: c.Linux, Hooks: c.Hooks}
	removed := map[string]bool{}
	for _, m := range adj.GetMounts() {
		if d, ok := api.IsMarkedForRemoval(m.GetDestination()); ok {
			removed[d] = true
		}
	}
	for _, m := range c.Mounts {
		if !removed[m.Destination] {
			out.Mounts = append(out.Mounts, m)
		}
	}
	for _, m := range adj.GetMounts() {
		if _, ok := api.IsMarkedForRemoval(m.GetDestination()); !ok {
			kept := out.Mounts[:0]
			for _, o := range out.Mounts {
				if o.Destination != m.Destination {
					kept = append(kept, o)
				}
			}
			out.Mounts = append(kept, m)
		}
	}
	if h := adj.GetHooks(); h != nil {
		out.Hooks = &api.Hooks{CreateRuntime: append(append([]*api.Hook(nil), c.GetHooks().GetCreateRuntime()...), h.CreateRuntime...)}
	}
	return out
}

func TestAudit(t *testing.T) {
	w := annotations.WritableCgroups.Name
	tests := []struct {
		name  string
		guard config.GuardMode
		ann   map[string]string
		ctr   *api.Container
		// missed: what a container created without cgdelegate is told
		// (empty: nothing); created through cgdelegate it is never told.
		missed []string
	}{
		{name: "nothing asked", ctr: ctr()},
		{name: "writable, read-only without cgdelegate", ann: map[string]string{w: "true"}, ctr: ctr(), missed: []string{"asked for writable", w, "read-only /sys/fs/cgroup", "recreate"}},
		{name: "writable on a runtime-writable mount", ann: map[string]string{w: "true"}, ctr: ctr(runtimeWritable), missed: []string{"asked for writable", "without cgdelegate's pod bounds or hook"}},
		{name: "writable with a hooks.d hook", ann: map[string]string{w: "true"}, ctr: ctr(withHook)},
		{name: "read-only asked, runtime-writable", ann: map[string]string{w: "ReadOnly"}, ctr: ctr(runtimeWritable), missed: []string{"asked for read-only", "runtime's read-write"}},
		{name: "read-only asked, read-only mount", ann: map[string]string{w: "ReadOnly"}, ctr: ctr()},
		{name: "guard enforce, runtime-writable", ctr: ctr(runtimeWritable), missed: []string{"unchecked by the guard"}},
		{name: "guard warn, runtime-writable", guard: config.GuardWarn, ctr: ctr(runtimeWritable)},
		{name: "guard off, runtime-writable", guard: config.GuardOff, ctr: ctr(runtimeWritable)},
		{name: "privileged", ann: map[string]string{w: "true"}, ctr: ctr(privileged)},
		{name: "bad annotation was refused at create", ann: map[string]string{w: "yes"}, ctr: ctr()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			if tc.guard != "" {
				cfg.Guard = tc.guard
			}
			d := New(cfg)
			p := pod(tc.ann)
			tc.ctr.PodSandboxId, tc.ctr.State = p.Id, api.ContainerState_CONTAINER_RUNNING
			audit := func(c *api.Container) []error {
				var got []error
				d.Audit([]*api.PodSandbox{p}, []*api.Container{c}, func(rp *api.PodSandbox, rc *api.Container, err error) {
					if rp != p || rc != c {
						t.Errorf("reported pod %v container %v, want the audited ones", rp, rc)
					}
					got = append(got, err)
				})
				return got
			}
			got := audit(tc.ctr)
			switch {
			case tc.missed == nil && len(got) > 0:
				t.Fatalf("created without cgdelegate: reported %v, want nothing", got)
			case tc.missed != nil && len(got) != 1:
				t.Fatalf("created without cgdelegate: reported %v, want one report", got)
			case tc.missed != nil:
				if !errors.Is(got[0], ErrMissed) {
					t.Errorf("%v is not ErrMissed", got[0])
				}
				for _, s := range tc.missed {
					if !strings.Contains(got[0].Error(), s) {
						t.Errorf("%q does not say %q", got[0], s)
					}
				}
			}
			// The same container created through cgdelegate: never told.
			plan, err := d.Decide(Input{Pod: p, Ctr: tc.ctr, Host: hostOf(safe, nil)})
			if err != nil {
				return // refused at create: it never ran
			}
			if adj := plan.Adjustment(); adj != nil {
				if got := audit(applied(tc.ctr, adj)); len(got) > 0 {
					t.Errorf("created through cgdelegate: reported %v", got)
				}
			} else if tc.missed != nil {
				t.Errorf("cgdelegate makes no change, yet the audit reports the unchanged container")
			}
		})
	}
}

func TestAuditSkipsStoppedAndEmpty(t *testing.T) {
	d := New(config.Default())
	p := pod(map[string]string{annotations.WritableCgroups.Name: "true"})
	c := ctr()
	c.PodSandboxId, c.State = p.Id, api.ContainerState_CONTAINER_STOPPED
	d.Audit([]*api.PodSandbox{p}, []*api.Container{c}, func(*api.PodSandbox, *api.Container, error) {
		t.Error("a stopped container was reported")
	})
	d.Audit(nil, nil, func(*api.PodSandbox, *api.Container, error) { t.Error("reported with no containers") })
}
