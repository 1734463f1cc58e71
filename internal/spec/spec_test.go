package spec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// Mount shapes as containerd 2.x and CRI-O build them.
var (
	sysfsRO = &api.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}}
	sysfsRW = &api.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "rw"}}
	// containerd 2.x default: type cgroup, ro.
	containerdCgroup = &api.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}}
	// containerd with cgroup_writable = true (or privileged): no ro.
	containerdCgroupRW = &api.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime"}}
	// CRI-O default: cgroup, ro; with its rw annotation it says rw.
	crioCgroup   = &api.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}}
	crioCgroupRW = &api.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "rw"}}
	// A spec that already says cgroup2.
	cgroup2RO = &api.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup2", Source: "cgroup2", Options: []string{"nosuid", "noexec", "nodev", "ro"}}
	// A user's hostPath volume of /sys.
	userSysBind = &api.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "rprivate", "rw"}}
	// A user's hostPath volume of the host cgroup tree.
	userCgroupBind  = &api.Mount{Destination: "/sys/fs/cgroup/", Type: "bind", Source: "/sys/fs/cgroup", Options: []string{"rbind", "rprivate", "rw"}}
	privateCgroupNS = []*api.LinuxNamespace{{Type: "pid"}, {Type: "cgroup"}}
)

func ctr(mounts []*api.Mount, ns []*api.LinuxNamespace) *api.Container {
	return &api.Container{Name: "c", Mounts: mounts, Linux: &api.LinuxContainer{Namespaces: ns}}
}

func TestInspect(t *testing.T) {
	tests := []struct {
		name           string
		mounts         []*api.Mount
		wantMount      bool
		wantRW         bool
		wantBind       bool
		wantPrivileged bool
	}{
		{"containerd default", []*api.Mount{sysfsRO, containerdCgroup}, true, false, false, false},
		{"containerd cgroup_writable", []*api.Mount{sysfsRO, containerdCgroupRW}, true, true, false, false},
		{"containerd privileged", []*api.Mount{sysfsRW, containerdCgroupRW}, true, true, false, true},
		{"CRI-O default", []*api.Mount{sysfsRO, crioCgroup}, true, false, false, false},
		{"CRI-O rw annotation", []*api.Mount{sysfsRO, crioCgroupRW}, true, true, false, false},
		{"cgroup2 ro", []*api.Mount{sysfsRO, cgroup2RO}, true, false, false, false},
		{"missing mount", []*api.Mount{sysfsRO}, false, false, false, false},
		{"user bind of /sys", []*api.Mount{userSysBind, containerdCgroup}, true, false, false, false},
		{"user bind of host cgroup tree", []*api.Mount{sysfsRO, containerdCgroup, userCgroupBind}, true, true, true, false},
		{"no mounts", nil, false, false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := Inspect(tc.mounts)
			if (st.Mount != nil) != tc.wantMount || st.ReadWrite != tc.wantRW || st.Bind != tc.wantBind || st.PrivilegedLike != tc.wantPrivileged {
				t.Fatalf("Inspect = mount:%v rw:%v bind:%v privileged:%v, want %v %v %v %v",
					st.Mount != nil, st.ReadWrite, st.Bind, st.PrivilegedLike, tc.wantMount, tc.wantRW, tc.wantBind, tc.wantPrivileged)
			}
		})
	}
}

