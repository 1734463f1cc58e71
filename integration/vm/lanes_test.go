package vm

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

func TestVMLanes(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
		err  string
	}{
		{"", 2, ""},
		{"1", 1, ""},
		{"3", 3, ""},
		{"0", 0, `CGD_VM_LANES="0"`},
		{"nine", 0, `CGD_VM_LANES="nine"`},
		{"9", 0, "from 1 to 8"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			n, err := vmLanes(tc.env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("vmLanes(%q) = %d, %v; want an error with %q", tc.env, n, err, tc.err)
				}
				return
			}
			if err != nil || n != tc.want {
				t.Fatalf("vmLanes(%q) = %d, %v; want %d", tc.env, n, err, tc.want)
			}
		})
	}
}

// TestRunInLanes: every variant runs once; never more than lanes at once;
// a variant that boots alone never overlaps another, and the variants
// before it in the suite have ended when it starts, those after it start
// when it has ended.
func TestRunInLanes(t *testing.T) {
	light := func(name string) variant.Variant { return variant.Variant{Name: name, SMP: 2} }
	vs := []variant.Variant{
		light("a"), light("b"), light("c"),
		{Name: "cluster", SMP: 4, Cluster: true},
		light("d"),
		{Name: "timed", SMP: 4, Scenarios: []variant.Scenario{variant.ScaleChurn}},
		{Name: "wide", SMP: 8},
		light("e"), light("f"),
	}
	for _, lanes := range []int{1, 2, 3} {
		t.Run(strings.Repeat("I", lanes), func(t *testing.T) {
			var mu sync.Mutex
			running := map[string]bool{}
			var started []string
			var seq int
			startAt, endAt := map[string]int{}, map[string]int{}
			maxAtOnce := 0
			runInLanes(lanes, vs, func(v variant.Variant) {
				mu.Lock()
				for other := range running {
					if v.BootsAlone() {
						t.Errorf("%s started beside %s", v.Name, other)
					}
					for _, w := range vs {
						if w.Name == other && w.BootsAlone() {
							t.Errorf("%s started beside %s, which boots alone", v.Name, other)
						}
					}
				}
				running[v.Name] = true
				started = append(started, v.Name)
				seq++
				startAt[v.Name] = seq
				maxAtOnce = max(maxAtOnce, len(running))
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				delete(running, v.Name)
				seq++
				endAt[v.Name] = seq
				mu.Unlock()
			})
			if len(started) != len(vs) {
				t.Fatalf("started %v, want each of %d variants once", started, len(vs))
			}
			for i, v := range vs {
				if !v.BootsAlone() {
					continue
				}
				for _, w := range vs[:i] {
					if endAt[w.Name] > startAt[v.Name] {
						t.Errorf("%s started before %s, earlier in the suite, ended", v.Name, w.Name)
					}
				}
				for _, w := range vs[i+1:] {
					if startAt[w.Name] < endAt[v.Name] {
						t.Errorf("%s, later in the suite, started before %s ended", w.Name, v.Name)
					}
				}
			}
			if maxAtOnce > lanes {
				t.Errorf("%d variants ran at once with %d lanes", maxAtOnce, lanes)
			}
			if lanes > 1 && maxAtOnce < 2 {
				t.Errorf("with %d lanes the light variants never ran side by side", lanes)
			}
		})
	}
}
