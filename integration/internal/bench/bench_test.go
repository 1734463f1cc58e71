package bench

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/cpuset"
)

func TestTraceLags(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	all, bubble := cpuset.New(0, 1, 2, 3), cpuset.New(2, 3)
	rest := all.Difference(bubble)
	for _, tc := range []struct {
		name       string
		snaps      []Snapshot
		from       time.Time
		disjoint   time.Duration
		disjointOK bool
		widened    time.Duration
		widenedOK  bool
	}{
		{name: "empty trace", from: t0},
		{
			name:  "narrowed in two steps",
			snaps: []Snapshot{{at(0), all, all}, {at(100), all, rest}, {at(250), rest, rest}},
			from:  t0, disjoint: 250 * time.Millisecond, disjointOK: true,
		},
		{
			name:  "disjoint before from: zero lag",
			snaps: []Snapshot{{at(0), rest, rest}},
			from:  at(40), disjointOK: true,
		},
		{
			name:  "overlap again: only the last clearing counts",
			snaps: []Snapshot{{at(0), rest, rest}, {at(10), all, rest}, {at(300), rest, rest}},
			from:  t0, disjoint: 300 * time.Millisecond, disjointOK: true,
		},
		{
			name:  "never cleared",
			snaps: []Snapshot{{at(0), all, rest}, {at(10), all, all}},
			from:  t0, widened: 10 * time.Millisecond, widenedOK: true,
		},
		{
			name:  "widened after removal",
			snaps: []Snapshot{{at(0), rest, rest}, {at(500), all, rest}, {at(900), all, all}},
			from:  at(100), widened: 800 * time.Millisecond, widenedOK: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr Trace
			for _, s := range tc.snaps {
				tr.Add(s, 2*time.Millisecond)
				tr.Add(s, 4*time.Millisecond) // a repeat is counted, not kept
			}
			if len(tr.Snapshots) != len(tc.snaps) || tr.Rounds != 2*len(tc.snaps) {
				t.Errorf("kept %d snapshots of %d rounds, want %d of %d", len(tr.Snapshots), tr.Rounds, len(tc.snaps), 2*len(tc.snaps))
			}
			if len(tc.snaps) > 0 && tr.MeanRound() != 3*time.Millisecond {
				t.Errorf("mean round %s, want 3ms", tr.MeanRound())
			}
			if len(tc.snaps) > 0 {
				// From 2 ms before the first snapshot to the last one.
				span := tc.snaps[len(tc.snaps)-1].At.Sub(tc.snaps[0].At) + 2*time.Millisecond
				if want := span / time.Duration(tr.Rounds); tr.Period() != want {
					t.Errorf("period %s, want %s", tr.Period(), want)
				}
			}
			if d, ok := tr.DisjointAfter(bubble, tc.from); d != tc.disjoint || ok != tc.disjointOK {
				t.Errorf("DisjointAfter = %s, %v; want %s, %v", d, ok, tc.disjoint, tc.disjointOK)
			}
			if d, ok := tr.WidenedAfter(all, tc.from); d != tc.widened || ok != tc.widenedOK {
				t.Errorf("WidenedAfter = %s, %v; want %s, %v", d, ok, tc.widened, tc.widenedOK)
			}
		})
	}
}

func TestCPUTime(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		wantErr    bool
	}{
		{
			name: "plain",
			stat: "4242 (cgdelegate) S 1 4242 4242 0 -1 4194560 2890 0 0 0 137 52 0 0 20 0 9 0 3541 1290752000 4127 18446744073709551615",
			want: 1890 * time.Millisecond,
		},
		{
			name: "command with spaces and parentheses",
			stat: "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 1 1 1",
			want: 100 * time.Millisecond,
		},
		{name: "no command", stat: "7 a R 1", wantErr: true},
		{name: "too short", stat: "7 (a) R 1 2 3", wantErr: true},
		{name: "not a number", stat: "7 (a) R 1 7 7 0 -1 0 0 0 0 0 x 5 0", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CPUTime(tc.stat)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("CPUTime = %s, %v; want %s, error %v", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrFormat) {
				t.Errorf("error %v is not ErrFormat", err)
			}
		})
	}
}

