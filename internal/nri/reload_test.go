package nri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// nsPolicy is a WithAdmission rule: only the namespaces in optIn.namespaces,
// matched exactly (the real globs are internal/config's (admission.go)).
func nsPolicy(cfg config.Config) writable.Check {
	if len(cfg.OptIn.Namespaces) == 0 {
		return nil
	}
	return func(c *writable.Candidate) error {
		for _, ns := range cfg.OptIn.Namespaces {
			if c.Pod.GetNamespace() == ns {
				return nil
			}
		}
		return errors.New("namespace " + c.Pod.GetNamespace() + " not allowed")
	}
}

// TestPolicyFollowsConfig: a WithAdmission rule is rebuilt from the config in
// force: the file, a Configure blob over it, a reloaded file under the blob.
func TestPolicyFollowsConfig(t *testing.T) {
	h := fakehost.New(t)
	base := h.Config()
	base.OptIn.Namespaces = []string{"team-a"}
	var configured int
	p, err := New(base, nil, WithAdmission(nsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	p.OnConfigured(func() { configured++ })
	ctx := context.Background()
	pod := testPod(t, h, map[string]string{annotations.WritableCgroups.Name: "true"}) // namespace team-a
	create := func() error {
		_, _, err := p.CreateContainer(ctx, pod, testContainer())
		return err
	}
	if err := create(); err != nil {
		t.Fatalf("file config allows team-a: %v", err)
	}
	if _, err := p.Configure(ctx, "optIn: {namespaces: [ml]}\nmaxDepth: 9\n", "containerd", "v2.4.2"); err != nil {
		t.Fatal(err)
	}
	if err := create(); err == nil || !strings.Contains(err.Error(), "namespace team-a not allowed") {
		t.Fatalf("blob allows only ml, got %v", err)
	}

	// The file now allows every namespace, but the blob still says ml.
	reloaded := h.Config()
	reloaded.Guard = config.GuardWarn
	if err := p.Reload(reloaded); err != nil {
		t.Fatal(err)
	}
	if got := p.Config(); got.Guard != config.GuardWarn || got.MaxDepth != 9 || len(got.OptIn.Namespaces) != 1 {
		t.Fatalf("reload lost the file or the blob: %+v", got)
	}
	if err := create(); err == nil {
		t.Fatal("reload dropped the blob's optIn")
	}

	// A blob without optIn: the reloaded file's (empty) policy holds.
	if _, err := p.Configure(ctx, "", "containerd", "v2.4.2"); err != nil {
		t.Fatal(err)
	}
	if err := create(); err != nil {
		t.Fatalf("no policy left: %v", err)
	}
	if configured != 3 {
		t.Errorf("OnConfigured ran %d times, want 3 (Configure, Reload, Configure)", configured)
	}
}

func TestReloadRefused(t *testing.T) {
	tests := []struct {
		name    string
		blob    string
		mutate  func(*config.Config)
		wantErr string
	}{
		{name: "invalid file config", mutate: func(c *config.Config) { c.MaxDepth = 0 }, wantErr: "maxDepth: 0 must be at least 1"},
		{name: "bad pattern", mutate: func(c *config.Config) { c.OptIn.Namespaces = []string{"team-["} }, wantErr: `optIn.namespaces: "team-["`},
		{name: "blob no longer valid over the new file", blob: "maxDepth: 3\n", mutate: func(c *config.Config) { c.HookPath = "relative" }, wantErr: `hookPath: "relative"`},
		{name: "pinning changed", mutate: func(c *config.Config) { c.CPUPinning = true }, wantErr: "cpuPinning: false in force, true asked"},
		{name: "reservedMemory changed", mutate: func(c *config.Config) { c.ReservedMemory = "0:memory=1Gi" }, wantErr: `reservedMemory: "" in force, "0:memory=1Gi" asked`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := fakehost.New(t)
			var configured int
			p, err := New(h.Config(), nil)
			if err != nil {
				t.Fatal(err)
			}
			p.OnConfigured(func() { configured++ })
			if _, err := p.Configure(context.Background(), tc.blob, "containerd", "v2.4.2"); err != nil {
				t.Fatal(err)
			}
			before := p.Config()
			next := h.Config()
			tc.mutate(&next)
			err = p.Reload(next)
			if !errors.Is(err, ErrReload) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Reload = %v, want ErrReload naming %q", err, tc.wantErr)
			}
			if got := p.Config(); got.MaxDepth != before.MaxDepth || got.HookPath != before.HookPath || got.CPUPinning || len(got.OptIn.Namespaces) != 0 ||
				got.ReservedMemory != "" {
				t.Fatalf("config changed by a refused reload: %+v", got)
			}
			if configured != 1 {
				t.Errorf("OnConfigured ran %d times, want 1 (Configure only)", configured)
			}
			// The old config still decides.
			pod := testPod(t, h, map[string]string{annotations.WritableCgroups.Name: "true"})
			if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Id: "c1", Name: "app"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReloadEveryKey changes each key of the config alone in a reload: a
// key of the reloadable part is put in force, a key that needs a restart
// (config.RestartKeys) is refused with ErrNeedsRestart naming the key, its
// value in force and the value asked, and the config in force stays. A key
// without a change here fails the test, so a new key gets one.
func TestReloadEveryKey(t *testing.T) {
	change := map[string]func(*config.Config){
		"cgroupRoot":                   func(c *config.Config) { c.CgroupRoot = "/elsewhere/cgroup" },
		"mountinfoPath":                func(c *config.Config) { c.MountinfoPath = "/elsewhere/mountinfo" },
		"procRoot":                     func(c *config.Config) { c.ProcRoot = "/elsewhere/proc" },
		"hookPath":                     func(c *config.Config) { c.HookPath = "/elsewhere/hook" },
		"hookTimeout":                  func(c *config.Config) { c.HookTimeout = 7 },
		"guard":                        func(c *config.Config) { c.Guard = config.GuardWarn },
		"maxDescendants":               func(c *config.Config) { c.MaxDescendants = 7 },
		"maxDepth":                     func(c *config.Config) { c.MaxDepth = 7 },
		"nodeMaxDelegatedCgroups":      func(c *config.Config) { c.NodeMaxDelegatedCgroups = 7 },
		"featureFile":                  func(c *config.Config) { c.FeatureFile = config.Disabled },
		"statusFile":                   func(c *config.Config) { c.StatusFile = config.Disabled },
		"optIn":                        func(c *config.Config) { c.OptIn.RequireUserNamespace = true },
		"containerdConfig":             func(c *config.Config) { c.ContainerdConfig = "/elsewhere/config.toml" },
		"crioConfig":                   func(c *config.Config) { c.CRIOConfig = "/elsewhere/crio.conf" },
		"crioConfigDir":                func(c *config.Config) { c.CRIOConfigDir = "/elsewhere/crio.conf.d" },
		"cpuPinning":                   func(c *config.Config) { c.CPUPinning = true },
		"topologyScope":                func(c *config.Config) { c.TopologyScope = config.ScopeContainer },
		"reservedCPUs":                 func(c *config.Config) { c.ReservedCPUs = "0" },
		"strictCPUReservation":         func(c *config.Config) { c.StrictCPUReservation = true },
		"reservedMemory":               func(c *config.Config) { c.ReservedMemory = "0:memory=1Gi" },
		"sysfsRoot":                    func(c *config.Config) { c.SysfsRoot = "/elsewhere/sys" },
		"kubeletCPUManagerState":       func(c *config.Config) { c.KubeletCPUManagerState = "/elsewhere/cpu_manager_state" },
		"allowKubeletStaticCPUManager": func(c *config.Config) { c.AllowKubeletStaticCPUManager = true },
		"metricsAddress":               func(c *config.Config) { c.MetricsAddress = "127.0.0.1:9767" },
		// profiling needs a metrics address; the file that turns it on sets
		// both, and both are named.
		"profiling":         func(c *config.Config) { c.MetricsAddress, c.Profiling = "127.0.0.1:9767", true },
		"nodeLabel":         func(c *config.Config) { c.NodeLabel = config.NodeLabelOff },
		"podEvents":         func(c *config.Config) { c.PodEvents = config.NodeLabelOff },
		"serviceAccountDir": func(c *config.Config) { c.ServiceAccountDir = "/elsewhere/sa" },
	}
	for _, k := range config.Keys() {
		t.Run(k.Name, func(t *testing.T) {
			mutate, ok := change[k.Name]
			if !ok {
				t.Fatalf("no change for key %s in this test", k.Name)
			}
			h := fakehost.New(t)
			p, err := New(h.Config(), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Configure(context.Background(), "", "containerd", "v2.4.2"); err != nil {
				t.Fatal(err)
			}
			before := p.Config()
			next := h.Config()
			mutate(&next)
			changed := config.Changes(before, next, k.Part)
			if len(changed) == 0 || changed[len(changed)-1].Key != k.Name {
				t.Fatalf("the change of %s is not seen: %v", k.Name, changed)
			}
			err = p.Reload(next)
			if !k.Part.NeedsRestart() {
				if err != nil {
					t.Fatalf("Reload of reloadable key %s: %v", k.Name, err)
				}
				if got := p.Config(); !reflect.DeepEqual(got, next) {
					t.Fatalf("reload of %s not in force:\n got %+v\nwant %+v", k.Name, got, next)
				}
				if got := p.RestartPending(); got != nil {
					t.Fatalf("RestartPending after a reload of %s = %v, want none", k.Name, got)
				}
				return
			}
			if !errors.Is(err, ErrReload) || !errors.Is(err, config.ErrNeedsRestart) {
				t.Fatalf("Reload = %v, want ErrReload and config.ErrNeedsRestart", err)
			}
			c := changed[len(changed)-1]
			if want := fmt.Sprintf("%s: %s in force, %s asked", k.Name, c.Old, c.New); !strings.Contains(err.Error(), want) {
				t.Fatalf("Reload = %v, want it to name %q", err, want)
			}
			if got := p.Config(); !reflect.DeepEqual(got, before) {
				t.Fatalf("config changed by a refused reload:\n got %+v\nwant %+v", got, before)
			}
			// The change waits for a restart, for `cgdelegate status`;
			// putting the file back clears it.
			if got := p.RestartPending(); !slices.Contains(got, c) {
				t.Fatalf("RestartPending = %v, want it to hold %v", got, c)
			}
			if err := p.Reload(h.Config()); err != nil {
				t.Fatal(err)
			}
			if got := p.RestartPending(); got != nil {
				t.Fatalf("RestartPending after the file was put back = %v, want none", got)
			}
		})
	}
}

// TestConfigureStartOnlyKey: a start-only key in the runtime's blob is
// logged, naming the key and both values, and the file's value stays in
// force, so a later reload of the unchanged file is not refused.
func TestConfigureStartOnlyKey(t *testing.T) {
	h := fakehost.New(t)
	var logs bytes.Buffer
	p, err := New(h.Config(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Configure(context.Background(), "metricsAddress: 127.0.0.1:9767\nmaxDepth: 9\n", "containerd", "v2.4.2"); err != nil {
		t.Fatal(err)
	}
	if got := p.Config(); got.MetricsAddress != "" || got.MaxDepth != 9 {
		t.Fatalf("config in force: metricsAddress %q (want the file's \"\"), maxDepth %d (want the blob's 9)", got.MetricsAddress, got.MaxDepth)
	}
	if want := `key=metricsAddress inForce="\"\"" runtimeValue="\"127.0.0.1:9767\""`; !strings.Contains(logs.String(), want) {
		t.Fatalf("log %q does not contain %q", logs.String(), want)
	}
	if err := p.Reload(h.Config()); err != nil {
		t.Fatalf("reload of the unchanged file: %v", err)
	}
}
