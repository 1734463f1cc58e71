package nri

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/advert"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology/topologytest"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
)

func testConfig(t testing.TB) config.Config {
	t.Helper()
	return fakehost.New(t).Config()
}

func TestConfigureBlob(t *testing.T) {
	tests := []struct {
		name      string
		blob      string
		wantErr   []string
		wantGuard config.GuardMode
		wantDepth int
	}{
		{name: "no blob keeps the file config", blob: "", wantGuard: config.GuardEnforce, wantDepth: 7},
		{name: "blob overrides", blob: "guard: warn\nmaxDepth: 3\n", wantGuard: config.GuardWarn, wantDepth: 3},
		{name: "bare off", blob: "guard: off\n", wantGuard: config.GuardOff, wantDepth: 7},
		{name: "bad blob reports every problem", blob: "guard: never\nmaxDescendants: 0\nmaxDepth: -4\n", wantErr: []string{`guard: "never"`, "maxDepth: -4"}},
		{name: "unknown key", blob: "maxDepht: 3\n", wantErr: []string{"maxDepht"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := testConfig(t)
			base.MaxDepth = 7
			p, err := New(base, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			mask, err := p.Configure(context.Background(), tc.blob, "containerd", "v2.4.2")
			if tc.wantErr != nil {
				if err == nil {
					t.Fatal("want an error")
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				if p.Config().MaxDepth != 7 {
					t.Errorf("a rejected blob changed the config: %+v", p.Config())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !mask.IsSet(api.Event_CREATE_CONTAINER) {
				t.Errorf("event mask %s lacks CreateContainer", mask.PrettyString())
			}
			if got := p.Config(); got.Guard != tc.wantGuard || got.MaxDepth != tc.wantDepth {
				t.Fatalf("config after Configure: guard=%s maxDepth=%d", got.Guard, got.MaxDepth)
			}
			if r := advert.New(p, nil).Report(); r.Runtime == nil || r.Runtime.Name != "containerd" || !r.Supported {
				t.Fatalf("report after Configure: %+v", r)
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	c := testConfig(t)
	c.Guard = "sometimes"
	if _, err := New(c, nil); err == nil || !strings.Contains(err.Error(), "sometimes") {
		t.Fatalf("New = %v, want an error naming the bad guard", err)
	}
}

func TestCreateContainerNilGuards(t *testing.T) {
	p, err := New(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	adj, upd, err := p.CreateContainer(context.Background(), nil, nil)
	if adj != nil || upd != nil || err != nil {
		t.Fatalf("nil pod/container: %v %v %v", adj, upd, err)
	}
}

// TestConfigureRebuildsSuspendedPinning: pinning stopped because the
// kubelet's static CPU manager became active resumes only with a rebuilt
// state: a Configure (followed by Synchronize) builds it again, and it
// stays inactive while the kubelet is still static.
func TestConfigureRebuildsSuspendedPinning(t *testing.T) {
	host := fakehost.New(t)
	if err := host.InstallSysfs(topologytest.DualSocketHT().Tree().FS()); err != nil {
		t.Fatal(err)
	}
	cfg := host.Config()
	cfg.CPUPinning = true
	write := func(policyName string) {
		t.Helper()
		if err := os.WriteFile(cfg.KubeletCPUManagerState+".tmp", []byte(`{"policyName":"`+policyName+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfg.KubeletCPUManagerState+".tmp", cfg.KubeletCPUManagerState); err != nil {
			t.Fatal(err)
		}
	}
	write("none")
	p, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	configure := func() api.EventMask {
		t.Helper()
		mask, err := p.Configure(context.Background(), "", "containerd", "v2.4.2")
		if err != nil {
			t.Fatal(err)
		}
		return mask
	}
	write("static")
	if !p.RecheckKubeletState() || p.Pinning().Active {
		t.Fatalf("static: pinning %+v, want suspended", p.Pinning())
	}
	if configure(); p.Pinning().Active || !strings.Contains(p.Pinning().Reason, "static CPU manager is active") {
		t.Fatalf("Configure while static: pinning %+v, want inactive", p.Pinning())
	}
	write("none")
	if mask := configure(); !p.Pinning().Active || !mask.IsSet(api.Event_RUN_POD_SANDBOX) {
		t.Fatalf("Configure after none: pinning %+v, mask %s; want active", p.Pinning(), mask.PrettyString())
	}
}
