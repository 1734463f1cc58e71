package status

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
	"github.com/cgdelegate/cgdelegate/internal/host"
)

var (
	good    = host.Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "cgroup2", Version: 2, NsDelegate: true}
	noNsdel = host.Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "cgroup2", Version: 2}
	v1      = host.Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "tmpfs", Version: 1}
)

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name    string
		host    host.Status
		readErr error
		want    bool
		problem string
	}{
		{"ready", good, nil, true, ""},
		{"no nsdelegate", noNsdel, nil, false, "nsdelegate"},
		{"cgroup v1", v1, nil, false, "cgroup v2"},
		{"unreadable mount table", good, errors.New("open /proc/1/mountinfo: permission denied"), false, "permission denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(config.Default(), tc.host, tc.readErr)
			if r.Supported != tc.want {
				t.Fatalf("Supported = %v, want %v (%v)", r.Supported, tc.want, r.Problems)
			}
			if tc.problem != "" && (len(r.Problems) == 0 || !strings.Contains(r.Problems[0], tc.problem)) {
				t.Fatalf("Problems = %v, want one naming %q", r.Problems, tc.problem)
			}
		})
	}
}

func TestPublishAndLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.json")
	pub := Evaluate(config.Default(), good, nil)
	pub.Runtime = &Runtime{Name: "containerd", Version: "v2.4.2"}
	pub.PluginPID = 42
	pub.UpdatedAt = time.Unix(1700000000, 0).UTC()
	pub.Pinning = &Pinning{Active: false, Reason: "cpuPinning is off"}
	if err := Publish(path, pub); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPublished(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Runtime == nil || got.Runtime.Version != "v2.4.2" || got.PluginPID != 42 || !got.UpdatedAt.Equal(pub.UpdatedAt) {
		t.Fatalf("round trip lost data: %+v", got)
	}

	// The live host check wins over what was published.
	live := Live(Evaluate(config.Default(), noNsdel, nil), got, nil)
	if live.Supported || live.Runtime.Name != "containerd" || live.Pinning == nil {
		t.Fatalf("Live = %+v", live)
	}
	ready := Live(Evaluate(config.Default(), good, nil), got, nil)
	if !ready.Supported || ready.NodeLabel != nil || len(ready.Warnings) != 0 {
		t.Fatalf("Live ready = %+v", ready)
	}
}

// TestPublishMode: the status file, which names every tenant's pinned
// pods, is readable by its owner only, from its first write and after
// replacing a world-readable file an older plugin left; no temporary file
// is left beside it.
func TestPublishMode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before os.FileMode // 0: no file yet
	}{
		{"new file", 0},
		{"replaces a world-readable file", 0o644},
		{"replaces a world-writable file", 0o666},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "status.json")
			if tc.before != 0 {
				if err := os.WriteFile(path, []byte("{}\n"), tc.before); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tc.before); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			pub := Evaluate(config.Default(), good, nil)
			pub.Pinning = &Pinning{Active: true, Allocations: &policy.Status{Pods: []policy.PodStatus{{ID: "p1", Name: "tenant-a/secret-project"}}}}
			if _, err := NewPublisher(path, time.Hour).Publish(pub); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != FileMode {
				t.Fatalf("status file mode %v, want %v", got, os.FileMode(FileMode))
			}
			// The table reads back typed, as metrics and the status command use it.
			if got, err := ReadPublished(path); err != nil || got.Pinning == nil || got.Pinning.Allocations == nil ||
				!reflect.DeepEqual(*got.Pinning.Allocations, *pub.Pinning.Allocations) {
				t.Fatalf("ReadPublished = %+v, %v", got, err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil || len(entries) != 1 {
				t.Fatalf("directory holds %v (%v), want the status file alone", entries, err)
			}
		})
	}
}

// The node label's last result is shown; a failed one is a warning that
// leaves the verdict alone.
func TestLiveNodeLabel(t *testing.T) {
	pub := Evaluate(config.Default(), good, nil)
	pub.Runtime = &Runtime{Name: "containerd", Version: "v2.4.2"}
	pub.NodeLabel = &NodeLabel{Node: "node-a", Want: "true", Applied: true, At: time.Unix(1700000000, 0).UTC()}
	path := filepath.Join(t.TempDir(), "status.json")
	if err := Publish(path, pub); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPublished(path)
	if err != nil {
		t.Fatal(err)
	}
	live := Live(Evaluate(config.Default(), good, nil), got, nil)
	if live.NodeLabel == nil || *live.NodeLabel != *pub.NodeLabel || len(live.Warnings) != 0 {
		t.Fatalf("Live = %+v, want the node label %+v and no warning", live, pub.NodeLabel)
	}

	got.NodeLabel = &NodeLabel{Node: "node-a", Want: "true", Error: "PATCH /api/v1/nodes/node-a: HTTP 403: denied by policy"}
	live = Live(Evaluate(config.Default(), good, nil), got, nil)
	if !live.Supported || len(live.Warnings) != 1 ||
		!strings.Contains(live.Warnings[0], `node "node-a"`) || !strings.Contains(live.Warnings[0], "HTTP 403: denied by policy") {
		t.Fatalf("Live = %+v, want supported with one warning naming the node and the error", live)
	}
}

