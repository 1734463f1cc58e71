package cpumanager

import (
	"maps"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// cpuUpdate is a container update that sets only the cpuset and memory
// nodes.
func cpuUpdate(id, cpus, mems string) *api.ContainerUpdate {
	return &api.ContainerUpdate{
		ContainerId: id,
		Linux:       &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: cpus, Mems: mems}}},
	}
}

// TestRecords plays each rule of the ledger (records): what it records
// after a sequence of calls, and whether an update is judged to change
// what the runtime holds. Each rule, broken, fails its row.
func TestRecords(t *testing.T) {
	tests := []struct {
		name string
		play func(r *records)
		// want is the ledger after play ("cpus/mems" by container).
		want map[string]string
		// judge, if set, is asked of the ledger after play: whether it
		// must be sent.
		judge    *api.ContainerUpdate
		wantSend bool
	}{
		{
			name: "created is held",
			play: func(r *records) { r.created("a", &api.LinuxCPU{Cpus: "0-1", Mems: "0"}) },
			want: map[string]string{"a": "0-1/0"}, judge: cpuUpdate("a", "0-1", "0"),
		},
		{
			name: "another cpuset is sent",
			play: func(r *records) { r.created("a", &api.LinuxCPU{Cpus: "0-1", Mems: "0"}) },
			want: map[string]string{"a": "0-1/0"}, judge: cpuUpdate("a", "2", "0"), wantSend: true,
		},
		{
			name: "other memory nodes are sent",
			play: func(r *records) { r.created("a", &api.LinuxCPU{Cpus: "0-1", Mems: "0"}) },
			want: map[string]string{"a": "0-1/0"}, judge: cpuUpdate("a", "0-1", "1"), wantSend: true,
		},
		{
			name: "forget makes it unknown",
			play: func(r *records) {
				r.created("a", &api.LinuxCPU{Cpus: "0-1", Mems: "0"})
				r.created("b", &api.LinuxCPU{Cpus: "2", Mems: "0"})
				r.forget("a")
			},
			want: map[string]string{"b": "2/0"}, judge: cpuUpdate("a", "0-1", "0"), wantSend: true,
		},
		{
			name: "a call's updates are recorded",
			play: func(r *records) {
				_, epoch := r.changes([]*api.ContainerUpdate{cpuUpdate("a", "3", "0")}, nil)
				r.remember([]*api.ContainerUpdate{cpuUpdate("a", "3", "0")}, nil, epoch)
			},
			want: map[string]string{"a": "3/0"}, judge: cpuUpdate("a", "3", "0"),
		},
		{
			name: "a failed update is not",
			play: func(r *records) {
				r.created("a", &api.LinuxCPU{Cpus: "0-1", Mems: "0"})
				_, epoch := r.changes([]*api.ContainerUpdate{cpuUpdate("a", "3", "0")}, nil)
				r.remember([]*api.ContainerUpdate{cpuUpdate("a", "3", "0")}, map[string]bool{"a": true}, epoch)
			},
			want: map[string]string{}, judge: cpuUpdate("a", "0-1", "0"), wantSend: true,
		},
		{
			name: "a forget during the call makes its updates unknown",
			play: func(r *records) {
				_, epoch := r.changes([]*api.ContainerUpdate{cpuUpdate("a", "3", "0"), cpuUpdate("b", "4", "0")}, nil)
				r.forget("c") // an event answered c's update meanwhile
				r.remember([]*api.ContainerUpdate{cpuUpdate("a", "3", "0"), cpuUpdate("b", "4", "0")}, nil, epoch)
			},
			want: map[string]string{}, judge: cpuUpdate("a", "3", "0"), wantSend: true,
		},
		{
			name: "forgetAll during the call too",
			play: func(r *records) {
				r.created("z", &api.LinuxCPU{Cpus: "5", Mems: "0"})
				_, epoch := r.changes([]*api.ContainerUpdate{cpuUpdate("a", "3", "0")}, nil)
				r.forgetAll()
				r.remember([]*api.ContainerUpdate{cpuUpdate("a", "3", "0")}, nil, epoch)
			},
			want: map[string]string{},
		},
		{
			name: "removed during the call does not",
			play: func(r *records) {
				r.created("c", &api.LinuxCPU{Cpus: "5", Mems: "0"})
				_, epoch := r.changes([]*api.ContainerUpdate{cpuUpdate("a", "3", "0")}, nil)
				r.removed("c")
				r.removed("never-seen")
				r.remember([]*api.ContainerUpdate{cpuUpdate("a", "3", "0")}, nil, epoch)
			},
			want: map[string]string{"a": "3/0"},
		},
		{
			name: "changes drops the containers gone",
			play: func(r *records) {
				r.created("a", &api.LinuxCPU{Cpus: "0-1", Mems: "0"})
				r.created("b", &api.LinuxCPU{Cpus: "2", Mems: "0"})
				r.changes(nil, []string{"a"})
			},
			want: map[string]string{"b": "2/0"},
		},
		{
			name: "a quota the runtime was never told is sent",
			play: func(r *records) { r.created("a", &api.LinuxCPU{Cpus: "2", Mems: "0"}) },
			want: map[string]string{"a": "2/0"},
			judge: &api.ContainerUpdate{ContainerId: "a", Linux: &api.LinuxContainerUpdate{Resources: &api.LinuxResources{
				Cpu: &api.LinuxCPU{Cpus: "2", Mems: "0", Quota: api.Int64(-1)},
			}}},
			wantSend: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecords()
			tc.play(r)
			if got := r.snapshot(); !maps.Equal(got, tc.want) {
				t.Errorf("ledger %v, want %v", got, tc.want)
			}
			if tc.judge == nil {
				return
			}
			before := r.epoch
			send, epoch := r.changes([]*api.ContainerUpdate{tc.judge}, nil)
			if len(send) != 1 || send[0] != tc.wantSend {
				t.Errorf("changes(%s %v) = %v, want send %v", tc.judge.GetContainerId(), tc.judge.GetLinux().GetResources().GetCpu(), send, tc.wantSend)
			}
			if epoch != before || r.epoch != before {
				t.Errorf("changes moved the epoch: %d -> %d (returned %d)", before, r.epoch, epoch)
			}
		})
	}
}

