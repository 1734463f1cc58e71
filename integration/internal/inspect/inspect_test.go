package inspect

import (
	"reflect"
	"strings"
	"testing"
)

const containerMountinfo = `1071 1000 0:60 / / rw,relatime - overlay overlay rw,lowerdir=/a,upperdir=/b,workdir=/c
1080 1071 0:63 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
1081 1080 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate
1090 1081 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate,memory_recursiveprot
1100 1071 0:70 /etc/my\040hosts /etc/hosts ro - tmpfs tmpfs rw
`

func TestParseMountinfo(t *testing.T) {
	mounts, err := ParseMountinfo(strings.NewReader(containerMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		point      string
		wantFound  bool
		wantRO     bool
		wantFSType string
		wantNSDel  bool
		wantRoot   string
	}{
		{name: "stacked cgroup2: top-most wins", point: "/sys/fs/cgroup", wantFound: true, wantFSType: "cgroup2", wantNSDel: true, wantRoot: "/"},
		{name: "read-only sysfs", point: "/sys", wantFound: true, wantRO: true, wantFSType: "sysfs", wantRoot: "/"},
		{name: "escaped root", point: "/etc/hosts", wantFound: true, wantRO: true, wantFSType: "tmpfs", wantRoot: "/etc/my hosts"},
		{name: "missing", point: "/nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := TopMount(mounts, tc.point)
			if ok != tc.wantFound {
				t.Fatalf("found = %v, want %v", ok, tc.wantFound)
			}
			if !ok {
				return
			}
			if m.ReadOnly() != tc.wantRO || m.FSType != tc.wantFSType || m.HasSuperOpt("nsdelegate") != tc.wantNSDel || m.Root != tc.wantRoot {
				t.Errorf("got %s", m)
			}
		})
	}
	if n := len(ByFSType(mounts, "cgroup2")); n != 2 {
		t.Errorf("cgroup2 mounts = %d, want 2", n)
	}
}

func TestParseMountinfoErrors(t *testing.T) {
	for _, bad := range []string{"1 2 3\n", "1 2 0:1 / /x rw - \n"} {
		if _, err := ParseMountinfo(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseMountinfo(%q) succeeded", bad)
		}
	}
}

func TestHelpers(t *testing.T) {
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"cgroup path", CgroupPath("0::/kubepods/pod1/abc\n"), "/kubepods/pod1/abc"},
		{"cgroup path in a namespace", CgroupPath("0::/\n"), "/"},
		{"no v2 line", CgroupPath("1:name=systemd:/\n"), ""},
		{
			"cgroup.stat", KeyValues("nr_descendants 3\nnr_dying_descendants 0\n"),
			map[string]string{"nr_descendants": "3", "nr_dying_descendants": "0"},
		},
		{
			"markers", Markers("noise\nCOUNT=248\nERR=mkdir: can't create directory 'x': Resource temporarily unavailable\nlower=x\n"),
			map[string]string{"COUNT": "248", "ERR": "mkdir: can't create directory 'x': Resource temporarily unavailable"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !reflect.DeepEqual(tc.got, tc.want) {
				t.Errorf("got %#v, want %#v", tc.got, tc.want)
			}
		})
	}
}