func TestLiveWithoutPlugin(t *testing.T) {
	_, err := ReadPublished(filepath.Join(t.TempDir(), "absent.json"))
	if !errors.Is(err, ErrNoPlugin) {
		t.Fatalf("err = %v, want ErrNoPlugin", err)
	}
	r := Live(Evaluate(config.Default(), good, nil), Report{}, err)
	if r.Supported || r.Reason != ReasonPluginStopped || !strings.Contains(strings.Join(r.Problems, ";"), "no running cgdelegate plugin") {
		t.Fatalf("Live = %+v", r)
	}
	if _, err := ReadPublished(""); !errors.Is(err, ErrNoPlugin) {
		t.Fatalf("empty path: %v", err)
	}
	unconfigured := Live(Evaluate(config.Default(), good, nil), Report{}, nil)
	if unconfigured.Supported || unconfigured.Reason != ReasonNotConfigured {
		t.Fatalf("a plugin without a runtime must not report support, with the reason %s: %+v", ReasonNotConfigured, unconfigured)
	}
	// The host's reason comes first.
	bad := good
	bad.NsDelegate = false
	if r := Live(Evaluate(config.Default(), bad, nil), Report{}, nil); r.Reason != ReasonNoNsdelegate {
		t.Fatalf("no nsdelegate and no runtime: reason %q, want %s", r.Reason, ReasonNoNsdelegate)
	}
}

func TestParseGarbage(t *testing.T) {
	if _, err := Parse(strings.NewReader("{not json")); err == nil {
		t.Fatal("want an error")
	}
}

func TestPublisherSkipsUnchanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.json")
	p := NewPublisher(path, time.Hour)
	r := Evaluate(config.Default(), good, nil)
	steps := []struct {
		name      string
		mutate    func(*Report)
		wantWrite bool
	}{
		{"first", func(*Report) {}, true},
		{"only the time moved", func(r *Report) { r.UpdatedAt = r.UpdatedAt.Add(time.Second) }, false},
		{"verdict changed", func(r *Report) { *r = Evaluate(config.Default(), noNsdel, nil) }, true},
		{"same again", func(*Report) {}, false},
	}
	for _, s := range steps {
		s.mutate(&r)
		wrote, err := p.Publish(r)
		if err != nil {
			t.Fatal(err)
		}
		if wrote != s.wantWrite {
			t.Fatalf("%s: wrote=%v, want %v", s.name, wrote, s.wantWrite)
		}
	}
	got, err := ReadPublished(path)
	if err != nil || got.Supported {
		t.Fatalf("published %+v, %v", got, err)
	}
	// An unchanged report is rewritten once it is older than refresh.
	p.refresh = 0
	if wrote, err := p.Publish(r); err != nil || !wrote {
		t.Fatalf("stale report not rewritten: %v %v", wrote, err)
	}
	if wrote, err := NewPublisher("", time.Hour).Publish(r); wrote || err != nil {
		t.Fatalf("disabled publisher: %v %v", wrote, err)
	}
}

func TestCheckFresh(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	const maxAge = 90 * time.Second
	alive := func(pid int) bool { return pid == 42 }
	tests := []struct {
		name    string
		pid     int
		updated time.Time
		wantErr []string
	}{
		{name: "fresh", pid: 42, updated: now.Add(-10 * time.Second)},
		{name: "just within", pid: 42, updated: now.Add(-maxAge)},
		{name: "too old", pid: 42, updated: now.Add(-5 * time.Minute), wantErr: []string{"last updated at 2026-11-23T09:55:00Z, 5m0s ago (more than 1m30s)", "PID 42"}},
		{name: "plugin gone", pid: 7, updated: now, wantErr: []string{"the plugin that published it (PID 7) is not running"}},
		{name: "gone and old: the PID is named", pid: 7, updated: now.Add(-time.Hour), wantErr: []string{"PID 7) is not running"}},
		{name: "no PID", updated: now, wantErr: []string{"names no plugin PID"}},
		{name: "no time", pid: 42, wantErr: []string{"has no updatedAt"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFresh(Report{PluginPID: tc.pid, UpdatedAt: tc.updated}, now, maxAge, alive)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("CheckFresh = %v, want fresh", err)
				}
				return
			}
			if !errors.Is(err, ErrStale) {
				t.Fatalf("CheckFresh = %v, want ErrStale", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			// A stale report makes the node unsupported, naming why.
			r := Live(Evaluate(config.Default(), good, nil), Report{}, err)
			if r.Supported || len(r.Problems) == 0 || !strings.Contains(r.Problems[len(r.Problems)-1], "stale") {
				t.Fatalf("Live with a stale report = %+v", r)
			}
		})
	}
}

