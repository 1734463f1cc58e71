package advert

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/cgdelegate/cgdelegate/internal/status"
)

// source is a Source whose answers the test sets.
type source struct {
	mu      sync.Mutex
	cfg     config.Config
	st      host.Status
	err     error
	runtime *status.Runtime
	pinning *status.Pinning
	deleg   status.Delegation
	pending []config.Change
	// tables counts the calls of Pinning: the allocation tables built.
	tables int
}

func (s *source) Config() config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

func (s *source) HostStatus() (host.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st, s.err
}
func (s *source) MountCheck() string       { return "statmount" }
func (s *source) Runtime() *status.Runtime { return s.runtime }
func (s *source) Pinning() *status.Pinning {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tables++
	return s.pinning
}

func (s *source) RestartPending() []config.Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

func (s *source) Delegation() *status.Delegation {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.deleg
	return &d
}

var safe = host.Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "cgroup2", Version: 2, NsDelegate: true}

func newSource(t testing.TB) *source {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.FeatureFile = filepath.Join(dir, "features.d", "cgdelegate")
	cfg.StatusFile = filepath.Join(dir, "status.json")
	cfg.MountinfoPath = filepath.Join(dir, "mountinfo")
	return &source{cfg: cfg, st: safe, runtime: &status.Runtime{Name: "containerd", Version: "2.4.2"}}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRefresh(t *testing.T) {
	src := newSource(t)
	src.pinning = &status.Pinning{Active: false, Reason: "kubelet static"}
	a := New(src, nil)
	a.Refresh()
	if got := readFile(t, src.cfg.FeatureFile); got != FeatureContent(true) {
		t.Fatalf("feature file %q, want supported", got)
	}
	pub, err := status.ReadPublished(src.cfg.StatusFile)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Supported || pub.Runtime == nil || pub.Runtime.Name != "containerd" || pub.PluginPID != os.Getpid() ||
		pub.UpdatedAt.IsZero() || pub.Pinning == nil || pub.Pinning.Reason != "kubelet static" {
		t.Fatalf("published status %+v", pub)
	}

	// The host loses nsdelegate: the next refresh says so.
	src.mu.Lock()
	src.st.NsDelegate = false
	src.mu.Unlock()
	a.Refresh()
	if got := readFile(t, src.cfg.FeatureFile); got != FeatureContent(false) {
		t.Fatalf("feature file %q, want unsupported", got)
	}
	if r := a.Report(); r.Supported || len(r.Problems) == 0 || !strings.Contains(strings.Join(r.Problems, " "), "nsdelegate") {
		t.Fatalf("report %+v, want a problem naming nsdelegate", r)
	}

	// A new config moves the files: the new paths are written.
	src.mu.Lock()
	src.st.NsDelegate = true
	src.cfg.FeatureFile = filepath.Join(t.TempDir(), "moved")
	src.cfg.StatusFile = config.Disabled
	src.mu.Unlock()
	a.Refresh()
	if got := readFile(t, src.cfg.FeatureFile); got != FeatureContent(true) {
		t.Fatalf("moved feature file %q", got)
	}
}

// TestMountChangeRefresh: a refresh after a mount table change (refresh
// with a table age) builds and publishes the allocation table only when
// the readiness changed or the last table is that old; the feature file
// follows the host every time.
func TestMountChangeRefresh(t *testing.T) {
	src := newSource(t)
	src.pinning = &status.Pinning{Active: true, Reason: "first"}
	a := New(src, nil)
	set := func(f func()) {
		src.mu.Lock()
		defer src.mu.Unlock()
		f()
	}
	check := func(step string, tables int, supported bool, reason string) {
		t.Helper()
		src.mu.Lock()
		got := src.tables
		src.mu.Unlock()
		if got != tables {
			t.Errorf("%s: %d allocation tables built, want %d", step, got, tables)
		}
		if got := readFile(t, src.cfg.FeatureFile); got != FeatureContent(supported) {
			t.Errorf("%s: feature file %q, want supported=%v", step, got, supported)
		}
		pub, err := status.ReadPublished(src.cfg.StatusFile)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if pub.Supported != supported || pub.Pinning == nil || pub.Pinning.Reason != reason {
			t.Errorf("%s: published supported=%v pinning %+v, want supported=%v and the table of %q", step, pub.Supported, pub.Pinning, supported, reason)
		}
	}
	a.refresh(time.Hour)
	check("the first refresh", 1, true, "first")

	set(func() { src.pinning = &status.Pinning{Active: true, Reason: "second"} })
	a.refresh(time.Hour)
	check("a change with the same readiness", 1, true, "first")

	set(func() { src.st.NsDelegate = false })
	a.refresh(time.Hour)
	check("a change that loses nsdelegate", 2, false, "second")

	set(func() { src.pinning = &status.Pinning{Active: true, Reason: "third"} })
	a.refresh(time.Hour)
	check("unsupported, the same readiness", 2, false, "second")

	time.Sleep(2 * time.Millisecond)
	a.refresh(time.Millisecond)
	check("a table older than the age", 3, false, "third")

	set(func() { src.pinning = &status.Pinning{Active: true, Reason: "fourth"} })
	a.Refresh()
	check("Refresh", 4, false, "fourth")
}

func TestReportHostError(t *testing.T) {
	src := newSource(t)
	src.err = errors.New("open mount table: denied")
	if r := New(src, nil).Report(); r.Supported || !strings.Contains(strings.Join(r.Problems, " "), "denied") {
		t.Fatalf("report %+v, want unsupported naming the read error", r)
	}
}

// TestRestartPending: a change that waits for a restart is published with
// the key and both values, and as a warning that says so; the status
// command (status.Live) shows both.
func TestRestartPending(t *testing.T) {
	src := newSource(t)
	a := New(src, nil)
	a.Refresh()
	if pub, err := status.ReadPublished(src.cfg.StatusFile); err != nil || pub.RestartPending != nil || len(pub.Warnings) != 0 {
		t.Fatalf("published %+v, %v: want no pending restart", pub, err)
	}
	change := config.Change{Key: "cpuPinning", Part: config.PartPinning, Old: "false", New: "true"}
	src.mu.Lock()
	src.pending = []config.Change{change}
	src.mu.Unlock()
	a.Refresh()
	pub, err := status.ReadPublished(src.cfg.StatusFile)
	if err != nil {
		t.Fatal(err)
	}
	want := "config key cpuPinning: the config file asks true, the plugin runs with false until it restarts"
	if len(pub.RestartPending) != 1 || pub.RestartPending[0] != change || len(pub.Warnings) != 1 || !strings.Contains(pub.Warnings[0], want) {
		t.Fatalf("published restartPending %+v, warnings %q: want %+v and a warning %q", pub.RestartPending, pub.Warnings, change, want)
	}
	live := status.Live(status.Evaluate(src.cfg, safe, nil), pub, nil)
	if len(live.RestartPending) != 1 || !slices.ContainsFunc(live.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
		t.Fatalf("status shows restartPending %+v, warnings %q", live.RestartPending, live.Warnings)
	}
}

func TestWatchRefreshesOnChange(t *testing.T) {
	src := newSource(t)
	if err := os.WriteFile(src.cfg.MountinfoPath, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := New(src, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Watch(ctx, time.Hour) }()
	time.Sleep(50 * time.Millisecond)
	if err := os.WriteFile(src.cfg.MountinfoPath, []byte("a changed table\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(src.cfg.FeatureFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a mount table change did not refresh the advertisement")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch = %v, want context.Canceled", err)
	}
}

func TestWithdraw(t *testing.T) {
	tests := []struct {
		name    string
		refresh bool
		stale   bool
	}{
		{name: "after a refresh", refresh: true},
		{name: "a file left by an earlier run", stale: true},
		{name: "no file", refresh: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource(t)
			a := New(src, nil)
			if tc.refresh {
				a.Refresh()
			}
			if tc.stale {
				if err := os.MkdirAll(filepath.Dir(src.cfg.FeatureFile), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(src.cfg.FeatureFile, []byte(FeatureContent(true)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Withdraw(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(src.cfg.FeatureFile); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("feature file after Withdraw: %v, want it gone", err)
			}
			// A refresh racing the shutdown does not bring it back.
			a.Refresh()
			if _, err := os.Stat(src.cfg.FeatureFile); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("feature file after a late Refresh: %v, want it gone", err)
			}
		})
	}
}

func TestWithdrawDisabled(t *testing.T) {
	src := newSource(t)
	src.cfg.FeatureFile = config.Disabled
	if err := New(src, nil).Withdraw(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Writable containers left running on an unsafe host are a problem of the
// published status, named, and the ledger is published with it.
func TestRefreshUnsafeContainers(t *testing.T) {
	src := newSource(t)
	src.deleg = status.Delegation{Budget: 10000, Unsafe: []status.WritableContainer{{Pod: "team-a/web", Container: "app", ID: "c1"}}}
	New(src, nil).Refresh()
	pub, err := status.ReadPublished(src.cfg.StatusFile)
	if err != nil {
		t.Fatal(err)
	}
	if pub.Supported || len(pub.Problems) != 1 || !strings.Contains(pub.Problems[0], "1 writable containers run on this host") ||
		!strings.Contains(pub.Problems[0], "team-a/web/app") {
		t.Fatalf("published problems %q (supported %v), want the unsafe container named", pub.Problems, pub.Supported)
	}
	if pub.Delegation == nil || pub.Delegation.Budget != 10000 || len(pub.Delegation.Unsafe) != 1 {
		t.Fatalf("published delegation %+v", pub.Delegation)
	}
	live := status.Live(status.Evaluate(src.cfg, safe, nil), pub, nil)
	if live.Supported || !strings.Contains(strings.Join(live.Problems, "\n"), "team-a/web/app") {
		t.Fatalf("cgdelegate status: %q, want the unsafe container named", live.Problems)
	}
}
