package vm

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// Console protocol: the guest writes these markers on the serial console,
// each on its own line (kernel noise may precede a marker on the same line).
const (
	// markBoot is printed by the guest /init once stage two runs.
	markBoot = "CGD-BOOT"
	// markScenario precedes the identifier of the guest scenario that
	// starts; its console block ends with its result.
	markScenario = "CGD-SCENARIO "
	// markResult precedes one JSON guestResult per guest scenario.
	markResult = "CGD-RESULT "
	// markFatal starts a line saying why the guest gave up.
	markFatal = "CGD-FATAL "
	// markDone precedes the JSON guestDone written after the guest tests.
	markDone = "CGD-DONE "
	// markMetric precedes one JSON guestMetric: a number a scenario
	// measured, for the host to report (never to judge).
	markMetric = "CGD-METRIC "
)

// guestMetric is a set of named measurements of one guest scenario.
type guestMetric struct {
	Scenario variant.Scenario   `json:"scenario"`
	Name     string             `json:"name"`
	Values   map[string]float64 `json:"values"`
}

// guestResult is the outcome of one guest scenario.
type guestResult struct {
	Scenario variant.Scenario `json:"scenario"`
	Result   string           `json:"result"` // pass, fail or skip
	Seconds  float64          `json:"seconds"`
}

// guestDone is the guest test binary's exit status.
type guestDone struct {
	Exit int `json:"exit"`
}

// consoleReport accumulates what a boot printed.
type consoleReport struct {
	Booted  bool
	Results map[variant.Scenario]guestResult
	Done    *guestDone
	// Output holds the console lines of each guest scenario, from its
	// CGD-SCENARIO line to its result, to show with a failure.
	Output map[variant.Scenario][]string
	// Metrics are the measurements each scenario reported, in order.
	Metrics map[variant.Scenario][]guestMetric
	// Problems lists malformed markers and the guest's fatal errors.
	Problems []string
	// KernelCrashed is set when the guest kernel oopsed or panicked;
	// CrashLine is the first such line.
	KernelCrashed bool
	CrashLine     string
	// QemuCPU is the CPU time qemu used (user and system), once it has
	// exited.
	QemuCPU time.Duration

	current variant.Scenario
}

func newConsoleReport() *consoleReport {
	return &consoleReport{
		Results: map[variant.Scenario]guestResult{}, Output: map[variant.Scenario][]string{},
		Metrics: map[variant.Scenario][]guestMetric{},
	}
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
	if i := strings.Index(line, markFatal); i >= 0 {
		r.Problems = append(r.Problems, "guest: "+line[i:])
	}
	if i := strings.Index(line, markScenario); i >= 0 {
		r.current = variant.Scenario(strings.TrimSpace(line[i+len(markScenario):]))
	}
	var ended bool
	if i := strings.Index(line, markResult); i >= 0 {
		var res guestResult
		if err := json.Unmarshal([]byte(line[i+len(markResult):]), &res); err != nil || res.Scenario == "" {
			r.Problems = append(r.Problems, fmt.Sprintf("bad result line %q: %v", line, err))
		} else {
			r.Results[res.Scenario] = res
			ended = res.Scenario == r.current
		}
	}
	if i := strings.Index(line, markMetric); i >= 0 {
		var m guestMetric
		if err := json.Unmarshal([]byte(line[i+len(markMetric):]), &m); err != nil || m.Scenario == "" || m.Name == "" {
			r.Problems = append(r.Problems, fmt.Sprintf("bad metric line %q: %v", line, err))
		} else {
			r.Metrics[m.Scenario] = append(r.Metrics[m.Scenario], m)
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
	if r.current != "" {
		r.Output[r.current] = append(r.Output[r.current], line)
	}
	if ended {
		r.current = "" // the scenario's block ends with its result
	}
}

// String is the metric as the host prints it: variant-independent, one
// line, values in name order.
func (m guestMetric) String() string {
	names := make([]string, 0, len(m.Values))
	for k := range m.Values {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%s%s %s", markMetric, m.Scenario, m.Name)
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%s", k, strconv.FormatFloat(m.Values[k], 'f', -1, 64))
	}
	return b.String()
}
