package delegate

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/annotations"
)

func TestPrepare(t *testing.T) {
	tests := []struct {
		name        string
		leaf        string
		controllers []string
		procs       string
		wantOn      string
		wantLeaf    string
		wantErr     error
		wantMsg     string
	}{
		{"default", "", nil, "12\n34\n", "+cpu +cpuset +memory +pids", "34", nil, ""},
		{"own leaf, some controllers", "sys", []string{"memory"}, "12\n", "+memory", "12", nil, ""},
		{"empty root: no leaf", "", []string{"pids"}, "", "+pids", "", nil, ""},
		{"missing controller", "", []string{"io"}, "12\n", "", "12", ErrController, `"io" is not in ` + "ROOT/cgroup.controllers"},
		{"nested leaf", "a/b", nil, "12\n", "", "", ErrBadName, "one component"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeTree(t)
			f.write(t, "", map[string]string{fileProcs: tc.procs})
			err := f.root().Prepare(tc.leaf, tc.controllers)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), strings.ReplaceAll(tc.wantMsg, "ROOT", f.dir)) {
					t.Fatalf("Prepare = %v, want %v with %q", err, tc.wantErr, tc.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := f.read(t, fileSubtreeControl); got != tc.wantOn {
				t.Errorf("subtree_control = %q, want %q", got, tc.wantOn)
			}
			leaf := tc.leaf
			if leaf == "" {
				leaf = DefaultLeaf
			}
			got, err := os.ReadFile(filepath.Join(f.dir, leaf, fileProcs))
			switch {
			case tc.wantLeaf == "" && !errors.Is(err, os.ErrNotExist):
				t.Errorf("leaf made for an empty root (%v)", err)
			case tc.wantLeaf != "" && strings.TrimSpace(string(got)) != tc.wantLeaf:
				// TestMode truncates on every write: the last pid moved.
				t.Errorf("leaf cgroup.procs = %q (%v), want %q", got, err, tc.wantLeaf)
			}
		})
	}
}

