package metrics

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// step is one thing that happens to a CreateContainer request: the
// handler's decision (what nri.Plugin counts), the interceptor's answer
// (Event), or a scrape.
type step struct {
	decide  writable.Outcome // counted by the handler when decided
	refuse  bool             // the handler refused (Container("refused", err))
	answer  bool             // the interceptor saw the request answered
	failed  bool             // ... with an error
	scrape  bool
	results map[string]float64 // at a scrape: the series to check
}

var (
	decide    = func(o writable.Outcome) step { return step{decide: o} }
	refuse    = step{refuse: true}
	answerOK  = step{answer: true}
	answerErr = step{answer: true, failed: true}
	scrapeAt  = func(results map[string]float64) step { return step{scrape: true, results: results} }
)

// The unchanged count is counted until a CreateContainer request is seen
// answered, then derived from the answered requests; every series stays
// exact, and unchanged never goes down while a counted decision is in
// flight.
func TestUnchangedDerived(t *testing.T) {
	errRefused := errors.New("refused")
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"counted while no request is timed", []step{
			decide(writable.Unchanged), decide(writable.Unchanged), decide(writable.Writable),
			scrapeAt(map[string]float64{"unchanged": 2, "writable": 1}),
		}},
		{"derived from the answered requests", []step{
			decide(writable.Unchanged), answerOK, // counted, then the derivation begins
			decide(writable.Unchanged), answerOK,
			decide(writable.Writable), answerOK,
			decide(writable.ReadOnly), answerOK,
			decide(writable.Guarded), answerOK,
			decide(writable.Privileged), answerOK,
			refuse, answerErr,
			answerErr, // could not be decoded: no handler, no decision
			answerOK,  // no pod or container: left unchanged (nri.Plugin counts it so without the derivation)
			scrapeAt(map[string]float64{"unchanged": 3, "writable": 1, "readonly": 1, "guarded": 1, "privileged": 1, "refused": 1}),
		}},
		{"a decision in flight holds unchanged, never lowers it", []step{
			answerOK, answerOK,
			scrapeAt(map[string]float64{"unchanged": 2}),
			decide(writable.Writable), // decided, not answered yet
			scrapeAt(map[string]float64{"unchanged": 2, "writable": 1}),
			refuse,
			scrapeAt(map[string]float64{"unchanged": 2, "refused": 1}),
			answerOK, answerErr,
			scrapeAt(map[string]float64{"unchanged": 2, "writable": 1, "refused": 1}),
			answerOK,
			scrapeAt(map[string]float64{"unchanged": 3}),
		}},
		{"an unchanged decision counts when answered", []step{
			answerOK,
			decide(writable.Unchanged), // not counted: implicit
			scrapeAt(map[string]float64{"unchanged": 1}),
			answerOK,
			scrapeAt(map[string]float64{"unchanged": 2}),
		}},
		{"counts from before the derivation are kept", []step{
			decide(writable.Unchanged), decide(writable.Unchanged), decide(writable.Unchanged),
			scrapeAt(map[string]float64{"unchanged": 3}),
			answerOK, // the first of the three is answered: the others are in flight
			scrapeAt(map[string]float64{"unchanged": 3}),
			answerOK, answerOK, answerOK, // and one more
			scrapeAt(map[string]float64{"unchanged": 4}),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Options{})
			for i, s := range tc.steps {
				switch {
				case s.scrape:
					for result, want := range s.results {
						if got := containerCount(t, r, result); got != want {
							t.Errorf("step %d: containers{result=%q} = %v, want %v", i, result, got, want)
						}
					}
				case s.refuse:
					r.Container("refused", errRefused)
				case s.answer:
					r.Event(createContainer, 30*time.Microsecond, s.failed)
				default:
					r.Outcomes().Inc(int(s.decide))
				}
			}
		})
	}
}

// Concurrent requests and scrapes: every scrape sees unchanged between its
// last value and the number of unchanged requests answered so far, and the
// counts are exact at the end.
func TestUnchangedDerivedConcurrent(t *testing.T) {
	r := New(Options{})
	const workers, perWorker = 4, 500
	var answered sync.WaitGroup
	var unchangedDone, writableDone [workers]int
	var mu sync.Mutex
	for w := range workers {
		answered.Add(1)
		go func() {
			defer answered.Done()
			for i := range perWorker {
				o := writable.Unchanged
				if i%3 == 0 {
					o = writable.Writable
				}
				r.Outcomes().Inc(int(o))
				r.Event(createContainer, time.Microsecond, false)
				mu.Lock()
				if o == writable.Unchanged {
					unchangedDone[w]++
				} else {
					writableDone[w]++
				}
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { answered.Wait(); close(done) }()
	var last float64
	for scraping := true; scraping; {
		select {
		case <-done:
			scraping = false
		default:
		}
		got := containerCount(t, r, "unchanged")
		mu.Lock()
		total := 0
		for _, n := range unchangedDone {
			total += n
		}
		mu.Unlock()
		// Answered before the count above was taken, plus those in
		// flight now (at most one per worker) that may have been answered
		// between the scrape and the count.
		if got < last || got > float64(total+workers) {
			t.Fatalf("unchanged = %v after %v, with %d answered", got, last, total)
		}
		last = got
	}
	wantUnchanged, wantWritable := 0, 0
	for w := range workers {
		wantUnchanged += unchangedDone[w]
		wantWritable += writableDone[w]
	}
	if got := containerCount(t, r, "unchanged"); got != float64(wantUnchanged) {
		t.Errorf("unchanged = %v at the end, want %d", got, wantUnchanged)
	}
	if got := containerCount(t, r, "writable"); got != float64(wantWritable) {
		t.Errorf("writable = %v at the end, want %d", got, wantWritable)
	}
}
