package vm

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

func TestConsoleReport(t *testing.T) {
	tests := []struct {
		name     string
		console  string
		booted   bool
		results  map[string]string
		done     *guestDone
		problems int
		crashed  bool
		output   map[string]int
	}{
		{
			name:    "empty console is not a pass",
			console: "",
			results: map[string]string{},
		},
		{
			name: "boot, two results, done",
			console: `[    0.1] kernel noise
CGD-BOOT kernel=6.12
=== RUN   TestScenarios
=== RUN   TestScenarios/A
CGD-SCENARIO A
    a_test.go:1: hello
=== RUN   TestScenarios/A/sub
--- PASS: TestScenarios/A/sub (0.10s)
CGD-RESULT {"scenario":"A","result":"pass","seconds":0.1}
--- PASS: TestScenarios/A (0.10s)
=== RUN   TestScenarios/B
CGD-SCENARIO B
    b_test.go:1: boom
CGD-RESULT {"scenario":"B","result":"fail","seconds":0.2}
--- FAIL: TestScenarios/B (0.20s)
CGD-DONE {"exit":1}`,
			booted:  true,
			results: map[string]string{"A": "pass", "B": "fail"},
			done:    &guestDone{Exit: 1},
			output:  map[string]int{"A": 5, "B": 3},
		},
		{
			name:     "kernel noise before a marker, and a broken marker",
			console:  "[ 3.2] x CGD-RESULT {\"scenario\":\"C\",\"result\":\"pass\"}\nCGD-RESULT {oops\r\n",
			results:  map[string]string{"C": "pass"},
			problems: 1,
		},
		{
			name:     "the guest gives up",
			console:  "CGD-BOOT kernel=6.12\nCGD-FATAL variant: kernel parameter cgd.smp: missing\nCGD-DONE {\"exit\":2}",
			booted:   true,
			results:  map[string]string{},
			done:     &guestDone{Exit: 2},
			problems: 1,
		},
		{
			name:    "kernel oops under TCG",
			console: "[    3.072918] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n[    3.1] Kernel panic - not syncing: Fatal exception",
			results: map[string]string{},
			crashed: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newConsoleReport()
			for _, l := range strings.Split(tc.console, "\n") {
				r.Feed(l)
			}
			if r.Booted != tc.booted {
				t.Errorf("Booted = %v, want %v", r.Booted, tc.booted)
			}
			got := map[string]string{}
			for k, v := range r.Results {
				got[string(k)] = v.Result
			}
			if !reflect.DeepEqual(got, tc.results) {
				t.Errorf("results = %v, want %v", got, tc.results)
			}
			if !reflect.DeepEqual(r.Done, tc.done) {
				t.Errorf("done = %+v, want %+v", r.Done, tc.done)
			}
			if r.KernelCrashed != tc.crashed {
				t.Errorf("KernelCrashed = %v (%q), want %v", r.KernelCrashed, r.CrashLine, tc.crashed)
			}
			if len(r.Problems) != tc.problems {
				t.Errorf("problems = %q, want %d", r.Problems, tc.problems)
			}
			for name, n := range tc.output {
				if out := r.Output[variant.Scenario(name)]; len(out) != n {
					t.Errorf("output[%s] = %q, want %d lines", name, out, n)
				}
			}
		})
	}
}

func TestConsoleMetrics(t *testing.T) {
	r := newConsoleReport()
	for _, l := range []string{
		"CGD-SCENARIO L",
		`[ 9.1] noise CGD-METRIC {"scenario":"L","name":"start","values":{"p50_on":1.5,"p50_off":1.25,"n":12}}`,
		`CGD-METRIC {"scenario":"L","values":{}}`,
		"CGD-METRIC not json",
	} {
		r.Feed(l)
	}
	ms := r.Metrics["L"]
	if len(ms) != 1 {
		t.Fatalf("metrics = %+v, want one", r.Metrics)
	}
	if got, want := ms[0].String(), "CGD-METRIC L start n=12 p50_off=1.25 p50_on=1.5"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if len(r.Problems) != 2 {
		t.Errorf("problems = %q, want the nameless and the broken metric", r.Problems)
	}
}
