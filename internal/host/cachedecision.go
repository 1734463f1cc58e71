package host

import (
	"fmt"
	"time"
)

// The mount-cache decision: every rule about when Checker.Check may serve
// a cached verdict, when it may trust the kernel's answer (mountProbe)
// instead of reading the whole table, and which verdict it keeps. Check
// looks at one thing at a time (the table's change detection, the probe,
// the table) and asks decideCheck, a pure function of what it has seen so
// far, what to do next, until decideCheck says it is done.

// probeTrust is how far the Checker trusts its probe.
type probeTrust uint8

const (
	// probeAbsent: there is no probe (not a procfs table, a kernel that
	// can not answer, or a probe dropped after it failed or disagreed).
	probeAbsent probeTrust = iota
	// probeUntrusted: the probe is open but has not yet agreed with the
	// table on a safe verdict.
	probeUntrusted
	// probeTrusted: the probe agreed with the table on a safe verdict;
	// its safe answer is served without reading the table.
	probeTrusted
)

// pollResult is what the table's change detection said.
type pollResult uint8

const (
	pollNotAsked pollResult = iota
	// pollQuiet: no change since the table was last read.
	pollQuiet
	// pollChanged: the table changed.
	pollChanged
	// pollFailed: the change detection failed; treated as a change.
	pollFailed
)

// probeAnswer is the probe's answer (mountProbe.safe).
type probeAnswer struct {
	// st is the status the probe found, valid when safe is set.
	st Status
	// safe is set when the probe says the cgroup root is safe.
	safe bool
	// err is set when the kernel could not answer at all.
	err error
}

// checkFacts is what one Check knows: the Checker's state when the call
// began, and what it has looked at since.
type checkFacts struct {
	// cached is the verdict an earlier Check kept, nil when there is none.
	cached *Status
	// age is the cached verdict's age; maxAge is Checker.MaxAge.
	age, maxAge time.Duration
	// probe is the trust in the probe when the call began.
	probe probeTrust
	// poll is the change detection's answer, pollNotAsked before it is
	// asked.
	poll pollResult
	// probed is the probe's answer, nil before it is asked.
	probed *probeAnswer
	// table is the table's status, nil before it is read; tableErr is set
	// when reading or parsing it failed.
	table    *Status
	tableErr error
}

// checkStep is what Check does next.
type checkStep uint8

const (
	// stepPoll: ask the table's change detection (poll(2) on procfs).
	stepPoll checkStep = iota + 1
	// stepProbe: ask the probe.
	stepProbe
	// stepTable: read and parse the whole table.
	stepTable
	// stepDone: answer, as the rest of the decision says.
	stepDone
)

// verdictSource is where the verdict Check returns comes from.
type verdictSource uint8

const (
	fromCache verdictSource = iota + 1
	fromProbe
	fromTable
	// fromError: reading the table failed; Check returns the error and
	// closes the table, which drops the cache and the probe.
	fromError
)

// checkDecision is decideCheck's answer.
type checkDecision struct {
	next checkStep
	// consume: before the next step, consume the table's pending change
	// notification, so that any change after it is seen by the next poll.
	consume bool
	// The fields below are set when next is stepDone.
	from verdictSource
	// keep: the verdict replaces the cached one; otherwise the cache is
	// emptied (unless the verdict came from it).
	keep bool
	// probe is the trust in the probe from now on; probeAbsent when it was
	// there drops it, for the reason note.
	probe probeTrust
	note  string
}

// decideCheck is the mount-cache decision (see the top of the file). Its
// rules, in order:
//
//   - a cached verdict is served only when it is safe, younger than maxAge
//     and the change detection, asked first, saw no change: an unsafe
//     verdict is never served from the cache (a refusal costs one re-read,
//     and a restored nsdelegate is seen at once), and a failed poll counts
//     as a change;
//   - a trusted probe is asked before the table, after the table's pending
//     change notification is consumed (a change after the probe's answer
//     must reach the next poll); its safe answer is the verdict, a failed
//     probe is dropped, any other answer goes to the table;
//   - an untrusted probe is asked only after the table gave a safe verdict,
//     and is trusted from then on only when it gave the very same status;
//     a probe that fails, says anything else or disagrees is dropped;
//   - a failed read of the table is the verdict (an error) and keeps
//     nothing;
//   - only a safe verdict is kept for later checks.
func decideCheck(f checkFacts) checkDecision {
	if f.cached != nil && f.cached.Err() == nil && f.age < f.maxAge {
		switch f.poll {
		case pollNotAsked:
			return checkDecision{next: stepPoll}
		case pollQuiet:
			return checkDecision{next: stepDone, from: fromCache, probe: f.probe}
		}
	}
	d := checkDecision{next: stepDone, probe: f.probe}
	if f.probe == probeTrusted {
		switch p := f.probed; {
		case p == nil:
			return checkDecision{next: stepProbe, consume: true}
		case p.err != nil:
			d.probe, d.note = probeAbsent, p.err.Error()
		case p.safe:
			return checkDecision{next: stepDone, from: fromProbe, keep: true, probe: probeTrusted}
		}
	}
	switch {
	case f.table == nil && f.tableErr == nil:
		return checkDecision{next: stepTable}
	case f.tableErr != nil:
		return checkDecision{next: stepDone, from: fromError, probe: probeAbsent, note: d.note}
	}
	safe := f.table.Err() == nil
	if f.probe == probeUntrusted && safe {
		switch p := f.probed; {
		case p == nil:
			return checkDecision{next: stepProbe}
		case p.err != nil:
			d.probe, d.note = probeAbsent, p.err.Error()
		case !p.safe || p.st != *f.table:
			d.probe, d.note = probeAbsent, fmt.Sprintf("statmount says %+v, the mount table %+v", p.st, *f.table)
		default:
			d.probe = probeTrusted
		}
	}
	d.from, d.keep = fromTable, safe
	return d
}