// TestRecordsEpoch: forget and forgetAll move the epoch, so a call in
// flight is not recorded; created, removed and forget of no container do
// not.
func TestRecordsEpoch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		call  func(r *records)
		moves bool
	}{
		{"forget", func(r *records) { r.forget("a") }, true},
		{"forgetAll", func(r *records) { r.forgetAll() }, true},
		{"forget of none", func(r *records) { r.forget() }, false},
		{"created", func(r *records) { r.created("b", &api.LinuxCPU{Cpus: "1", Mems: "0"}) }, false},
		{"removed", func(r *records) { r.removed("a") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecords()
			r.created("a", &api.LinuxCPU{Cpus: "0", Mems: "0"})
			before := r.epoch
			tc.call(r)
			if moved := r.epoch != before; moved != tc.moves {
				t.Errorf("epoch moved %v, want %v", moved, tc.moves)
			}
		})
	}
}

// TestCPURecordHolds: an update is held when it changes neither the
// cpuset, the memory nodes, nor a quota or period it sets.
func TestCPURecordHolds(t *testing.T) {
	base := cpuRecord{}.after(&api.LinuxCPU{Cpus: "0-3", Mems: "0"})
	off := base.after(&api.LinuxCPU{Cpus: "2", Mems: "0", Quota: api.Int64(-1)})
	tests := []struct {
		name string
		r    cpuRecord
		c    *api.LinuxCPU
		want bool
	}{
		{name: "unknown", r: cpuRecord{}, c: &api.LinuxCPU{Cpus: "0-3", Mems: "0"}},
		{name: "same", r: base, c: &api.LinuxCPU{Cpus: "0-3", Mems: "0"}, want: true},
		{name: "other cpus", r: base, c: &api.LinuxCPU{Cpus: "0-2", Mems: "0"}},
		{name: "other mems", r: base, c: &api.LinuxCPU{Cpus: "0-3", Mems: "0-1"}},
		{name: "quota unknown", r: base, c: &api.LinuxCPU{Cpus: "0-3", Mems: "0", Quota: api.Int64(-1)}},
		{name: "quota off held", r: off, c: &api.LinuxCPU{Cpus: "2", Mems: "0", Quota: api.Int64(-1)}, want: true},
		{name: "quota kept by a later update", r: off.after(&api.LinuxCPU{Cpus: "3", Mems: "0"}), c: &api.LinuxCPU{Cpus: "3", Mems: "0", Quota: api.Int64(-1)}, want: true},
		{name: "quota back, period unknown", r: off, c: &api.LinuxCPU{Cpus: "2", Mems: "0", Quota: api.Int64(-1), Period: api.UInt64(100000)}},
		{name: "quota restored", r: off, c: &api.LinuxCPU{Cpus: "2", Mems: "0", Quota: api.Int64(50000), Period: api.UInt64(100000)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.holds(tc.c); got != tc.want {
				t.Errorf("%+v holds %v = %v, want %v", tc.r, tc.c, got, tc.want)
			}
		})
	}
}
