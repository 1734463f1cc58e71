package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/status"
	"github.com/cgdelegate/cgdelegate/internal/version"
)

// statusHost builds a host and a config pointing at it.
func statusHost(t *testing.T, nsdelegate bool, publish bool) string {
	t.Helper()
	return statusHostAt(t, nsdelegate, publish, os.Getpid(), time.Now())
}

// statusHostAt is statusHost with the publisher's PID and time.
func statusHostAt(t *testing.T, nsdelegate bool, publish bool, pid int, updated time.Time) string {
	t.Helper()
	mounts := fakehost.NoNsdelegate
	if nsdelegate {
		mounts = fakehost.Nsdelegate
	}
	h := fakehost.New(t, fakehost.WithMounts(mounts))
	statusFile := h.StatusFile
	cfg := "cgroupRoot: " + h.CgroupRoot + "\nmountinfoPath: " + h.Mountinfo + "\nstatusFile: " + statusFile + "\n"
	cfgPath := filepath.Join(h.Dir, "config.yaml")
	if err := h.WriteFile(cfgPath, cfg); err != nil {
		t.Fatal(err)
	}
	if publish {
		r := status.Evaluate(config.Default(), host.Status{CgroupRoot: h.CgroupRoot, Mounted: true, Version: 2, NsDelegate: true, FSType: "cgroup2"}, nil)
		r.Runtime = &status.Runtime{Name: "containerd", Version: "v2.4.2"}
		r.PluginPID = pid
		r.UpdatedAt = updated
		if err := status.Publish(statusFile, r); err != nil {
			t.Fatal(err)
		}
	}
	return cfgPath
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name      string
		nsdel     bool
		publish   bool
		wantCode  int
		wantInOut []string
	}{
		{"ready", true, true, 0, []string{`"supportsCgroupOptions": true`, `"nsdelegate": true`, `"name": "containerd"`, `"version": "v2.4.2"`, `"cgroupVersion": 2`}},
		{"no nsdelegate", false, true, 1, []string{`"supportsCgroupOptions": false`, "lacks nsdelegate"}},
		{"no running plugin", true, false, 1, []string{`"supportsCgroupOptions": false`, "no running cgdelegate plugin"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run([]string{"status", "-config", statusHost(t, tc.nsdel, tc.publish)}, &out, &errOut)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stdout=%s stderr=%s", code, tc.wantCode, out.String(), errOut.String())
			}
			var parsed map[string]any
			if err := json.Unmarshal(out.Bytes(), &parsed); err != nil {
				t.Fatalf("status output is not JSON: %v\n%s", err, out.String())
			}
			for _, w := range tc.wantInOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("status output lacks %s:\n%s", w, out.String())
				}
			}
		})
	}
}

// status -ready is the pod's readiness probe: ready once a live plugin has
// been configured by its runtime, whether or not the node supports
// writable cgroups; not ready, saying why, before that or once the
// plugin is gone.
func TestStatusReady(t *testing.T) {
	tests := []struct {
		name     string
		nsdel    bool
		publish  bool
		updated  time.Duration
		wantCode int
		want     string
	}{
		{"configured", true, true, 0, 0, "ready: configured by containerd v2.4.2; supportsCgroupOptions true"},
		{"configured without nsdelegate", false, true, 0, 0, "ready: configured by containerd v2.4.2"},
		{"nothing published", true, false, 0, 1, "no running cgdelegate plugin"},
		{"stale", true, true, -4 * time.Minute, 1, "the published status is stale"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			cfg := statusHostAt(t, tc.nsdel, tc.publish, os.Getpid(), time.Now().Add(tc.updated))
			code := run([]string{"status", "-ready", "-config", cfg}, &out, &errOut)
			if code != tc.wantCode || !strings.Contains(out.String()+errOut.String(), tc.want) {
				t.Errorf("exit %d, want %d with %q; stdout=%s stderr=%s", code, tc.wantCode, tc.want, out.String(), errOut.String())
			}
		})
	}
}

