package host

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestDecideCheck has a row for every rule of the mount-cache decision:
// each row is what a Check has seen so far, and the step or verdict that
// must follow.
func TestDecideCheck(t *testing.T) {
	safe := Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "cgroup2", Version: 2, NsDelegate: true, SuperOptions: "rw,nsdelegate"}
	noNsdelegate := Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "cgroup2", Version: 2, SuperOptions: "rw"}
	// otherSafe is safe too, but not the status the table gives.
	otherSafe := safe
	otherSafe.SuperOptions = "rw,nsdelegate,memory_recursiveprot"
	errKernel := errors.New("statmount: function not implemented")
	errTable := errors.New("read mount table: input/output error")
	sec := time.Second
	agree := &probeAnswer{st: safe, safe: true}

	done := func(from verdictSource, keep bool, trust probeTrust) checkDecision {
		return checkDecision{next: stepDone, from: from, keep: keep, probe: trust}
	}
	dropped := func(from verdictSource, keep bool, note string) checkDecision {
		return checkDecision{next: stepDone, from: from, keep: keep, probe: probeAbsent, note: note}
	}
	for _, tc := range []struct {
		name string
		f    checkFacts
		want checkDecision
	}{
		// Serving from the cache.
		{
			name: "a fresh safe cached verdict: ask the change detection first",
			f:    checkFacts{cached: &safe, age: 0, maxAge: sec},
			want: checkDecision{next: stepPoll},
		},
		{
			name: "a fresh safe cached verdict and no change: served from the cache",
			f:    checkFacts{cached: &safe, maxAge: sec, probe: probeTrusted, poll: pollQuiet},
			want: done(fromCache, false, probeTrusted),
		},
		{
			name: "a change: the table is read again",
			f:    checkFacts{cached: &safe, maxAge: sec, poll: pollChanged},
			want: checkDecision{next: stepTable},
		},
		{
			name: "a failed poll counts as a change",
			f:    checkFacts{cached: &safe, maxAge: sec, poll: pollFailed},
			want: checkDecision{next: stepTable},
		},
		{
			name: "an unsafe cached verdict is never served, not even asked about",
			f:    checkFacts{cached: &noNsdelegate, maxAge: sec},
			want: checkDecision{next: stepTable},
		},
		{
			name: "an unsafe cached verdict is never served, even with no change",
			f:    checkFacts{cached: &noNsdelegate, maxAge: sec, poll: pollQuiet},
			want: checkDecision{next: stepTable},
		},
		{
			name: "a verdict MaxAge old is read again without asking about changes",
			f:    checkFacts{cached: &safe, age: sec, maxAge: sec},
			want: checkDecision{next: stepTable},
		},
		{
			name: "MaxAge 0 serves nothing from the cache",
			f:    checkFacts{cached: &safe, maxAge: 0},
			want: checkDecision{next: stepTable},
		},
		{
			name: "nothing cached: the table is read",
			f:    checkFacts{maxAge: sec},
			want: checkDecision{next: stepTable},
		},
		// A trusted probe.
		{
			name: "a trusted probe is asked before the table, after consuming the pending change",
			f:    checkFacts{cached: &safe, maxAge: sec, probe: probeTrusted, poll: pollChanged},
			want: checkDecision{next: stepProbe, consume: true},
		},
		{
			name: "a trusted probe's safe answer is the verdict, kept",
			f:    checkFacts{maxAge: sec, probe: probeTrusted, probed: agree},
			want: done(fromProbe, true, probeTrusted),
		},
		{
			name: "a trusted probe that says not safe sends to the table and stays trusted",
			f:    checkFacts{maxAge: sec, probe: probeTrusted, probed: &probeAnswer{}},
			want: checkDecision{next: stepTable},
		},
		{
			name: "after a trusted probe said not safe, the table's verdict is not kept",
			f:    checkFacts{maxAge: sec, probe: probeTrusted, probed: &probeAnswer{}, table: &noNsdelegate},
			want: done(fromTable, false, probeTrusted),
		},
		{
			name: "a trusted probe that fails sends to the table",
			f:    checkFacts{maxAge: sec, probe: probeTrusted, probed: &probeAnswer{err: errKernel}},
			want: checkDecision{next: stepTable},
		},
		{
			name: "a trusted probe that failed is dropped, and not asked to agree again",
			f:    checkFacts{maxAge: sec, probe: probeTrusted, probed: &probeAnswer{err: errKernel}, table: &safe},
			want: dropped(fromTable, true, errKernel.Error()),
		},
		// An untrusted probe.
		{
			name: "an untrusted probe is not asked before the table",
			f:    checkFacts{maxAge: sec, probe: probeUntrusted},
			want: checkDecision{next: stepTable},
		},
		{
			name: "an untrusted probe is asked after the table said safe",
			f:    checkFacts{maxAge: sec, probe: probeUntrusted, table: &safe},
			want: checkDecision{next: stepProbe},
		},
		{
			name: "an untrusted probe is not asked after the table said unsafe",
			f:    checkFacts{maxAge: sec, probe: probeUntrusted, table: &noNsdelegate},
			want: done(fromTable, false, probeUntrusted),
		},
		{
			name: "the probe is trusted once it agreed with the table on a safe verdict",
			f:    checkFacts{maxAge: sec, probe: probeUntrusted, table: &safe, probed: agree},
			want: done(fromTable, true, probeTrusted),
		},
		{
			name: "a probe that gives another safe status is dropped",
			f:    checkFacts{maxAge: sec, probe: probeUntrusted, table: &safe, probed: &probeAnswer{st: otherSafe, safe: true}},
			want: dropped(fromTable, true, fmt.Sprintf("statmount says %+v, the mount table %+v", otherSafe, safe)),
		},
		{
			name: "a probe that says not safe where the table says safe is dropped",
			f:    checkFacts{maxAge: sec, probe: probeUntrusted, table: &safe, probed: &probeAnswer{}},
			want: dropped(fromTable, true, fmt.Sprintf("statmount says %+v, the mount table %+v", Status{}, safe)),
		},
		{
			name: "a probe that fails to agree is dropped",
			f:    checkFacts{maxAge: sec, probe: probeUntrusted, table: &safe, probed: &probeAnswer{err: errKernel}},
			want: dropped(fromTable, true, errKernel.Error()),
		},
		// The table.
		{
			name: "no probe: the table's safe verdict is kept",
			f:    checkFacts{maxAge: sec, table: &safe},
			want: done(fromTable, true, probeAbsent),
		},
		{
			name: "an unsafe verdict is never kept",
			f:    checkFacts{cached: &safe, age: sec, maxAge: sec, table: &noNsdelegate},
			want: done(fromTable, false, probeAbsent),
		},
		{
			name: "a failed read is the verdict, keeps nothing and drops the probe",
			f:    checkFacts{maxAge: sec, probe: probeUntrusted, table: &Status{CgroupRoot: "/sys/fs/cgroup"}, tableErr: errTable},
			want: dropped(fromError, false, ""),
		},
		{
			name: "a failed read after a trusted probe failed keeps the probe's error as the reason",
			f:    checkFacts{maxAge: sec, probe: probeTrusted, probed: &probeAnswer{err: errKernel}, table: &Status{}, tableErr: errTable},
			want: dropped(fromError, false, errKernel.Error()),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideCheck(tc.f); got != tc.want {
				t.Errorf("decideCheck(%+v)\n got %+v\nwant %+v", tc.f, got, tc.want)
			}
		})
	}
}

