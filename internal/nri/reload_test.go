package nri

import (
	"context"
	"errors"
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
		{name: "pinning changed", mutate: func(c *config.Config) { c.CPUPinning = true }, wantErr: "CPU pinning settings"},
		{name: "reservedMemory changed", mutate: func(c *config.Config) { c.ReservedMemory = "0:memory=1Gi" }, wantErr: "reservedMemory"},
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
