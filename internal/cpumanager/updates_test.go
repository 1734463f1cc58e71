package cpumanager

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// fakeCgroups records SetCpuset calls; fail names the cgroups that fail,
// with their error.
type fakeCgroups struct {
	fail    map[string]error
	written []string
}

func (f *fakeCgroups) SetCpuset(rel, cpus, mems string) error {
	if err := f.fail[rel]; err != nil {
		return err
	}
	f.written = append(f.written, rel+" "+cpus+" "+mems)
	return nil
}

func TestEnforce(t *testing.T) {
	parse := func(s string) cpuset.CPUSet {
		set, err := cpuset.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	a := func(id, cgroup, cpus, mems string) policy.Assignment {
		return policy.Assignment{ContainerID: id, Cgroup: cgroup, CPUs: parse(cpus), Mems: parse(mems)}
	}
	permission := fmt.Errorf("set cpuset.cpus: %w", fs.ErrPermission)
	tests := []struct {
		name        string
		as          []policy.Assignment
		fail        map[string]error
		wantWritten []string
		wantErr     []string // each in the error; nil: no error
	}{
		{
			name:        "every container written, in order",
			as:          []policy.Assignment{a("b", "/k/b", "0-1", "0"), a("a", "/k/a", "2-3", "0-1")},
			wantWritten: []string{"/k/b 0-1 0", "/k/a 2-3 0-1"},
		},
		{
			name:        "unknown cgroup or empty set skipped",
			as:          []policy.Assignment{a("a", "", "0", "0"), a("b", "/k/b", "", "0"), a("c", "/k/c", "0", ""), a("d", "/k/d", "1", "0")},
			wantWritten: []string{"/k/d 1 0"},
		},
		{
			name:        "a cgroup that is gone is no error",
			as:          []policy.Assignment{a("a", "/k/a", "0", "0"), a("b", "/k/b", "1", "0")},
			fail:        map[string]error{"/k/a": fmt.Errorf("open: %w", fs.ErrNotExist)},
			wantWritten: []string{"/k/b 1 0"},
		},
		{
			name:        "other failures named, the rest written",
			as:          []policy.Assignment{a("a", "/k/a", "0", "0"), a("b", "/k/b", "1", "0"), a("c", "/k/c", "2", "0")},
			fail:        map[string]error{"/k/a": permission, "/k/c": permission},
			wantWritten: []string{"/k/b 1 0"},
			wantErr:     []string{"container a: set cpuset.cpus", "container c:"},
		},
		{name: "nothing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &fakeCgroups{fail: tc.fail}
			n, err := Enforce(w, tc.as)
			if !reflect.DeepEqual(w.written, tc.wantWritten) {
				t.Errorf("written %q, want %q", w.written, tc.wantWritten)
			}
			if n != len(tc.wantWritten) {
				t.Errorf("Enforce = %d, want %d", n, len(tc.wantWritten))
			}
			if (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("error %v, want one with %q", err, tc.wantErr)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if err != nil && !errors.Is(err, fs.ErrPermission) {
				t.Errorf("error %v does not wrap the cause", err)
			}
		})
	}
}