func TestCreate(t *testing.T) {
	f := newFakeTree(t)
	f.write(t, "", map[string]string{fileProcs: "", fileSubtreeControl: "cpu"})
	r := f.root()
	g, err := r.Create("jobs/w1", Limits{CPUMilli: 500, MemoryBytes: 256 << 20, Pids: 10, Cpuset: cpuset.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	if g.Name() != "jobs/w1" || g.Dir() != filepath.Join(f.dir, "jobs/w1") {
		t.Errorf("group %q at %q", g.Name(), g.Dir())
	}
	for file, want := range map[string]string{
		fileSubtreeControl:              "+cpuset +memory +pids", // cpu was on already
		"jobs/" + fileSubtreeControl:    "+cpu +cpuset +memory +pids",
		"jobs/w1/cpu.max":               "50000 100000",
		"jobs/w1/memory.max":            "268435456",
		"jobs/w1/pids.max":              "10",
		"jobs/w1/cpuset.cpus":           "1",
		"jobs/w1/" + fileSubtreeControl: "",
		"jobs/w1/" + fileControllers:    "cpuset cpu memory pids",
	} {
		if got := f.read(t, file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	// A second group beside it reuses jobs, and removing it keeps jobs.
	g2, err := r.Create("jobs/w2", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "jobs/w2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("jobs/w2 not removed: %v", err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "jobs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("jobs not removed with its last group: %v", err)
	}
	// A group reused as is stays.
	f.write(t, "kept", map[string]string{fileControllers: "", fileSubtreeControl: ""})
	kept, err := r.Create("kept", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kept.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "kept")); err != nil {
		t.Errorf("an existing group was removed: %v", err)
	}
}

func TestCreateErrors(t *testing.T) {
	tests := []struct {
		name    string
		cgroup  string
		limits  Limits
		mkdir   func(string) error
		setup   func(testing.TB, *fakeTree)
		wantErr error
		wantMsg []string
	}{
		{name: "bad name", cgroup: "../x", wantErr: ErrBadName, wantMsg: []string{`".."`}},
		{
			name: "cpuset outside", cgroup: "w", limits: Limits{Cpuset: cpuset.New(7)},
			wantErr: ErrBadLimit, wantMsg: []string{"--cpuset 7 is not inside the container's CPUs 0-3", "cpuset.cpus.effective"},
		},
		{
			name: "budget", cgroup: "a/b", mkdir: func(dir string) error {
				if filepath.Base(dir) == "b" {
					return &os.PathError{Op: "mkdir", Path: dir, Err: unix.EAGAIN}
				}
				return mkdirCgroup(dir)
			},
			setup:   func(_ testing.TB, f *fakeTree) { f.env[EnvMaxDescendants], f.env[EnvMaxDepth] = "250", "50" },
			wantErr: ErrBudget, wantMsg: []string{"pod cgroup bound reached (cgroup.max.descendants=250)", "cgroup.max.depth=50", "/a/b", annotations.MaxDescendants.Name},
		},
		{
			name: "budget without env", cgroup: "a", mkdir: func(dir string) error { return &os.PathError{Op: "mkdir", Path: dir, Err: unix.EAGAIN} },
			wantErr: ErrBudget, wantMsg: []string{"cgroup.max.descendants=unknown"},
		},
		{
			name: "controller not delegated", cgroup: "w", limits: Limits{Pids: 3},
			setup:   func(t testing.TB, f *fakeTree) { f.write(t, "", map[string]string{fileControllers: "cpu"}) },
			wantErr: ErrController, wantMsg: []string{`"pids" is not in`, fileControllers, "drop the limit"},
		},
		{
			name: "limit write fails", cgroup: "w", limits: Limits{MemoryBytes: 4096},
			mkdir: func(dir string) error {
				if err := mkdirCgroup(dir); err != nil {
					return err
				}
				return os.Mkdir(filepath.Join(dir, "memory.max"), 0o755) // not writable as a file
			},
			wantMsg: []string{`write "4096" to `, "/w/memory.max"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeTree(t)
			f.write(t, "", map[string]string{fileProcs: ""})
			if tc.setup != nil {
				tc.setup(t, f)
			}
			r := f.root()
			if tc.mkdir != nil {
				r.mkdir = tc.mkdir
			}
			r.remove = os.RemoveAll
			g, err := r.Create(tc.cgroup, tc.limits)
			if err == nil || g != nil {
				t.Fatalf("Create = %v, %v; want an error", g, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			for _, want := range tc.wantMsg {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			// A failed Create leaves nothing behind.
			for _, d := range []string{"w", "a", "a/b"} {
				if _, err := os.Stat(filepath.Join(f.dir, d)); err == nil {
					t.Errorf("%s left behind", d)
				}
			}
		})
	}
}

func TestHint(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{unix.EROFS, annotations.WritableCgroups.Name},
		{unix.EACCES, "not delegated to this user"},
		{unix.EPERM, "not delegated to this user"},
		{unix.EIO, ""},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			got := hint(&os.PathError{Op: "open", Path: "x", Err: tc.err})
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("hint(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

// The names the errors point to are the plugin's.
func TestAnnotationNames(t *testing.T) {
	if writableAnnotation != annotations.WritableCgroups.Name || maxDescendantsAnnotation != annotations.MaxDescendants.Name {
		t.Fatal("annotation names differ from internal/annotations")
	}
}

func TestStartWaitRemove(t *testing.T) {
	f := newFakeTree(t)
	r := f.root()
	g, err := r.Create("w1", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	f.write(t, "w1", map[string]string{"memory.events": "oom 0\noom_kill 0\n"})
	cmd := exec.Command("sh", "-c", "exit 3")
	// Not a cgroup2 directory: CLONE_INTO_CGROUP fails, the fallback
	// moves the child by writing its pid to cgroup.procs.
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	code, err := Wait(cmd, nil)
	if err != nil || code != 3 {
		t.Fatalf("Wait = %d, %v; want 3", code, err)
	}
	if got := f.read(t, "w1/"+fileProcs); got != itoa(cmd.Process.Pid) {
		t.Errorf("w1/cgroup.procs = %q, want the child's pid %d", got, cmd.Process.Pid)
	}
	f.write(t, "w1", map[string]string{"memory.events": "oom 1\noom_kill 2\n", "memory.current": "4096\n", "cpu.stat": "usage_usec 1500\nuser_usec 1000\n", "pids.current": "1", "memory.max": "max"})
	n, err := g.OOMKills()
	if err != nil || n != 2 {
		t.Errorf("OOMKills = %d, %v", n, err)
	}
	st, err := g.Stats()
	want := Stats{Name: "w1", MemoryMax: "max", CPUUsageUsec: 1500, MemoryCurrent: 4096, PidsCurrent: 1, OOMKills: 2}
	if err != nil || st != want {
		t.Errorf("Stats = %+v, %v; want %+v", st, err, want)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("group not removed: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	f := newFakeTree(t)
	g, err := f.root().Create("w1", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(exec.Command("/nonexistent/worker")); err == nil {
		t.Error("Start of a missing binary succeeded")
	}
	gone := &Group{name: "gone", dir: filepath.Join(f.dir, "gone")}
	if err := gone.Start(exec.Command("true")); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Start in a missing group = %v", err)
	}
}

func TestWaitForwardsSignals(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 2)
	sigs <- unix.SIGCHLD // ours: not forwarded
	sigs <- unix.SIGTERM
	code, err := Wait(cmd, sigs)
	if err != nil || code != 128+int(unix.SIGTERM) {
		t.Fatalf("Wait = %d, %v; want %d", code, err, 128+int(unix.SIGTERM))
	}
}

// Reap reaps the orphans handed to a subreaper, and returns the main
// child's status.
func TestReap(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("no child subreaper: %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) //nolint:errcheck // best effort
	// The subshell exits at once, orphaning its sleep to us; it exits
	// before the main child does.
	cmd := exec.Command("sh", "-c", "(sleep 0.1 &); sleep 0.5; exit 4")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal)
	code, err := Reap(cmd, sigs)
	if err != nil || code != 4 {
		t.Fatalf("Reap = %d, %v; want 4", code, err)
	}
	var ws unix.WaitStatus
	if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); !errors.Is(err, unix.ECHILD) {
		t.Errorf("a child is left unreaped: wait4 = %d, %v", pid, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
