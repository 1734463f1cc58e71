package vm

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Console protocol: the guest writes these markers on the serial console,
// each on its own line (kernel noise may precede a marker on the same line).
const (
	// markBoot is printed by the guest /init once stage two runs.
	markBoot = "CGD-BOOT"
	// markResult precedes one JSON guestResult per guest scenario.
	markResult = "CGD-RESULT "
	// markDone precedes the JSON guestDone written after the guest tests.
	markDone = "CGD-DONE "
)

// guestResult is the outcome of one guest scenario (a top-level Go test).
type guestResult struct {
	Test    string  `json:"test"`
	Result  string  `json:"result"` // pass, fail or skip
	Seconds float64 `json:"seconds"`
}

// guestDone is the guest test binary's exit status.
type guestDone struct {
	Exit int `json:"exit"`
}

// consoleReport accumulates what a boot printed.
type consoleReport struct {
	Booted  bool
	Results map[string]guestResult
	Done    *guestDone
	// Output holds the console lines of each top-level guest test, from its
	// "=== RUN" line on, to show with a failure.
	Output map[string][]string
	// Problems lists malformed markers.
	Problems []string
	// KernelCrashed is set when the guest kernel oopsed or panicked;
	// CrashLine is the first such line.
	KernelCrashed bool
	CrashLine     string

	current string
}

func newConsoleReport() *consoleReport {
	return &consoleReport{Results: map[string]guestResult{}, Output: map[string][]string{}}
}

// Feed consumes one console line (without its newline).
func (r *consoleReport) Feed(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.Contains(line, markBoot) {
		r.Booted = true
	}
	if !r.KernelCrashed && (strings.Contains(line, "] Oops: ") || strings.Contains(line, "] Kernel panic - ")) {
		r.KernelCrashed, r.CrashLine = true, strings.TrimSpace(line)
	}
	if i := strings.Index(line, markResult); i >= 0 {
		var res guestResult
		if err := json.Unmarshal([]byte(line[i+len(markResult):]), &res); err != nil || res.Test == "" {
			r.Problems = append(r.Problems, fmt.Sprintf("bad result line %q: %v", line, err))
		} else {
			r.Results[res.Test] = res
		}
	}
	if i := strings.Index(line, markDone); i >= 0 {
		var d guestDone
		if err := json.Unmarshal([]byte(line[i+len(markDone):]), &d); err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("bad done line %q: %v", line, err))
		} else {
			r.Done = &d
		}
	}
	if name, ok := strings.CutPrefix(line, "=== RUN   "); ok {
		top, _, _ := strings.Cut(strings.TrimSpace(name), "/")
		r.current = top
	}
	if r.current != "" {
		r.Output[r.current] = append(r.Output[r.current], line)
	}
	if res, ok := r.Results[r.current]; ok && strings.Contains(line, markResult) && res.Test == r.current {
		r.current = "" // the test's block ends with its result
	}
}