// TestStatusLive: the liveness probe passes for a running plugin that
// keeps its status fresh, ready or not (no runtime has configured it), and
// fails when nothing is published, the status is stale or its plugin is
// gone.
func TestStatusLive(t *testing.T) {
	tests := []struct {
		name       string
		configured bool
		publish    bool
		pid        int
		updated    time.Duration
		wantCode   int
		want       string
	}{
		{"configured", true, true, os.Getpid(), 0, 0, "live: plugin PID"},
		{"not configured by a runtime, so not ready", false, true, os.Getpid(), 0, 0, "live: plugin PID"},
		{"nothing published", true, false, os.Getpid(), 0, 1, "no running cgdelegate plugin"},
		{"stale", true, true, os.Getpid(), -4 * time.Minute, 1, "the published status is stale"},
		{"plugin gone", true, true, 1 << 30, 0, 1, "is not running"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := statusHostAt(t, true, tc.publish, tc.pid, time.Now().Add(tc.updated))
			if !tc.configured {
				unconfigure(t, cfg)
				var out, errOut bytes.Buffer
				if code := run([]string{"status", "-ready", "-config", cfg}, &out, &errOut); code == 0 {
					t.Fatalf("status -ready passes for a plugin no runtime configured: %s", out.String())
				}
			}
			var out, errOut bytes.Buffer
			code := run([]string{"status", "-live", "-config", cfg}, &out, &errOut)
			if code != tc.wantCode || !strings.Contains(out.String()+errOut.String(), tc.want) {
				t.Errorf("exit %d, want %d with %q; stdout=%s stderr=%s", code, tc.wantCode, tc.want, out.String(), errOut.String())
			}
		})
	}
}

// unconfigure rewrites the status published for the config at cfgPath
// without its runtime, as a plugin no runtime has configured publishes it.
func unconfigure(t *testing.T, cfgPath string) {
	t.Helper()
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	r, err := status.ReadPublished(cfg.StatusFilePath())
	if err != nil {
		t.Fatal(err)
	}
	r.Runtime = nil
	if err := status.Publish(cfg.StatusFilePath(), r); err != nil {
		t.Fatal(err)
	}
}

