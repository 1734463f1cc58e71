package delegate

import (
	"maps"
	"strings"
	"testing"
)

const (
	cgroup2RW = "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
	cgroup2RO = "30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
	cgroupV1  = "30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755\n"
	rootfs    = "20 1 0:20 / / rw,relatime - overlay overlay rw\n"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name      string
		mountinfo string
		cgroup    string
		env       map[string]string
		// proc are more files under /proc/self.
		proc     map[string]string
		problems []string
		notes    []string
	}{
		{
			name: "delegated", mountinfo: rootfs + cgroup2RW, cgroup: "0::/\n",
			env:   map[string]string{EnvMaxDescendants: "250", EnvMaxDepth: "50"},
			notes: []string{"controllers available: cpuset cpu memory pids", "holds 2 processes", "cgroup.max.descendants=250, cgroup.max.depth=50; this container uses 0, so at most 250 are left"},
		},
		{
			name: "read-only", mountinfo: rootfs + cgroup2RO, cgroup: "0::/\n",
			problems: []string{`mounted read-only: add the annotation writable-cgroups.noderesource.dev: "Writable" to the pod`},
			notes:    []string{EnvMaxDescendants + " is not set"},
		},
		{
			name: "no private cgroup namespace", mountinfo: rootfs + cgroup2RW, cgroup: "0::/kubepods/burstable/pod1/ctr\n",
			problems: []string{`no private cgroup namespace: this process sits at "/kubepods/burstable/pod1/ctr"`},
		},
		{
			name: "cgroup v1", mountinfo: rootfs + cgroupV1, cgroup: "12:memory:/x\n0::/\n",
			problems: []string{"is cgroup v1 (tmpfs)", "unified hierarchy"},
		},
		{
			name: "v1 in proc cgroup", mountinfo: rootfs + cgroup2RW, cgroup: "12:memory:/x\n",
			problems: []string{"has no cgroup v2 entry"},
		},
		{
			name: "nothing mounted", mountinfo: rootfs, cgroup: "0::/\n",
			problems: []string{"nothing is mounted at"},
		},
		{
			name: "no mountinfo", cgroup: "0::/\n",
			problems: []string{"can not read the mount table"},
		},
		{
			name: "containerd's AppArmor profile with SYS_ADMIN: a note, not a problem", mountinfo: rootfs + cgroup2RW, cgroup: "0::/\n",
			proc: map[string]string{"self/attr/apparmor/current": "cri-containerd.apparmor.d (enforce)\n", "self/status": procStatus("2", capAdmin)},
			notes: []string{
				"AppArmor: cri-containerd.apparmor.d (enforce); seccomp: filter",
				"mounts are denied by AppArmor profile cri-containerd.apparmor.d: nested runtimes and systemd need appArmorProfile {type: Localhost, localhostProfile: cgdelegate-engines} (docs/engine-profiles.md)",
			},
		},
		{
			name: "the engines' profile", mountinfo: rootfs + cgroup2RW, cgroup: "0::/\n",
			proc:  map[string]string{"self/attr/apparmor/current": "cgdelegate-engines (enforce)\n", "self/status": procStatus("2", capAdmin)},
			notes: []string{"AppArmor: cgdelegate-engines (enforce); seccomp: filter"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeTree(t)
			r := f.root()
			proc := map[string]string{"self/cgroup": tc.cgroup}
			maps.Copy(proc, tc.proc)
			if tc.mountinfo != "" {
				proc["self/mountinfo"] = strings.ReplaceAll(tc.mountinfo, "/sys/fs/cgroup", f.dir)
			}
			writeFiles(t, f.proc, proc)
			f.env = tc.env
			if f.env == nil {
				f.env = map[string]string{}
			}
			rep := r.Check()
			if rep.OK() != (len(tc.problems) == 0) {
				t.Errorf("OK = %v, problems %q", rep.OK(), rep.Problems)
			}
			all := func(list []string) string { return strings.Join(list, "\n") }
			for _, want := range tc.problems {
				if !strings.Contains(all(rep.Problems), want) {
					t.Errorf("problems %q lack %q", rep.Problems, want)
				}
			}
			for _, want := range tc.notes {
				if !strings.Contains(all(rep.Notes), want) {
					t.Errorf("notes %q lack %q", rep.Notes, want)
				}
			}
		})
	}
}

func TestTree(t *testing.T) {
	f := newFakeTree(t)
	f.write(t, "init", map[string]string{"pids.current": "2", "cpu.stat": "usage_usec 9\n"})
	f.write(t, "jobs/w1", map[string]string{"cpu.max": "50000 100000", "memory.max": "1024", "memory.current": "512", "memory.events": "oom_kill 1\n"})
	got, err := f.root().Tree()
	if err != nil {
		t.Fatal(err)
	}
	want := []Stats{
		{Name: "init", PidsCurrent: 2, CPUUsageUsec: 9},
		{Name: "jobs"},
		{Name: "jobs/w1", CPUMax: "50000 100000", MemoryMax: "1024", MemoryCurrent: 512, OOMKills: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("Tree = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Tree[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	f.write(t, "bad", map[string]string{"memory.current": "lots"})
	if _, err := f.root().Tree(); err == nil || !strings.Contains(err.Error(), `memory.current "lots"`) {
		t.Errorf("Tree with a bad file = %v", err)
	}
}