// TestDecideCheckAllPaths plays Check's loop over every combination of
// the Checker's state and the answers of the change detection, the probe
// and the table, and checks the rules on the outcome, whatever the path:
// the loop ends, nothing is looked at twice, a verdict comes from the
// cache only when it is safe, fresh and unchanged, only a safe verdict is
// kept, and the probe is trusted only after it agreed with a safe table.
func TestDecideCheckAllPaths(t *testing.T) {
	safe := Status{CgroupRoot: "/sys/fs/cgroup", Mounted: true, FSType: "cgroup2", Version: 2, NsDelegate: true, SuperOptions: "rw,nsdelegate"}
	unsafe := safe
	unsafe.NsDelegate, unsafe.SuperOptions = false, "rw"
	other := safe
	other.SuperOptions = "rw,nsdelegate,memory_recursiveprot"
	cached := []*Status{nil, &safe, &unsafe}
	ages := []time.Duration{0, 2 * time.Second}
	trusts := []probeTrust{probeAbsent, probeUntrusted, probeTrusted}
	polls := []pollResult{pollQuiet, pollChanged, pollFailed}
	answers := []probeAnswer{{st: safe, safe: true}, {st: other, safe: true}, {}, {err: errors.New("ENOSYS")}}
	type tableAnswer struct {
		st  Status
		err error
	}
	tables := []tableAnswer{{st: safe}, {st: unsafe}, {st: Status{}, err: errors.New("EIO")}}
	n := 0
	for _, c := range cached {
		for _, age := range ages {
			for _, trust := range trusts {
				for _, poll := range polls {
					for _, ans := range answers {
						for _, tab := range tables {
							name := fmt.Sprintf("cached %v age %v trust %d poll %d probe %+v table %+v", c, age, trust, poll, ans, tab)
							f := checkFacts{cached: c, age: age, maxAge: time.Second, probe: trust}
							var seen []checkStep
							var d checkDecision
							for d = decideCheck(f); d.next != stepDone; d = decideCheck(f) {
								if slices.Contains(seen, d.next) || len(seen) == 3 {
									t.Fatalf("%s: step %d again after %v", name, d.next, seen)
								}
								seen = append(seen, d.next)
								switch d.next {
								case stepPoll:
									f.poll = poll
								case stepProbe:
									if d.consume != (trust == probeTrusted) {
										t.Errorf("%s: probe asked with consume %t", name, d.consume)
									}
									if trust == probeUntrusted && (f.table == nil || f.table.Err() != nil) {
										t.Errorf("%s: an untrusted probe asked before a safe table", name)
									}
									if trust == probeTrusted && f.table != nil {
										t.Errorf("%s: a trusted probe asked after the table", name)
									}
									a := ans
									f.probed = &a
								case stepTable:
									st := tab.st
									f.table, f.tableErr = &st, tab.err
								default:
									t.Fatalf("%s: unknown step %d", name, d.next)
								}
							}
							checkOutcome(t, name, f, d)
							n++
						}
					}
				}
			}
		}
	}
	t.Logf("%d paths", n)
}

