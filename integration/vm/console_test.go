package vm

import (
	"reflect"
	"strings"
	"testing"
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
=== RUN   TestA
    a_test.go:1: hello
=== RUN   TestA/sub
--- PASS: TestA (0.10s)
CGD-RESULT {"test":"TestA","result":"pass","seconds":0.1}
=== RUN   TestB
--- FAIL: TestB (0.20s)
CGD-RESULT {"test":"TestB","result":"fail","seconds":0.2}
CGD-DONE {"exit":1}`,
			booted:  true,
			results: map[string]string{"TestA": "pass", "TestB": "fail"},
			done:    &guestDone{Exit: 1},
			output:  map[string]int{"TestA": 5, "TestB": 3},
		},
		{
			name:     "kernel noise before a marker, and a broken marker",
			console:  "[ 3.2] x CGD-RESULT {\"test\":\"TestC\",\"result\":\"pass\"}\nCGD-RESULT {oops\r\n",
			results:  map[string]string{"TestC": "pass"},
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
				got[k] = v.Result
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
				if len(r.Output[name]) != n {
					t.Errorf("output[%s] = %q, want %d lines", name, r.Output[name], n)
				}
			}
		})
	}
}