func TestRSSBytes(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         int64
		wantErr      bool
	}{
		{name: "kB", status: "Name:\tcgdelegate\nVmPeak:\t 1 kB\nVmRSS:\t   20480 kB\nThreads:\t9\n", want: 20 << 20},
		{name: "missing", status: "Name:\tkthreadd\n", wantErr: true},
		{name: "bad unit", status: "VmRSS:\t12 MB\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RSSBytes(strings.NewReader(tc.status))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("RSSBytes = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestSizes(t *testing.T) {
	for _, tc := range []struct {
		cmdline string
		want    []int
		wantErr bool
	}{
		{cmdline: "console=ttyS0 cgd.variant=bench", want: DefaultSizes},
		{cmdline: "quiet cgdbench.sizes=0,10 cgd.smp=4", want: []int{0, 10}},
		{cmdline: "cgdbench.sizes=5", want: []int{5}},
		{cmdline: "cgdbench.sizes=10,0", wantErr: true},
		{cmdline: "cgdbench.sizes=0,0", wantErr: true},
		{cmdline: "cgdbench.sizes=0,x", wantErr: true},
		{cmdline: "cgdbench.sizes=-1", wantErr: true},
		{cmdline: "cgdbench.sizes=0,50,100,250", want: []int{0, 50, 100, 250}},
		{cmdline: "cgdbench.sizes=1000", wantErr: true},
		{cmdline: "cgdbench.sizes=", wantErr: true},
	} {
		t.Run(tc.cmdline, func(t *testing.T) {
			got, err := SizesFromCmdline(tc.cmdline)
			if (err != nil) != tc.wantErr || FormatSizes(got) != FormatSizes(tc.want) {
				t.Fatalf("SizesFromCmdline = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrSizes) {
				t.Errorf("error %v is not ErrSizes", err)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{{nil, 0}, {ms(5), 5 * time.Millisecond}, {ms(9, 1, 5), 5 * time.Millisecond}, {ms(4, 1, 3, 2), 2 * time.Millisecond}} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestWriteTableGoalSize: the goals are judged at GoalSize when a larger
// size was measured too.
func TestWriteTableGoalSize(t *testing.T) {
	sizes := []map[string]float64{
		{KeyN: 0, KeyPodLagMax: 0, KeyCtrLagMax: 0, KeyStart: 2},
		{KeyN: GoalSize, KeyPodLagMax: 0.5, KeyCtrLagMax: 0.25, KeyStart: 2.4},
		{KeyN: 250, KeyPodLagMax: 3, KeyCtrLagMax: 2, KeyStart: 5},
	}
	var b strings.Builder
	if err := WriteTable(&b, Table{Sizes: sizes}); err != nil {
		t.Fatal(err)
	}
	want := "Goals at N=100: exclusivity lag at most 0.5 s from RunPodSandbox and 0.25 s from CreateContainer (goal at most 1s): met; pinned pod start 1.20x of N=0 (goal at most 1.25x): met."
	if out := b.String(); !strings.Contains(out, want) || !strings.Contains(out, "| 250 | cgdelegate |") {
		t.Errorf("table lacks %q or the row of 250:\n%s", want, out)
	}
}

func TestWriteTable(t *testing.T) {
	sizes := []map[string]float64{
		{KeyN: 100, KeyPodLag: 2, KeyPodLagMax: 2.5, KeyCtrLag: 1, KeyCtrLagMax: 1.5, KeyStart: 3, KeyStartMax: 3.2, KeyRSSMiB: 21.5, KeyRunPodS: 1.9, KeyRunPodHandlerMS: 120.5, KeyDrainS: 7.25},
		{KeyN: 0, KeyPodLag: 0, KeyPodLagMax: 0, KeyCtrLag: 0, KeyCtrLagMax: 0, KeyStart: 2, KeyStartMax: 2.1},
	}
	kubelet := []map[string]float64{
		{KeyN: 100, KeyPodLag: 9, KeyPodLagMax: 11, KeyCtrLag: 8, KeyCtrLagMax: 10.5, KeyStart: 12, KeyStartMax: 13, KeyWiden: 7, KeyPollMS: 17},
		{KeyN: 0, KeyPodLag: 0, KeyPodLagMax: 0, KeyCtrLag: 0, KeyCtrLagMax: 0, KeyStart: 4, KeyStartMax: 5},
	}
	unpinned := []map[string]float64{
		{KeyN: 0, KeyStart: 1.6, KeyStartMax: 1.7, KeyRunPodS: 0.5},
		{KeyN: 100, KeyStart: 2.4, KeyStartMax: 2.9, KeyRunPodS: 1},
	}
	restart := map[string]float64{KeyN: 100, KeySyncS: 1.25, KeyAnswerS: 2, KeyUnchanged: 1}
	for _, tc := range []struct {
		name     string
		unpinned []map[string]float64
		kubelet  []map[string]float64
		want     []string
		order    []string
		absent   []string
	}{
		{
			name: "cgdelegate only",
			want: []string{
				"| 0 | cgdelegate | 0 s (0) | - |",
				"| 100 | cgdelegate | 2 s (2.5) | 20.0 ms | 1 s (1.5) | 3 s (3.2) | 1.50 |",
				"21.5 MiB",
				"Restart at N=100: connected and synchronized 1.25 s",
				"cpusets, quotas and allocation table unchanged: yes.",
				"exclusivity lag at most 2.5 s from RunPodSandbox and 1.5 s from CreateContainer (goal at most 1s): missed",
				"pinned pod start 1.50x of N=0 (goal at most 1.25x): missed.",
				"Where the lag at N=100 goes: the pinned pod's RunPodSandbox call took 1.9 s p50, of which cgdelegate's answer to the NRI event (the bubble carved, 100 node-shared cpusets written) 120.5 ms;",
				"(they went on for 7.25 s p50 after its removal was measured).",
			},
			order:  []string{"| 0 | cgdelegate |", "| 100 | cgdelegate |"},
			absent: []string{"| kubelet |", "kubelet anchor", "| nobody |", "runtime alone"},
		},
		{
			name:     "with the runtime alone",
			unpinned: unpinned,
			want: []string{
				// Only the start and its ratio to its own N=0.
				"| 100 | nobody | - | - | - | 2.4 s (2.9) | 1.50 | - | - | - | - | - | - | - |",
				"| 0 | nobody | - | - | - | 1.6 s (1.7) | 1.00 |",
				"The runtime alone (cgdelegate stopped) at N=100: pinned pod start 2.4 s p50, 1.50x of its N=0, its RunPodSandbox call 1 s; cgdelegate's start is 1.25x of it at the same size.",
			},
			order: []string{"| 0 | cgdelegate |", "| 0 | nobody |", "| 100 | cgdelegate |", "| 100 | nobody |"},
		},
		{
			name:    "with the kubelet anchor",
			kubelet: kubelet,
			want: []string{
				// The kubelet's ratio is to its own N=0; no plugin values.
				"| 100 | kubelet | 9 s (11) | - | 8 s (10.5) | 12 s (13) | 3.00 | 7 s | - | - | - | - | - | 17 ms |",
				"| 0 | kubelet | 0 s (0) | - | 0 s (0) | 4 s (5) | 1.00 |",
				"pinned pod start 1.50x of N=0 (goal at most 1.25x): missed.",
				"The kubelet anchor at N=100: exclusivity lag at most 11 s from RunPodSandbox and 10.5 s from CreateContainer, as containerd logged them (p50 9 s and 8 s); pinned pod start 3.00x of its N=0.",
			},
			// By size, cgdelegate before the kubelet at each.
			order: []string{"| 0 | cgdelegate |", "| 0 | kubelet |", "| 100 | cgdelegate |", "| 100 | kubelet |"},
		},
		{
			name:    "the kubelet at fewer sizes, without N=0",
			kubelet: kubelet[:1],
			want: []string{
				"| 100 | kubelet | 9 s (11) | - | 8 s (10.5) | 12 s (13) | - |",
				"pinned pod start (no N=0) of its N=0.",
			},
			absent: []string{"| 0 | kubelet |"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteTable(&b, Table{Sizes: sizes, Unpinned: tc.unpinned, Kubelet: tc.kubelet, Restart: restart}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("table lacks %q:\n%s", want, out)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(out, a) {
					t.Errorf("table has %q:\n%s", a, out)
				}
			}
			at := -1
			for _, o := range tc.order {
				i := strings.Index(out, o)
				if i <= at {
					t.Errorf("%q not after the rows before it:\n%s", o, out)
				}
				at = i
			}
		})
	}
}
