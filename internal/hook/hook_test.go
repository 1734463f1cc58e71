package hook_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/fakehost"
	"github.com/cgdelegate/cgdelegate/internal/hook"
	"github.com/cgdelegate/cgdelegate/internal/host"
	"github.com/opencontainers/cgroups"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestMain(m *testing.M) {
	// Plain temp files stand in for cgroupfs.
	cgroups.TestMode = true
	os.Exit(m.Run())
}

func optionsFor(h *fakehost.Host) hook.Options {
	o := hook.DefaultOptions()
	o.CgroupRoot = h.CgroupRoot
	o.MountinfoPath = h.Mountinfo
	o.ProcRoot = h.Proc
	o.SysfsRoot = h.Sysfs
	return o
}

func TestRun(t *testing.T) {
	pidDir := func(h *fakehost.Host) string { return filepath.Join(h.Proc, strconv.Itoa(fakehost.PID)) }
	tests := []struct {
		name    string
		setup   func(h *fakehost.Host, o *hook.Options, state *string) error
		wantErr error
		// wantMsg are substrings the error must contain.
		wantMsg []string
	}{
		{name: "success"},
		{
			name: "no nsdelegate",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.Remount(fakehost.NoNsdelegate)
			},
			wantErr: host.ErrNoNsdelegate,
			wantMsg: []string{`options "rw,memory_recursiveprot"`, "remount with nsdelegate"},
		},
		{
			name:    "cgroup v1",
			setup:   func(h *fakehost.Host, _ *hook.Options, _ *string) error { return h.Remount(fakehost.CgroupV1) },
			wantErr: host.ErrCgroupV1,
			wantMsg: []string{"tmpfs", "systemd.unified_cgroup_hierarchy=1"},
		},
		{
			name:    "no cgroup mount",
			setup:   func(h *fakehost.Host, _ *hook.Options, _ *string) error { return h.Remount(fakehost.NoCgroupMount) },
			wantErr: host.ErrNoCgroupMount,
		},
		{
			name: "mountinfo missing",
			setup: func(h *fakehost.Host, o *hook.Options, _ *string) error {
				o.MountinfoPath = filepath.Join(h.Dir, "nope")
				return nil
			},
			wantErr: fs.ErrNotExist,
			wantMsg: []string{"--mountinfo"},
		},
		{
			name: "same cgroupns",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.SetCgroupNS(fakehost.HostCgroupNS, fakehost.HostCgroupNS)
			},
			wantErr: hook.ErrSameCgroupNS,
			wantMsg: []string{fakehost.HostCgroupNS, "private cgroup namespace"},
		},
		{
			name: "nsdelegate is checked before cgroupns",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				if err := h.SetCgroupNS(fakehost.HostCgroupNS, fakehost.HostCgroupNS); err != nil {
					return err
				}
				return h.Remount(fakehost.NoNsdelegate)
			},
			wantErr: host.ErrNoNsdelegate,
		},
		{
			name: "missing /proc/<pid>",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return os.RemoveAll(pidDir(h))
			},
			wantErr: hook.ErrNoProcess,
			wantMsg: []string{"pid 4242", "exited"},
		},
		{
			name: "no cgroup v2 entry for the container",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.WriteFile(filepath.Join(pidDir(h), "cgroup"), "4:memory:/kubepods/pod1/ctr1\n")
			},
			wantErr: host.ErrNotFound,
		},
		{
			name: "container cgroup directly below the root",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.WriteFile(filepath.Join(pidDir(h), "cgroup"), "0::/ctr1\n")
			},
			wantErr: hook.ErrContainerCgroup,
			wantMsg: []string{"--pod-cgroup"},
		},
		{
			name: "relative container cgroup",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.WriteFile(filepath.Join(pidDir(h), "cgroup"), "0::/../kubepods/pod1/ctr1\n")
			},
			wantErr: hook.ErrContainerCgroup,
		},
		{
			name: "bounds missing (max)",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.SetPodBounds(fakehost.PodCgroup, "max", "max")
			},
			wantErr: host.ErrBoundsMissing,
			wantMsg: []string{"cgroup.max.descendants=max", "want at most cgroup.max.descendants=250 cgroup.max.depth=50", "plugin"},
		},
		{
			name: "descendants too loose",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.SetPodBounds(fakehost.PodCgroup, "1000", "50")
			},
			wantErr: host.ErrBoundsMissing,
		},
		{
			name: "depth too loose",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.SetPodBounds(fakehost.PodCgroup, "250", "51")
			},
			wantErr: host.ErrBoundsMissing,
		},
		{
			name: "tighter bounds are fine",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.SetPodBounds(fakehost.PodCgroup, "10", "2")
			},
		},
		{
			// The plugin lowers a churning pod's bound by its dying
			// cgroups, to 0 once they fill its cap, below its live
			// cgroups: the hook's limit is the pod's cap, and any bound
			// no looser passes.
			name: "bound lowered below the live cgroups by dying ones",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				rel, err := host.PodPath(fakehost.PodCgroup)
				return errors.Join(err, h.SetPodBounds(fakehost.PodCgroup, "0", "50"),
					h.WriteFile(h.Path(rel+"/"+host.FileStat), "nr_descendants 3\nnr_dying_descendants 260\n"))
			},
		},
		{
			name: "bounds looser than a lowered limit",
			setup: func(_ *fakehost.Host, o *hook.Options, _ *string) error {
				o.Limit = host.Bounds{Descendants: 100, Depth: 50}
				return nil
			},
			wantErr: host.ErrBoundsMissing,
		},
		{
			name: "bound files absent",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return os.Remove(h.Path(fakehost.PodCgroup + "/cgroup.max.depth"))
			},
			wantErr: host.ErrBoundsMissing,
		},
		{
			name: "explicit pod cgroup",
			setup: func(h *fakehost.Host, o *hook.Options, _ *string) error {
				o.PodCgroup = "kubepods-burstable-pod1.slice"
				return h.WriteFile(filepath.Join(pidDir(h), "cgroup"), "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-ctr1.scope\n")
			},
			// The systemd pod cgroup has no bound files in the fake tree.
			wantErr: host.ErrBoundsMissing,
		},
		{
			// The bounds were written on the QoS cgroup of every
			// burstable pod (a CRI client's cgroup parent): they are no
			// pod's bounds, and the container is refused.
			name: "explicit pod cgroup shared with other pods",
			setup: func(h *fakehost.Host, o *hook.Options, _ *string) error {
				o.PodCgroup = "/kubepods/burstable"
				return h.SetPodBounds("/kubepods/burstable", "250", "50")
			},
			wantErr: host.ErrSharedCgroup,
			wantMsg: []string{`"/kubepods/burstable"`, "every burstable pod", fakehost.ContainerID},
		},
		{
			// --pod-cgroup names the parent of a kubelet's cgroup root
			// (--cgroup-root /k8s), which holds every pod of that kubelet.
			name: "explicit pod cgroup holding a kubelet's pods",
			setup: func(h *fakehost.Host, o *hook.Options, _ *string) error {
				o.PodCgroup = "/k8s"
				return errors.Join(
					h.WriteFile(filepath.Join(pidDir(h), "cgroup"), "0::/k8s/ctr1\n"),
					h.SetPodBounds("/k8s", "250", "50"),
					h.SetPodBounds("/k8s/kubepods/burstable/pod9", "max", "max"),
				)
			},
			wantErr: host.ErrSharedCgroup,
			wantMsg: []string{`"/k8s" holds "kubepods"`},
		},
		{
			name: "container directly in the kubepods cgroup",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return errors.Join(
					h.WriteFile(filepath.Join(pidDir(h), "cgroup"), "0::/kubepods.slice/cri-containerd-ctr1.scope\n"),
					h.SetPodBounds("kubepods.slice", "250", "50"),
				)
			},
			wantErr: host.ErrSharedCgroup,
			wantMsg: []string{`"/kubepods.slice"`, "every pod"},
		},
		{
			name: "explicit pod cgroup not above the container",
			setup: func(_ *fakehost.Host, o *hook.Options, _ *string) error {
				o.PodCgroup = "/kubepods/besteffort/pod2"
				return nil
			},
			wantErr: hook.ErrOutsidePod,
		},
		{
			name: "bad state JSON",
			setup: func(_ *fakehost.Host, _ *hook.Options, state *string) error {
				*state = `{"id": "ctr1", "pid": `
				return nil
			},
			wantErr: hook.ErrBadState,
			wantMsg: []string{"OCI hook"},
		},
		{
			name: "state without pid",
			setup: func(h *fakehost.Host, _ *hook.Options, state *string) error {
				*state = `{"id":"ctr1","bundle":"` + h.Bundle + `"}`
				return nil
			},
			wantErr: hook.ErrBadState,
		},
		{
			name: "state with relative bundle",
			setup: func(_ *fakehost.Host, _ *hook.Options, state *string) error {
				*state = `{"id":"ctr1","pid":4242,"bundle":"bundle"}`
				return nil
			},
			wantErr: hook.ErrBadState,
		},
		{
			name: "config.json missing",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return os.Remove(filepath.Join(h.Bundle, "config.json"))
			},
			wantErr: hook.ErrBundleConfig,
		},
		{
			name: "config.json garbage",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				return h.WriteFile(filepath.Join(h.Bundle, "config.json"), "{")
			},
			wantErr: hook.ErrBundleConfig,
		},
		{
			name: "userns without a root mapping",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				s := fakehost.UserNSSpec(100000, 100000)
				s.Linux.UIDMappings[0].ContainerID = 1
				return h.WriteSpec(s)
			},
			wantErr: hook.ErrUnmappedRoot,
		},
		{
			name: "userns without a mapping for the process group",
			setup: func(h *fakehost.Host, _ *hook.Options, _ *string) error {
				s := fakehost.UserNSSpec(100000, 100000)
				s.Process = &specs.Process{User: specs.User{UID: 0, GID: 70000}}
				return h.WriteSpec(s)
			},
			wantErr: hook.ErrUnmappedRoot,
			wantMsg: []string{"gid 70000"},
		},
		{
			name: "bad options",
			setup: func(_ *fakehost.Host, o *hook.Options, _ *string) error {
				o.ProcRoot, o.Limit.Depth = "proc", 0
				return nil
			},
			wantErr: hook.ErrBadOptions,
			wantMsg: []string{"proc:", "max-depth"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := fakehost.New(t, fakehost.WithContainer())
			o := optionsFor(h)
			state := h.State()
			if tc.setup != nil {
				if err := tc.setup(h, &o, &state); err != nil {
					t.Fatal(err)
				}
			}
			err := hook.Run(context.Background(), o, strings.NewReader(state))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Run error = %v, want %v", err, tc.wantErr)
			}
			for _, s := range tc.wantMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestRunCanceled(t *testing.T) {
	h := fakehost.New(t, fakehost.WithContainer())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := hook.Run(ctx, optionsFor(h), strings.NewReader(h.State())); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error = %v, want context.Canceled", err)
	}
}

