package bench

import (
	"time"

	"k8s.io/utils/cpuset"
)

// Snapshot is what one polling round read from the node-shared containers'
// cpuset.cpus.effective files.
type Snapshot struct {
	// At is when the round ended: every file was read before it.
	At time.Time
	// Union is every CPU some container may run on; Common the CPUs every
	// container may run on.
	Union, Common cpuset.CPUSet
}

// Trace is the sequence of distinct snapshots of one measurement, in time
// order: a round whose sets equal the last kept snapshot's is not kept.
// The zero value is an empty trace.
type Trace struct {
	Snapshots []Snapshot
	// Rounds and Reading count the rounds and the time spent reading: the
	// resolution of every time read from the trace is about Reading/Rounds.
	Rounds  int
	Reading time.Duration
	// first is when the first round began, last when the last one ended.
	first, last time.Time
}

// Add records one round that took took to read.
func (tr *Trace) Add(s Snapshot, took time.Duration) {
	if tr.Rounds == 0 {
		tr.first = s.At.Add(-took)
	}
	tr.Rounds++
	tr.Reading += took
	tr.last = s.At
	if n := len(tr.Snapshots); n > 0 && tr.Snapshots[n-1].Union.Equals(s.Union) && tr.Snapshots[n-1].Common.Equals(s.Common) {
		return
	}
	tr.Snapshots = append(tr.Snapshots, s)
}

// MeanRound is the mean time of one polling round.
func (tr *Trace) MeanRound() time.Duration {
	if tr.Rounds == 0 {
		return 0
	}
	return tr.Reading / time.Duration(tr.Rounds)
}

// Period is the mean time from the start of one round to the start of the
// next, pauses included: the resolution of the lags read from the trace.
func (tr *Trace) Period() time.Duration {
	if tr.Rounds == 0 {
		return 0
	}
	return tr.last.Sub(tr.first) / time.Duration(tr.Rounds)
}

// DisjointAfter is the lag from from until no container runs on any CPU of
// set, for good: the time of the first snapshot after the last one whose
// union overlaps set, less from, and at least zero. It is false when the
// last snapshot still overlaps (the overlap had not cleared when polling
// stopped) or the trace is empty.
func (tr *Trace) DisjointAfter(set cpuset.CPUSet, from time.Time) (time.Duration, bool) {
	return tr.lastUntil(from, func(s Snapshot) bool { return s.Union.Intersection(set).IsEmpty() })
}

// WidenedAfter is the lag from from until every container may run on every
// CPU of set, for good; false as for DisjointAfter.
func (tr *Trace) WidenedAfter(set cpuset.CPUSet, from time.Time) (time.Duration, bool) {
	return tr.lastUntil(from, func(s Snapshot) bool { return set.IsSubsetOf(s.Common) })
}

// lastUntil finds the first snapshot from which ok holds to the end.
func (tr *Trace) lastUntil(from time.Time, ok func(Snapshot) bool) (time.Duration, bool) {
	n := len(tr.Snapshots)
	if n == 0 || !ok(tr.Snapshots[n-1]) {
		return 0, false
	}
	i := n - 1
	for i > 0 && ok(tr.Snapshots[i-1]) {
		i--
	}
	return max(0, tr.Snapshots[i].At.Sub(from)), true
}