// TestStatusStale: a status left by a plugin that stopped refreshing it
// is reported as unsupported, with the reason, exit 1.
func TestStatusStale(t *testing.T) {
	var out, errOut bytes.Buffer
	cfg := statusHostAt(t, true, true, os.Getpid(), time.Now().Add(-4*time.Minute))
	if code := run([]string{"status", "-config", cfg}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1; stdout=%s stderr=%s", code, out.String(), errOut.String())
	}
	for _, w := range []string{`"supportsCgroupOptions": false`, "the published status is stale", "(more than 1m30s)"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("status output lacks %s:\n%s", w, out.String())
		}
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("guard: sometimes\nmaxDepth: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.WriteFile(zero, []byte("maxDepth: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  []string
	}{
		{"unknown flag", []string{"-frobnicate"}, 2, []string{"frobnicate"}},
		{"status unknown flag", []string{"status", "-x"}, 2, []string{"-x"}},
		{"bad log level", []string{"-log-level", "loud"}, 2, []string{`-log-level "loud"`}},
		{"bad log format", []string{"-log-format", "xml"}, 2, []string{`-log-format "xml": want json or text`}},
		{"bad config reports every problem", []string{"-config", bad}, 1, []string{`guard: \"sometimes\"`, "maxDepth: -1"}},
		{"status with bad config", []string{"status", "-config", bad}, 2, []string{`guard: "sometimes"`}},
		{"missing config", []string{"-config", filepath.Join(dir, "absent.yaml")}, 1, []string{"absent.yaml"}},
		{"zero in config", []string{"-config", zero}, 1, []string{"maxDepth: 0 must be at least 1"}},
		{"unknown word", []string{"frobnicate"}, 2, []string{`unexpected argument "frobnicate"`, "the subcommands are status, node-label, nodes and install-profiles"}},
		{"node-label after flags", []string{"-log-level", "debug", "node-label", "withdraw"}, 2, []string{`"node-label" must come first: cgdelegate node-label withdraw [flags]`}},
		{"node-label without an action", []string{"node-label"}, 2, []string{"cgdelegate node-label: want an action: cgdelegate node-label withdraw"}},
		{"node-label unknown action", []string{"node-label", "add"}, 2, []string{`unexpected argument "add": the only action is withdraw`}},
		{"node-label flag before the action", []string{"node-label", "-timeout", "5s", "withdraw"}, 2, []string{`unexpected argument "-timeout"`}},
		{"withdraw bad timeout", []string{"node-label", "withdraw", "-timeout", "soon"}, 2, []string{`invalid value "soon" for flag -timeout`}},
		{"withdraw zero timeout", []string{"node-label", "withdraw", "-timeout", "0"}, 2, []string{`-timeout "0s": must be more than 0`}},
		{"withdraw negative timeout", []string{"node-label", "withdraw", "-timeout=-5s"}, 2, []string{`-timeout "-5s": must be more than 0`}},
		{"withdraw empty service-account dir", []string{"node-label", "withdraw", "-service-account-dir", ""}, 2, []string{`-service-account-dir "": want a directory`}},
		{"withdraw bad log level", []string{"node-label", "withdraw", "-log-level", "loud"}, 2, []string{`-log-level "loud"`}},
		{"withdraw extra word", []string{"node-label", "withdraw", "now"}, 2, []string{`unexpected argument "now": withdraw takes only flags`}},
		{"withdraw unknown flag", []string{"node-label", "withdraw", "-all"}, 2, []string{"-all"}},
		{"word after flags", []string{"-log-level", "debug", "extra"}, 2, []string{`unexpected argument "extra"`}},
		{"status after flags", []string{"-config", bad, "status"}, 2, []string{`"status" must come first`}},
		{"status extra word", []string{"status", "now"}, 2, []string{`cgdelegate status: unexpected argument "now"`}},
		{"idx one digit", []string{"-idx", "5"}, 2, []string{`-idx "5": want two digits`}},
		{"idx three digits", []string{"-idx", "123"}, 2, []string{`-idx "123": want two digits`}},
		{"idx not digits", []string{"-idx", "ab"}, 2, []string{`-idx "ab": want two digits`}},
		{"idx negative", []string{"-idx", "-1"}, 2, []string{`-idx "-1": want two digits`}},
		{"name with slash", []string{"-name", "a/b"}, 2, []string{`-name "a/b": must not contain '/'`}},
		{"every usage problem at once", []string{"-idx", "7", "-name", "../x", "-log-level", "loud", "extra"}, 2, []string{`-idx "7"`, `-name "../x"`, `-log-level "loud"`, `unexpected argument "extra"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(tc.args, &out, &errOut); code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr=%s", code, tc.wantCode, errOut.String())
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("stderr lacks %s:\n%s", w, errOut.String())
				}
			}
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	flagNames := []string{"-config", "-socket", "-idx", "-name", "-log-level", "-log-format", "-version"}
	tests := []struct {
		name       string
		args       []string
		wantStdout string
		wantStderr []string
	}{
		{"-h", []string{"-h"}, "", append([]string{"cgdelegate status [flags]", "cgdelegate node-label withdraw [flags]", "cgdelegate -version"}, flagNames...)},
		{"--help", []string{"--help"}, "", append([]string{"cgdelegate status [flags]"}, flagNames...)},
		{"-help", []string{"-help"}, "", []string{"cgdelegate status [flags]"}},
		{"status -h", []string{"status", "-h"}, "", []string{"usage: cgdelegate status [flags]", "-config"}},
		{"status --help", []string{"status", "--help"}, "", []string{"usage: cgdelegate status [flags]"}},
		{"node-label -h", []string{"node-label", "-h"}, "", []string{"usage: cgdelegate node-label withdraw [flags]", "-timeout", "-service-account-dir", "-log-format"}},
		{"node-label withdraw -h", []string{"node-label", "withdraw", "-h"}, "", []string{"usage: cgdelegate node-label withdraw [flags]", "-timeout"}},
		{"--version", []string{"--version"}, "cgdelegate " + version.String() + "\n", nil},
		{"-version", []string{"-version"}, "cgdelegate " + version.String() + "\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(tc.args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d, want 0; stderr=%s", code, errOut.String())
			}
			if out.String() != tc.wantStdout {
				t.Errorf("stdout %q, want %q", out.String(), tc.wantStdout)
			}
			if tc.wantStderr == nil && errOut.Len() != 0 {
				t.Errorf("stderr %q, want nothing", errOut.String())
			}
			for _, w := range tc.wantStderr {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("usage lacks %s:\n%s", w, errOut.String())
				}
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want flags
	}{
		{"defaults", nil, flags{level: slog.LevelInfo}},
		{
			"everything",
			[]string{"-config", "/c.yaml", "-socket", "/s.sock", "-idx", "07", "-name", "cgd", "-log-level", "debug"},
			flags{config: "/c.yaml", socket: "/s.sock", idx: "07", name: "cgd", level: slog.LevelDebug},
		},
		{"json logs", []string{"-log-format", "json"}, flags{level: slog.LevelInfo, format: logging.JSON}},
		{"text logs", []string{"-log-format=text"}, flags{level: slog.LevelInfo, format: logging.Text}},
		{"idx 00", []string{"-idx", "00"}, flags{idx: "00", level: slog.LevelInfo}},
		{"idx 99", []string{"-idx", "99"}, flags{idx: "99", level: slog.LevelInfo}},
		{"double dashes", []string{"--idx=10", "--name=x"}, flags{idx: "10", name: "x", level: slog.LevelInfo}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var errOut bytes.Buffer
			got, err := parseFlags(tc.args, &errOut)
			if err != nil || got != tc.want {
				t.Fatalf("parseFlags = %+v, %v; want %+v; stderr=%s", got, err, tc.want, errOut.String())
			}
		})
	}
}

// A metrics address that can not be bound stops the start, naming it.
func TestMetricsAddressBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("metricsAddress: "+ln.Addr().String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"-config", cfg}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1; stderr=%s", code, errOut.String())
	}
	for _, w := range []string{"cannot serve metrics", ln.Addr().String()} {
		if !strings.Contains(errOut.String(), w) {
			t.Errorf("stderr lacks %s:\n%s", w, errOut.String())
		}
	}
}

// nodeLabel: on outside a pod stops the start, naming what is missing.
func TestNodeLabelOnOutsideAPod(t *testing.T) {
	for _, k := range []string{"NODE_NAME", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	sa := filepath.Join(dir, "serviceaccount")
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("nodeLabel: \"on\"\nserviceAccountDir: "+sa+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"-config", cfg}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1; stderr=%s", code, errOut.String())
	}
	for _, w := range []string{"cannot label the node", "nodeLabel", "$NODE_NAME is not set", "$KUBERNETES_SERVICE_HOST is not set", filepath.Join(sa, "token")} {
		if !strings.Contains(errOut.String(), w) {
			t.Errorf("stderr lacks %s:\n%s", w, errOut.String())
		}
	}
}

// A plugin the runtime launched exits at the first lost connection; an
// external one connects again until its context is done.
func TestServe(t *testing.T) {
	lost := errors.New("ttrpc: server closed")
	tests := []struct {
		name      string
		launched  bool
		wantErr   error
		wantCalls int
	}{
		{"launched by the runtime", true, lost, 1},
		{"external", false, nil, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			run := func(context.Context) error {
				calls++
				if calls == 2 {
					cancel()
					return context.Canceled
				}
				return lost
			}
			done := make(chan error, 1)
			go func() { done <- serve(ctx, slog.New(slog.DiscardHandler), run, tc.launched) }()
			select {
			case err := <-done:
				if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
					t.Errorf("serve = %v, want %v", err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("serve did not return")
			}
			if calls != tc.wantCalls {
				t.Errorf("connected %d times, want %d", calls, tc.wantCalls)
			}
		})
	}
}