// checkOutcome checks the rules on the final decision d after the facts f.
func checkOutcome(t *testing.T, name string, f checkFacts, d checkDecision) {
	t.Helper()
	var verdict *Status
	switch d.from {
	case fromCache:
		if f.cached == nil || f.cached.Err() != nil || f.age >= f.maxAge || f.poll != pollQuiet {
			t.Errorf("%s: served from the cache", name)
		}
		verdict = f.cached
	case fromProbe:
		if f.probe != probeTrusted || f.probed == nil || !f.probed.safe {
			t.Errorf("%s: the verdict came from the probe", name)
		}
		verdict = &f.probed.st
	case fromTable:
		verdict = f.table
	case fromError:
		if f.tableErr == nil || d.keep {
			t.Errorf("%s: error verdict without an error, or kept", name)
		}
		return
	}
	if verdict == nil {
		t.Fatalf("%s: no verdict (%+v)", name, d)
	}
	if d.keep && verdict.Err() != nil {
		t.Errorf("%s: an unsafe verdict kept", name)
	}
	if d.probe == probeTrusted && f.probe != probeTrusted {
		if f.table == nil || f.table.Err() != nil || f.probed == nil || !f.probed.safe || f.probed.st != *f.table {
			t.Errorf("%s: the probe trusted without agreeing with a safe table", name)
		}
	}
	if d.probe == probeTrusted && f.probed != nil && f.probed.err != nil {
		t.Errorf("%s: a failed probe is still trusted", name)
	}
	if f.probe == probeAbsent && d.probe != probeAbsent {
		t.Errorf("%s: a probe that is not there is trusted %d", name, d.probe)
	}
}
