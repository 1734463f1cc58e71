package hook

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/host"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestDefaultOptions(t *testing.T) {
	want := Options{
		CgroupRoot:    config.DefaultCgroupRoot,
		MountinfoPath: config.DefaultMountinfoPath,
		ProcRoot:      config.DefaultProcRoot,
		SysfsRoot:     config.DefaultSysfsRoot,
		Limit:         host.Bounds{Descendants: config.DefaultMaxDescendants, Depth: config.DefaultMaxDepth},
	}
	if got := DefaultOptions(); got != want {
		t.Fatalf("DefaultOptions() = %+v, want %+v", got, want)
	}
	if err := want.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func TestRegisterFlags(t *testing.T) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.RegisterFlags(fs)
	err := fs.Parse([]string{
		"--cgroup-root=/c", "--mountinfo=/m", "--proc=/p", "--sysfs=/s",
		"--max-descendants=10", "--max-depth=3", "--pod-cgroup=/kubepods/pod1",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{"/c", "/m", "/p", "/s", host.Bounds{Descendants: 10, Depth: 3}, "/kubepods/pod1"}
	if o != want {
		t.Fatalf("flags gave %+v, want %+v", o, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Options)
		want   []string
	}{
		{"ok", func(*Options) {}, nil},
		{"relative paths", func(o *Options) { o.CgroupRoot, o.SysfsRoot = "sys/fs/cgroup", "" }, []string{"cgroup-root", "sysfs"}},
		{"zero limits", func(o *Options) { o.Limit = host.Bounds{} }, []string{"max-descendants", "max-depth"}},
		{"unlimited", func(o *Options) { o.Limit.Descendants = host.Unlimited }, []string{"max-descendants"}},
		{"bad pod cgroup", func(o *Options) { o.PodCgroup = "/kubepods/../../etc" }, []string{"pod-cgroup"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mutate(&o)
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBadOptions) {
				t.Fatalf("Validate error = %v, want ErrBadOptions", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

func TestParseIDMap(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []specs.LinuxIDMapping
		wantErr bool
	}{
		{"kernel format", "         0     100000      65536\n", []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}, false},
		{"two ranges", "0 1000 1\n1 100000 65535\n", []specs.LinuxIDMapping{idmap(0, 1000, 1), idmap(1, 100000, 65535)}, false},
		{"empty", "", nil, true},
		{"short line", "0 1000\n", nil, true},
		{"not a number", "0 x 1\n", nil, true},
		{"too big", "0 4294967296 1\n", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseIDMap(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseIDMap error = %v, wantErr %v", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("parseIDMap = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("parseIDMap = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestMapID(t *testing.T) {
	tests := []struct {
		name   string
		maps   []specs.LinuxIDMapping
		id     uint32
		want   int
		wantOK bool
	}{
		{"root mapped", []specs.LinuxIDMapping{{ContainerID: 0, HostID: 65536, Size: 65536}}, 0, 65536, true},
		{"root in second range", []specs.LinuxIDMapping{idmap(1, 100001, 10), idmap(0, 100000, 1)}, 0, 100000, true},
		{"root not covered", []specs.LinuxIDMapping{idmap(1, 100001, 10)}, 0, 0, false},
		{"zero size", []specs.LinuxIDMapping{idmap(0, 100000, 0)}, 0, 0, false},
		{"none", nil, 0, 0, false},
		{"user 1000", []specs.LinuxIDMapping{idmap(0, 65536, 65536)}, 1000, 66536, true},
		{"last id of the range", []specs.LinuxIDMapping{idmap(0, 65536, 65536)}, 65535, 131071, true},
		{"past the range", []specs.LinuxIDMapping{idmap(0, 65536, 65536)}, 65536, 0, false},
		{"range at the top", []specs.LinuxIDMapping{idmap(4294967290, 10, 10)}, 4294967295, 15, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := mapID(tc.maps, tc.id)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("mapID(%d) = %d, %v; want %d, %v", tc.id, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func idmap(ctr, host, size uint32) specs.LinuxIDMapping {
	return specs.LinuxIDMapping{ContainerID: ctr, HostID: host, Size: size}
}
