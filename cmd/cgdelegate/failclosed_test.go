package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/contrib"
	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// TestFailClosedReport runs the plugin's parts on a fake host with the
// runtime's config files in a temp directory, configures it as the runtime
// would, and reads what it says about fail-closed: the status command, the
// readiness probe's line, the metric, the warning at Configure. Without
// the drop-in (containerd 2.x's own config has NRI on and its default
// validator off) every one of them says required-plugins is not enforced,
// and the probe still passes; with the shipped drop-in imported they say
// it is.
func TestFailClosedReport(t *testing.T) {
	const (
		importConfD = "version = 3\nimports = [\"conf.d/*.toml\"]\n"
		disableLate = "[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = false\n"
	)
	tests := []struct {
		name    string
		runtime string
		files   map[string]string // relative to the runtime's config dir
		want    string            // the state
		reason  string            // in the reason
	}{
		{"containerd without config.toml", "containerd", nil, status.FailClosedOff, "is not set in its config files"},
		{"containerd without the drop-in", "containerd", map[string]string{"containerd/config.toml": importConfD}, status.FailClosedOff, "is not set"},
		{"containerd with the drop-in", "containerd", map[string]string{
			"containerd/config.toml": importConfD, "containerd/conf.d/cgdelegate.toml": contrib.ContainerdDropIn,
		}, status.FailClosedEnforced, "enable = true under"},
		{"containerd with the drop-in turned off after it", "containerd", map[string]string{
			"containerd/config.toml": importConfD, "containerd/conf.d/cgdelegate.toml": contrib.ContainerdDropIn,
			"containerd/conf.d/zz-site.toml": disableLate,
		}, status.FailClosedOff, "= false in "},
		{"cri-o without the drop-in", "cri-o", map[string]string{"crio/crio.conf": "[crio.nri]\nenable_nri = true\n"}, status.FailClosedOff, "nri_enable_default_validator"},
		{"cri-o with the drop-in", "cri-o", map[string]string{
			"crio/crio.conf": "[crio.nri]\nenable_nri = true\n", "crio/crio.conf.d/10-cgdelegate.conf": contrib.CRIODropIn,
		}, status.FailClosedEnforced, "10-cgdelegate.conf"},
		{"another runtime", "kata-runtime", nil, status.FailClosedUnknown, "neither containerd nor CRI-O"},
		// containerd 2.1 has no default validator: the drop-in does nothing.
		{"containerd 2.1 with the drop-in", "containerd@v2.1.4", map[string]string{
			"containerd/config.toml": importConfD, "containerd/conf.d/cgdelegate.toml": contrib.ContainerdDropIn,
		}, status.FailClosedOff, "containerd v2.1.4 has no NRI default validator"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := fakehost.New(t, fakehost.WithMounts(fakehost.Nsdelegate))
			etc := filepath.Join(h.Dir, "etc")
			for name, body := range tc.files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(etc, name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(etc, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg := h.Config()
			cfg.ContainerdConfig = filepath.Join(etc, "containerd", "config.toml")
			cfg.CRIOConfig = filepath.Join(etc, "crio", "crio.conf")
			cfg.CRIOConfigDir = filepath.Join(etc, "crio", "crio.conf.d")
			cfg.MetricsAddress = "127.0.0.1:0"
			cfg.NodeLabel = config.NodeLabelOff
			var logs syncBuffer
			d, err := build(cfg, flags{}, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stopMetrics(d.metricsSrv, slog.New(slog.DiscardHandler)) })
			go func() { _ = d.metricsSrv.Serve() }()
			runtime, version, ok := strings.Cut(tc.runtime, "@")
			if !ok {
				version = "v2.4.2"
			}
			if _, err := d.plugin.Configure(t.Context(), "", runtime, version); err != nil {
				t.Fatal(err)
			}

			// The status command, as run on the node.
			cfgPath := filepath.Join(h.Dir, "config.yaml")
			body := "cgroupRoot: " + h.CgroupRoot + "\nmountinfoPath: " + h.Mountinfo + "\nstatusFile: " + h.StatusFile + "\n"
			if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if code := run([]string{"status", "-config", cfgPath}, &out, &errOut); code != 0 {
				t.Fatalf("status: exit %d (the node supports writable cgroups either way); stdout=%s stderr=%s", code, out.String(), errOut.String())
			}
			var r status.Report
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if r.FailClosed == nil || r.FailClosed.State != tc.want || !strings.Contains(r.FailClosed.Reason, tc.reason) {
				t.Errorf("status failClosed = %+v, want %s with %q", r.FailClosed, tc.want, tc.reason)
			}
			warned := strings.Contains(strings.Join(r.Warnings, "\n"), "fail-closed is "+tc.want)
			if enforced := tc.want == status.FailClosedEnforced; warned == enforced {
				t.Errorf("status warnings %q: want a fail-closed warning: %t", r.Warnings, !enforced)
			}

			// The readiness probe passes and says it.
			out.Reset()
			errOut.Reset()
			if code := run([]string{"status", "-ready", "-config", cfgPath}, &out, &errOut); code != 0 {
				t.Fatalf("status -ready: exit %d; stdout=%s stderr=%s", code, out.String(), errOut.String())
			}
			if want := "; fail-closed " + tc.want; !strings.Contains(out.String(), want) {
				t.Errorf("status -ready said %q, want %q", out.String(), want)
			}

			// The metric.
			want := "\n" + "cgdelegate_fail_closed 0\n"
			if tc.want == status.FailClosedEnforced {
				want = "\n" + "cgdelegate_fail_closed 1\n"
			}
			if got := scrape(t, "http://"+d.metricsSrv.Addr().String()+"/metrics"); !strings.Contains(got, want) {
				t.Errorf("metrics lack %q:\n%s", want, got)
			}

			// The log at Configure.
			if warned := strings.Contains(logs.String(), "the runtime does not enforce required-plugins"); warned != (tc.want != status.FailClosedEnforced) {
				t.Errorf("warned in the log: %t, want %t; log:\n%s", warned, tc.want != status.FailClosedEnforced, logs.String())
			}
		})
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test's local scrape
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