func TestPlanWritable(t *testing.T) {
	tests := []struct {
		name          string
		c             *api.Container
		wantRemoveOld bool
		wantAddNS     bool
		wantErr       error
		wantInErr     string
	}{
		{"containerd default, private ns", ctr([]*api.Mount{sysfsRO, containerdCgroup}, privateCgroupNS), true, false, nil, ""},
		{"containerd default, no cgroupns", ctr([]*api.Mount{sysfsRO, containerdCgroup}, []*api.LinuxNamespace{{Type: "pid"}}), true, true, nil, ""},
		{"CRI-O default", ctr([]*api.Mount{sysfsRO, crioCgroup}, privateCgroupNS), true, false, nil, ""},
		{"already rw", ctr([]*api.Mount{sysfsRO, crioCgroupRW}, privateCgroupNS), true, false, nil, ""},
		{"cgroup2 type", ctr([]*api.Mount{sysfsRO, cgroup2RO}, privateCgroupNS), true, false, nil, ""},
		{"missing mount is added", ctr([]*api.Mount{sysfsRO}, privateCgroupNS), false, false, nil, ""},
		{"user bind of /sys", ctr([]*api.Mount{userSysBind, containerdCgroup}, privateCgroupNS), true, false, nil, ""},
		{"nil linux section", &api.Container{Mounts: []*api.Mount{containerdCgroup}}, true, true, nil, ""},
		{
			"joins another cgroupns",
			ctr([]*api.Mount{containerdCgroup}, []*api.LinuxNamespace{{Type: "cgroup", Path: "/proc/42/ns/cgroup"}}),
			false, false, ErrNoPrivateCgroupNS, `"/proc/42/ns/cgroup"`,
		},
		{
			"host cgroup tree bound in",
			ctr([]*api.Mount{sysfsRO, userCgroupBind}, privateCgroupNS),
			false, false, ErrHostCgroupBind, `"/sys/fs/cgroup"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanWritable(tc.c, Inspect(tc.c.GetMounts()))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantInErr) {
					t.Fatalf("err = %v, want %v naming %s", err, tc.wantErr, tc.wantInErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.RemoveOld != tc.wantRemoveOld || p.AddCgroupNS != tc.wantAddNS {
				t.Fatalf("plan remove=%v addns=%v, want %v %v", p.RemoveOld, p.AddCgroupNS, tc.wantRemoveOld, tc.wantAddNS)
			}
			m := WritableMount()
			if m.Destination != "/sys/fs/cgroup" || m.Type != "cgroup2" || !slices.Equal(m.Options, []string{"nosuid", "noexec", "nodev", "relatime", "rw"}) {
				t.Fatalf("mount = %+v", m)
			}

			adj := &api.ContainerAdjustment{}
			p.Apply(adj)
			if len(adj.Mounts) != 1+boolInt(tc.wantRemoveOld) {
				t.Fatalf("adjustment mounts = %v", adj.Mounts)
			}
			if got := adj.Mounts[len(adj.Mounts)-1]; got.Destination != m.Destination || got.Type != m.Type || !slices.Equal(got.Options, m.Options) {
				t.Fatalf("adjustment mount = %+v, want %+v", got, m)
			}
			var shared api.Mount
			SetWritableMount(&shared)
			if shared.Destination != m.Destination || shared.Type != m.Type || shared.Source != m.Source || !slices.Equal(shared.Options, m.Options) || cap(shared.Options) != len(shared.Options) {
				t.Fatalf("SetWritableMount = %+v, want %+v with a full slice", &shared, m)
			}
			hasNS := adj.GetLinux().GetNamespaces() != nil
			if hasNS != tc.wantAddNS {
				t.Fatalf("adjustment namespaces = %v, want added=%v", adj.GetLinux().GetNamespaces(), tc.wantAddNS)
			}
		})
	}
}

func TestReadOnlyMount(t *testing.T) {
	for _, old := range []*api.Mount{containerdCgroupRW, crioCgroupRW} {
		got := ReadOnlyMount(old)
		if !slices.Contains(got.Options, "ro") || slices.Contains(got.Options, "rw") || got.Type != old.Type {
			t.Fatalf("ReadOnlyMount(%v) = %v", old.Options, got)
		}
		if !slices.Contains(got.Options, "nosuid") {
			t.Fatalf("ReadOnlyMount dropped nosuid: %v", got.Options)
		}
	}
}

func TestCgroupNSDescribe(t *testing.T) {
	for _, tc := range []struct {
		ns      CgroupNS
		private bool
		want    string
	}{
		{CgroupNS{}, false, "no cgroup namespace"},
		{CgroupNS{Present: true, Path: "/x"}, false, `joins the existing cgroup namespace "/x"`},
		{CgroupNS{Present: true}, true, "private"},
	} {
		if tc.ns.Private() != tc.private || !strings.Contains(tc.ns.Describe(), tc.want) {
			t.Errorf("%+v: private=%v describe=%q", tc.ns, tc.ns.Private(), tc.ns.Describe())
		}
	}
}

func TestHook(t *testing.T) {
	h := Hook("/usr/local/bin/cgdelegate-hook", []string{"--max-depth", "50"}, 10)
	if h.Path != "/usr/local/bin/cgdelegate-hook" || !slices.Equal(h.Args, []string{"cgdelegate-hook", "--max-depth", "50"}) || h.Timeout.GetValue() != 10 {
		t.Fatalf("Hook = %+v", h)
	}
	c := &api.Container{Hooks: &api.Hooks{CreateRuntime: []*api.Hook{h}}}
	if !HasHook(c, h.Path) || HasHook(c, "/other") || HasHook(&api.Container{}, h.Path) {
		t.Fatal("HasHook")
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
