package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/contrib"
	"github.com/cgdelegate/cgdelegate/internal/config"
)

// fakeSystemd is a systemd with one active unit started at since.
type fakeSystemd struct {
	active   string
	since    time.Time
	restarts []string
}

func (f *fakeSystemd) Active(_ context.Context, units ...string) (string, error) {
	if slices.Contains(units, f.active) {
		return f.active, nil
	}
	return "", nil
}

func (f *fakeSystemd) ActiveSince(context.Context, string) (time.Time, error) { return f.since, nil }

func (f *fakeSystemd) Restart(_ context.Context, unit string) error {
	f.restarts = append(f.restarts, unit)
	f.since = time.Now().Add(time.Second)
	return nil
}
func (f *fakeSystemd) Close() {}

// install-nri-config writes the runtime's drop-in (the embedded text),
// checks the runtime reads it as the plugin would (the same reader), and
// restarts the runtime only when it runs without it: a second run changes
// nothing and restarts nothing.
func TestInstallNRIConfig(t *testing.T) {
	const (
		importConfD  = "version = 3\nimports = [\"conf.d/*.toml\"]\n"
		noImport     = "version = 3\n[plugins.\"io.containerd.grpc.v1.cri\"]\n"
		disableLater = "[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = false\n"
	)
	tests := []struct {
		name    string
		args    []string
		active  string
		files   map[string]string
		want    string // the drop-in's path, relative
		text    string
		restart []string
		err     string
	}{
		{
			"containerd without config.toml",
			[]string{"-runtime", "auto"},
			"containerd.service", nil,
			"etc/containerd/conf.d/cgdelegate.toml", contrib.ContainerdDropIn,
			[]string{"containerd.service"},
			"",
		},
		{
			"containerd importing conf.d", nil, "containerd.service",
			map[string]string{"etc/containerd/config.toml": importConfD},
			"etc/containerd/conf.d/cgdelegate.toml", contrib.ContainerdDropIn,
			[]string{"containerd.service"},
			"",
		},
		{
			"containerd not importing conf.d", nil, "containerd.service",
			map[string]string{"etc/containerd/config.toml": noImport},
			"etc/containerd/conf.d/cgdelegate.toml", contrib.ContainerdDropIn, nil, "does not import /etc/containerd/conf.d/cgdelegate.toml; add imports = [",
		},
		{"containerd turned off by a later drop-in", nil, "containerd.service", map[string]string{
			"etc/containerd/config.toml": importConfD, "etc/containerd/conf.d/zz-site.toml": disableLater,
		}, "etc/containerd/conf.d/cgdelegate.toml", contrib.ContainerdDropIn, nil, "enable = false under"},
		{"cri-o", nil, "crio.service", nil, "etc/crio/crio.conf.d/10-cgdelegate.conf", contrib.CRIODropIn, []string{"crio.service"}, ""},
		{"no runtime", nil, "docker.service", nil, "", "", nil, "neither containerd.service nor crio.service is active"},
		{
			"containerd, no restart",
			[]string{"-runtime", "containerd", "-restart=false"},
			"",
			map[string]string{"etc/containerd/config.toml": importConfD},
			"etc/containerd/conf.d/cgdelegate.toml", contrib.ContainerdDropIn, nil, "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sd := &fakeSystemd{active: tc.active, since: time.Now().Add(-time.Hour)}
			connect := func(context.Context) (unitManager, error) {
				if slices.Contains(tc.args, "-restart=false") {
					t.Error("connected to systemd with -restart=false")
				}
				return sd, nil
			}
			args := append([]string{"-root", root}, tc.args...)
			for run := range 2 {
				var stderr bytes.Buffer
				code := runInstallNRIConfig(args, &stderr, connect)
				if tc.err != "" {
					if code != 1 || !strings.Contains(stderr.String(), tc.err) {
						t.Fatalf("exit %d, want 1 naming %q; stderr:\n%s", code, tc.err, stderr.String())
					}
					if len(sd.restarts) > 0 {
						t.Fatalf("restarted %v for a drop-in not in force", sd.restarts)
					}
					return
				}
				if code != 0 {
					t.Fatalf("run %d: exit %d; stderr:\n%s", run, code, stderr.String())
				}
				got, err := os.ReadFile(filepath.Join(root, tc.want))
				if err != nil || string(got) != tc.text {
					t.Fatalf("drop-in %s: %v, want the embedded text", tc.want, err)
				}
				if !slices.Equal(sd.restarts, tc.restart) {
					t.Errorf("run %d: restarts %v, want %v (once, the first run)", run, sd.restarts, tc.restart)
				}
			}
			if tc.files == nil && tc.active == "containerd.service" {
				got, err := os.ReadFile(filepath.Join(root, "etc/containerd/config.toml"))
				if err != nil || string(got) != config.MinimalContainerdConfig {
					t.Errorf("config.toml %q, %v; want the minimal one", got, err)
				}
			}
		})
	}
}

// A drop-in changed on the node (an older version, an edit) is rewritten
// and the runtime restarted again.
func TestInstallNRIConfigRewrites(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "etc/crio/crio.conf.d/10-cgdelegate.conf")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("[crio.nri]\nenable_nri = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sd := &fakeSystemd{active: "crio.service", since: time.Now().Add(time.Hour)} // started after the old file
	err := installNRIConfig(t.Context(), nriConfigFlags{runtime: "auto", restart: true, root: root},
		func(context.Context) (unitManager, error) { return sd, nil }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != contrib.CRIODropIn {
		t.Errorf("drop-in not rewritten: %q", got)
	}
	sd.since = time.Now().Add(-time.Hour)
	sd.restarts = nil
	// The file's time is now; the runtime started before it.
	if err := installNRIConfig(t.Context(), nriConfigFlags{runtime: "auto", restart: true, root: root},
		func(context.Context) (unitManager, error) { return sd, nil }, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sd.restarts, []string{"crio.service"}) {
		t.Errorf("restarts %v, want crio.service", sd.restarts)
	}
	if !errors.Is(config.DropIn{Runtime: config.RuntimeUnknown}.CheckDropIn(root), config.ErrDropInIgnored) {
		t.Error("CheckDropIn of an unknown runtime is not ErrDropInIgnored")
	}
}