// A systemd-driver pod cgroup given as a slice name is expanded.
func TestRunSystemdPodCgroup(t *testing.T) {
	h := fakehost.New(t, fakehost.WithContainer())
	pod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
	if err := errors.Join(
		h.WriteFile(filepath.Join(h.Proc, strconv.Itoa(fakehost.PID), "cgroup"), "0::"+pod+"/cri-containerd-ctr1.scope\n"),
		h.SetPodBounds(pod, "250", "50"),
	); err != nil {
		t.Fatal(err)
	}
	for _, podFlag := range []string{"", "kubepods-burstable-pod1.slice", pod} {
		t.Run("pod-cgroup="+podFlag, func(t *testing.T) {
			o := optionsFor(h)
			o.PodCgroup = podFlag
			if err := hook.Run(context.Background(), o, strings.NewReader(h.State())); err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

func owner(t *testing.T, file string) (uid, gid int) {
	t.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

func TestRunDelegation(t *testing.T) {
	delegated := []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"}
	tests := []struct {
		name  string
		setup func(h *fakehost.Host) error
		// wantUID/wantGID own the owned files afterwards (0:0: not
		// chowned); kept files, and the pod cgroup, are never chowned.
		wantUID, wantGID int
		owned, kept      []string
	}{
		{
			name:  "no user namespace: no chown",
			owned: delegated, kept: []string{"memory.max"},
		},
		{
			name:    "userns root maps to 100000:100001",
			setup:   func(h *fakehost.Host) error { return h.WriteSpec(fakehost.UserNSSpec(100000, 100001)) },
			wantUID: 100000, wantGID: 100001,
			owned: delegated, kept: []string{"memory.max"},
		},
		{
			name: "userns with the kernel's delegate list",
			setup: func(h *fakehost.Host) error {
				return errors.Join(
					h.WriteSpec(fakehost.UserNSSpec(65536, 65536)),
					h.WriteDelegate("cgroup.procs", "cgroup.threads", "cgroup.subtree_control", "memory.reclaim"),
					h.WriteFile(h.Path(fakehost.Cgroup+"/memory.reclaim"), ""),
				)
			},
			wantUID: 65536, wantGID: 65536,
			owned: append([]string{"memory.reclaim"}, delegated...), kept: []string{"memory.max"},
		},
		{
			name: "userns joined by path: maps from /proc/<pid>",
			setup: func(h *fakehost.Host) error {
				dir := filepath.Join(h.Proc, strconv.Itoa(fakehost.PID))
				return errors.Join(
					h.WriteSpec(&specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{
						{Type: specs.UserNamespace, Path: "/proc/1000/ns/user"}, {Type: specs.CgroupNamespace},
					}}}),
					h.WriteFile(filepath.Join(dir, "uid_map"), "         0     200000      65536\n"),
					h.WriteFile(filepath.Join(dir, "gid_map"), "         0     200000      65536\n"),
				)
			},
			wantUID: 200000, wantGID: 200000,
			owned: delegated,
		},
		{
			// runc's systemd driver hands the cgroup to the process user's
			// host UID; the hook picks the same one.
			name: "userns, process runs as 1000:2000: its host IDs",
			setup: func(h *fakehost.Host) error {
				s := fakehost.UserNSSpec(100000, 200000)
				s.Process = &specs.Process{User: specs.User{UID: 1000, GID: 2000}}
				return h.WriteSpec(s)
			},
			wantUID: 101000, wantGID: 202000,
			owned: delegated, kept: []string{"memory.max"},
		},
		{
			name:  "userns with root mapped to host root: no chown",
			setup: func(h *fakehost.Host) error { return h.WriteSpec(fakehost.UserNSSpec(0, 0)) },
			owned: delegated,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if os.Geteuid() != 0 && tc.wantUID != 0 {
				t.Skip("the chown needs root: only root can hand temp files to another UID")
			}
			h := fakehost.New(t, fakehost.WithContainer())
			if tc.setup != nil {
				if err := tc.setup(h); err != nil {
					t.Fatal(err)
				}
			}
			if err := hook.Run(context.Background(), optionsFor(h), strings.NewReader(h.State())); err != nil {
				t.Fatalf("Run: %v", err)
			}
			// Files nobody chowns belong to whoever runs the test.
			me, myGID := os.Geteuid(), os.Getegid()
			wantUID, wantGID := tc.wantUID, tc.wantGID
			if wantUID == 0 && wantGID == 0 {
				wantUID, wantGID = me, myGID
			}
			for _, f := range tc.owned {
				if uid, gid := owner(t, h.Path(fakehost.Cgroup+"/"+f)); uid != wantUID || gid != wantGID {
					t.Errorf("%q owned by %d:%d, want %d:%d", f, uid, gid, wantUID, wantGID)
				}
			}
			for _, f := range append([]string{"../"}, tc.kept...) {
				if uid, gid := owner(t, h.Path(fakehost.Cgroup+"/"+f)); uid != me || gid != myGID {
					t.Errorf("%q owned by %d:%d, want it left to %d:%d", f, uid, gid, me, myGID)
				}
			}
		})
	}
}
