package bench

import (
	"maps"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ds := func(secs ...int) []time.Duration {
		out := make([]time.Duration, len(secs))
		for i, s := range secs {
			out[i] = time.Duration(s) * time.Second
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 … 1, unsorted
	}
	tests := []struct {
		name string
		ds   []time.Duration
		q    float64
		want time.Duration
	}{
		{"none", nil, 0.5, 0},
		{"one", ds(7), 0.99, 7 * time.Second},
		{"p50 of four", ds(4, 1, 3, 2), 0.5, 2 * time.Second},
		{"p99 of four", ds(4, 1, 3, 2), 0.99, 4 * time.Second},
		{"p50 of a hundred", ds(hundred...), 0.5, 50 * time.Second},
		{"p99 of a hundred", ds(hundred...), 0.99, 99 * time.Second},
		{"p100", ds(hundred...), 1, 100 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.ds, tc.q); got != tc.want {
				t.Fatalf("Percentile(%v, %v) = %v, want %v", tc.ds, tc.q, got, tc.want)
			}
		})
	}
}

func TestWriteBurst(t *testing.T) {
	burst := func(round int, with bool, p50, p99 float64) map[string]float64 {
		w := 0.0
		if with {
			w = 1
		}
		return map[string]float64{KeyBurstRound: float64(round), KeyBurstWith: w, KeyBurstPods: 50, KeyBurstP50: p50, KeyBurstP99: p99}
	}
	restarted := func(b map[string]float64) map[string]float64 {
		b[KeyBurstAfterRestart] = 1
		b[KeyBurstRunPodP50], b[KeyBurstCreateP50], b[KeyBurstStartP50] = 2, 3, 4
		b[KeyBurstPluginCPUMS], b[KeyBurstHandlersMS] = 500, 40
		return b
	}
	hook := map[string]float64{KeyHookExecs: 20, KeyHookWallMS: 310.5, KeyHookCPUMS: 250, KeyTrueWallMS: 12, KeyTrueCPUMS: 10}
	withRun := func(h map[string]float64) map[string]float64 {
		h = maps.Clone(h)
		h[KeyHookRunWallMS], h[KeyHookRunCPUMS] = 330, 262.5
		return h
	}
	tests := []struct {
		name   string
		bursts []map[string]float64
		hook   map[string]float64
		want   []string
		not    []string
	}{
		{
			name:   "met",
			bursts: []map[string]float64{burst(0, true, 10.2, 14), burst(0, false, 10, 13), burst(1, false, 11, 15), burst(1, true, 10.9, 15.5)},
			want:   []string{"| 0 | running | 50 | 10.2 s | 14 s |", "| 1 | stopped | 50 | 11 s | 15 s |", "with cgdelegate 10.200 s, without 10.000 s (medians of 2 and 2 bursts): 1.02x (goal at most 1.05x): met."},
		},
		{
			name:   "missed",
			bursts: []map[string]float64{burst(0, true, 12, 14), burst(0, false, 10, 13)},
			want:   []string{"1.20x (goal at most 1.05x): missed."},
			not:    []string{"hook"},
		},
		{
			name:   "with the hook's start",
			bursts: []map[string]float64{burst(0, true, 12, 14), burst(0, false, 10, 13)},
			hook:   hook,
			want:   []string{"(`cgdelegate-hook -version`, 20 execs): 310.5 ms wall, 250 ms CPU each, against /bin/true's 12 ms and 10 ms: each writable container's start pays at least 240.0 ms more CPU for the hook (12.0 s for a burst of 50 pods)."},
			not:    []string{"whole run"},
		},
		{
			name:   "with the hook's whole run",
			bursts: []map[string]float64{burst(0, true, 12, 14), burst(0, false, 10, 13)},
			hook:   withRun(hook),
			want:   []string{"A whole run of the hook as runc runs it (its checks of a running writable container): 330 ms wall, 262.5 ms CPU each, 12.5 ms of CPU more than its start."},
		},
		{
			name:   "one side only: no verdict",
			bursts: []map[string]float64{burst(0, true, 12, 14)},
			want:   []string{"| 0 | running |"},
			not:    []string{"goal"},
		},
		{
			name: "the burst right after a restart is shown, not in the ratio",
			bursts: []map[string]float64{
				burst(0, true, 10.2, 14), burst(0, false, 10, 13), burst(1, false, 11, 15),
				restarted(burst(1, true, 13.2, 16)), burst(1, true, 10.9, 15.5),
			},
			want: []string{
				"| 1 | just restarted (not in the ratio) | 50 | 13.2 s | 16 s | 2 s | 3 s | 4 s | 500 ms | 40 ms |",
				"(medians of 2 and 2 bursts): 1.02x (goal at most 1.05x): met.",
				"Right after cgdelegate restarted (the first burst of the new process): p50 13.200 s, 1.32x of the median without.",
			},
		},
		{
			name:   "no phases measured",
			bursts: []map[string]float64{burst(0, false, 10, 13)},
			want:   []string{"| 0 | stopped | 50 | 10 s | 13 s | - | - | - | - | - |"},
			not:    []string{"restarted"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteBurst(&b, tc.bursts, tc.hook); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(b.String(), n) {
					t.Errorf("output has %q:\n%s", n, b.String())
				}
			}
		})
	}
}

func TestBurstOrder(t *testing.T) {
	if BurstOrder(0) != [2]bool{true, false} || BurstOrder(1) != [2]bool{false, true} || BurstOrder(2) != BurstOrder(0) {
		t.Fatalf("BurstOrder: %v %v %v, want rounds alternating, with cgdelegate first in round 0", BurstOrder(0), BurstOrder(1), BurstOrder(2))
	}
}