func TestPIDAlive(t *testing.T) {
	if !PIDAlive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	if pid := cmd.ProcessState.Pid(); PIDAlive(pid) {
		t.Fatalf("PID %d of an exited, reaped child is alive", pid)
	}
}

// With CPU pinning on, a missing kubelet CPU manager state file is a
// warning that leaves the verdict alone; the warnings the plugin published
// reach cgdelegate status too.
func TestKubeletStateWarning(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "cpu_manager_state")
	if err := os.WriteFile(present, []byte(`{"policyName":"none"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent")
	tests := []struct {
		name        string
		pinning     bool
		allowStatic bool
		state       string
		warn        bool
	}{
		{"pinning, file missing", true, false, absent, true},
		{"pinning, file present", true, false, present, false},
		{"pinning off", false, false, absent, false},
		{"static CPU manager allowed", true, true, absent, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.CPUPinning, cfg.AllowKubeletStaticCPUManager, cfg.KubeletCPUManagerState = tc.pinning, tc.allowStatic, tc.state
			r := Evaluate(cfg, good, nil)
			if !r.Supported || len(r.Problems) != 0 {
				t.Errorf("Supported %v, Problems %v: a warning must not change the verdict", r.Supported, r.Problems)
			}
			if got := len(r.Warnings) == 1 && strings.Contains(r.Warnings[0], tc.state+" does not exist"); got != tc.warn {
				t.Errorf("Warnings %q, want a warning naming %s: %v", r.Warnings, tc.state, tc.warn)
			}
		})
	}

	t.Run("published by the plugin", func(t *testing.T) {
		pub := Report{Runtime: &Runtime{Name: "containerd"}, Warnings: []string{"plugin saw X", "both saw Y"}}
		live := Evaluate(config.Default(), good, nil)
		live.Warnings = []string{"both saw Y"}
		got := Live(live, pub, nil)
		if want := []string{"both saw Y", "plugin saw X"}; !slices.Equal(got.Warnings, want) {
			t.Errorf("Warnings %q, want %q", got.Warnings, want)
		}
		if !got.Supported {
			t.Errorf("warnings made the node unsupported: %v", got.Problems)
		}
	})
}

func TestKubeletStateMissing(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "cpu_manager_state")
	if err := os.WriteFile(present, []byte(`{"policyName":"none"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       string
	}{
		{"present", present, ""},
		{"missing", filepath.Join(dir, "absent"), filepath.Join(dir, "absent") + " does not exist"},
		{"directory missing", filepath.Join(dir, "no", "cpu_manager_state"), "mount the kubelet's directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := kubeletStateMissing(tc.path)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("kubeletStateMissing(%s) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

// Ready: a live plugin configured by its runtime, with its host check
// published, is ready, whether or not the node supports writable cgroups.
func TestReady(t *testing.T) {
	checked, noNsdelegate := good, noNsdel
	rt := &Runtime{Name: "containerd", Version: "2.1.0"}
	tests := []struct {
		name   string
		pub    Report
		pubErr error
		want   string // "" for ready
	}{
		{"configured, supported", Report{Supported: true, Host: checked, Runtime: rt}, nil, ""},
		{"configured, no nsdelegate", Report{Host: noNsdelegate, Runtime: rt, Problems: []string{"no nsdelegate"}}, nil, ""},
		{"configured, host check failed", Report{Runtime: rt, Problems: []string{"read mountinfo: EACCES"}}, nil, ""},
		{"not configured", Report{Supported: true, Host: checked}, nil, "no runtime has configured it over NRI"},
		{"no host check", Report{Runtime: rt}, nil, "no host check"},
		{"nothing published", Report{}, ErrNoPlugin, ErrNoPlugin.Error()},
		{"stale", Report{Host: checked, Runtime: rt}, ErrStale, ErrStale.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Ready(tc.pub, tc.pubErr)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Ready: %v, want ready", err)
			case tc.want != "" && (!errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Ready: %v, want ErrNotReady naming %q", err, tc.want)
			case tc.pubErr != nil && !errors.Is(err, tc.pubErr):
				t.Errorf("Ready: %v does not wrap %v", err, tc.pubErr)
			}
		})
	}
}
