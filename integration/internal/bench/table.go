package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"
)

// The CGD-METRIC names of the BenchNode scenario: one MetricSize and one
// MetricUnpinnedSize per size (the same pods started with cgdelegate
// stopped: the runtime's own start at that size), then one MetricRestart at
// the largest, then one MetricKubeletSize per size the kubelet anchor
// measured (the same node with the kubelet's static CPU manager and
// PodLevelResourceManagers pinning instead of cgdelegate).
const (
	MetricSize         = "bench_size"
	MetricUnpinnedSize = "bench_unpinned_size"
	MetricRestart      = "bench_restart"
	MetricKubeletSize  = "bench_kubelet_size"
)

// The values of MetricSize and MetricKubeletSize (MetricUnpinnedSize has
// KeyN, KeySamples, KeyStart, KeyStartMax and KeyRunPodS only). Lags and latencies are
// p50 over the samples (the pinned pods started at that size), with the
// largest as ...Max. The kubelet's have no plugin values, and its times
// are what containerd logged and recorded (the kubelet makes the calls):
// its RunPodSandbox and CreateContainer log lines, the container's CRI
// StartedAt.
const (
	KeyN       = "n"
	KeySamples = "samples"
	// KeyPodLag: RunPodSandbox of the pinned pod until no node-shared
	// container's cpuset.cpus.effective overlaps its bubble (the kubelet:
	// the pod's CPUs).
	KeyPodLag, KeyPodLagMax = "pod_lag_s", "pod_lag_max_s"
	// KeyCtrLag: CreateContainer of the exclusive container until no other
	// container overlaps its CPUs.
	KeyCtrLag, KeyCtrLagMax = "ctr_lag_s", "ctr_lag_max_s"
	// KeyStart: RunPodSandbox until the exclusive container runs
	// (StartContainer returned).
	KeyStart, KeyStartMax = "start_s", "start_max_s"
	// KeyWiden: RemovePodSandbox (the kubelet: the manifest's removal)
	// until every node-shared container has every CPU again.
	KeyWiden = "widen_s"
	// KeyRunPodS: how long the pinned pod's RunPodSandbox call took (p50):
	// the runtime sends the NRI event, where the bubble is carved, near
	// its end, so a pod lag about as long is the runtime's, not the
	// plugin's. Not in the table; the CGD-METRIC line has it.
	KeyRunPodS = "run_pod_s"
	// KeyRunPodHandlerMS: cgdelegate's answer to the pinned pod's NRI
	// RunPodSandbox (p50, from its event duration histogram): carving the
	// bubble and writing the cpusets of every node-shared container. The
	// rest of the RunPodSandbox call is the runtime's.
	KeyRunPodHandlerMS = "run_pod_handler_ms"
	// KeyDrainS: before each sample, how long the runtime updates of the
	// sample before (the fleet widened after its pod's removal) still went
	// on (p50): each sample starts once they are done, on a settled node.
	KeyDrainS = "drain_s"
	// KeyPollMS: the mean time from one polling round to the next, the
	// resolution of the lags.
	KeyPollMS = "poll_round_ms"
	// KeyCPUPerUpdateMS: the plugin's CPU time (utime+stime) from
	// RunPodSandbox until the bubble was clear, per node-shared container
	// it updated.
	KeyCPUPerUpdateMS = "plugin_cpu_per_update_ms"
	// KeyCPUPerCreateMS: the plugin's CPU time while the fleet grew to
	// this size, per container added (with its share of its pod's events).
	KeyCPUPerCreateMS = "plugin_cpu_per_create_ms"
	KeyRSSMiB         = "plugin_rss_mib"
	KeyFDs            = "plugin_fds"
	// KeyGoroutines is go_goroutines of the plugin's /metrics.
	KeyGoroutines = "plugin_goroutines"
)

// The values of MetricRestart.
const (
	// KeySyncS: the new plugin process started until containerd logged it
	// connected and synchronized.
	KeySyncS = "sync_s"
	// KeyAnswerS: the new process started until a CreateContainer through
	// it returned.
	KeyAnswerS = "answer_s"
	// KeySyncCPUMS: the new process's CPU time until synchronized.
	KeySyncCPUMS = "plugin_cpu_to_sync_ms"
	// KeyUnchanged is 1 when every pinned and node-shared container's
	// cpuset.cpus, cpuset.mems and cpu.max, and the plugin's allocation
	// table, were the same after the restart.
	KeyUnchanged = "cpusets_unchanged"
)

// The CGD-METRIC names of the suite's scale scenarios: ScaleChurn's
// MetricChurn, with the plugin's footprint at the start, after the warm-up
// wave and at the end (KeyRSSMiB, KeyFDs and KeyGoroutines with
// SuffixStart, SuffixWarm and SuffixEnd); ScaleRestart's MetricScaleRestart,
// with the values of MetricRestart and KeyPods.
const (
	MetricChurn        = "scale_churn"
	MetricScaleRestart = "scale_restart"
)

// The values of MetricChurn.
const (
	KeyPods  = "pods"
	KeyWaves = "waves"
	// KeyChurnS: the waves' creations and removals, in seconds.
	KeyChurnS = "churn_s"
	// KeyRSSToleranceMiB: how far the RSS may end above the warm-up's.
	KeyRSSToleranceMiB = "rss_tolerance_mib"

	SuffixStart = "_start"
	SuffixWarm  = "_warm"
	SuffixEnd   = "_end"
)

// The bench's goals, judged at GoalSize (the largest size when it was not
// measured).
const (
	GoalSize       = 100
	GoalLag        = time.Second
	GoalStartRatio = 1.25
)

// Seconds is d in seconds, to the millisecond.
func Seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// Median is the p50 of ds (the lower middle of an even count); zero for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[(len(s)-1)/2]
}

// Who pinned the pinned pods of a row of the table: nobody is the runtime
// alone (cgdelegate stopped, no kubelet).
const (
	ByCgdelegate = "cgdelegate"
	ByNobody     = "nobody"
	ByKubelet    = "kubelet"
)

// Table is what the BenchNode scenario measured, by metric: Sizes
// (MetricSize), Unpinned (MetricUnpinnedSize), Kubelet (MetricKubeletSize)
// and Restart (MetricRestart); any may be missing.
type Table struct {
	Sizes, Unpinned, Kubelet []map[string]float64
	Restart                  map[string]float64
}

// WriteTable writes the measurements as a Markdown table, one row per size
// and who pinned (at each size cgdelegate, nobody, then the kubelet
// anchor), then the restart and the goals. Each start ratio is to the
// N=0 of its own rows; the columns a row did not measure are "-".
func WriteTable(w io.Writer, tab Table) error {
	type row struct {
		by   string
		vals map[string]float64
	}
	var rows []row
	for _, x := range []struct {
		by   string
		rows []map[string]float64
	}{{ByCgdelegate, tab.Sizes}, {ByNobody, tab.Unpinned}, {ByKubelet, tab.Kubelet}} {
		for _, s := range x.rows {
			rows = append(rows, row{x.by, s})
		}
	}
	slices.SortStableFunc(rows, func(a, b row) int { return int(a.vals[KeyN] - b.vals[KeyN]) })
	sizes, restart := tab.Sizes, tab.Restart
	base := map[string]float64{ByCgdelegate: startAtZero(sizes), ByNobody: startAtZero(tab.Unpinned), ByKubelet: startAtZero(tab.Kubelet)}
	p := &printer{w: w}
	p.line("| N | pinned by | exclusivity lag, pod p50 (max) | per updated container | lag from CreateContainer p50 (max) | pinned pod start p50 (max) | start / N=0 | widen after removal | plugin CPU per create | plugin CPU per update | plugin RSS | fds | goroutines | poll round |")
	p.line("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		s, n := r.vals, r.vals[KeyN]
		perUpdate, ratio, rss := "-", "-", "-"
		if n > 0 && r.by == ByCgdelegate {
			perUpdate = fmt.Sprintf("%.1f ms", s[KeyPodLag]*1000/n)
		}
		if base[r.by] > 0 {
			ratio = fmt.Sprintf("%.2f", s[KeyStart]/base[r.by])
		}
		if _, ok := s[KeyRSSMiB]; ok {
			rss = num(s, KeyRSSMiB) + " MiB"
		}
		p.line("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |",
			num(s, KeyN), r.by, secs(s, KeyPodLag, KeyPodLagMax), perUpdate,
			secs(s, KeyCtrLag, KeyCtrLagMax), secs(s, KeyStart, KeyStartMax), ratio,
			secs(s, KeyWiden, ""), ms(s, KeyCPUPerCreateMS), ms(s, KeyCPUPerUpdateMS),
			rss, num(s, KeyFDs), num(s, KeyGoroutines), ms(s, KeyPollMS))
	}
	if restart != nil {
		unchanged := "no"
		if restart[KeyUnchanged] == 1 {
			unchanged = "yes"
		}
		p.line("")
		p.line("Restart at N=%s: connected and synchronized %s s after the new process started (%s ms of its CPU), a CreateContainer through it returned at %s s; plugin RSS %s MiB, %s fds, %s goroutines after it; cpusets, quotas and allocation table unchanged: %s.",
			num(restart, KeyN), num(restart, KeySyncS), num(restart, KeySyncCPUMS), num(restart, KeyAnswerS),
			num(restart, KeyRSSMiB), num(restart, KeyFDs), num(restart, KeyGoroutines), unchanged)
	}
	last := atSize(sizes, GoalSize)
	if last == nil {
		last = largest(sizes)
	}
	if last != nil {
		b := base[ByCgdelegate]
		p.line("")
		p.line("Goals at N=%s: exclusivity lag at most %s s from RunPodSandbox and %s s from CreateContainer (goal at most %s): %s; pinned pod start %s of N=0 (goal at most %.2fx): %s.",
			num(last, KeyN), num(last, KeyPodLagMax), num(last, KeyCtrLagMax), GoalLag, verdict(last[KeyPodLagMax] <= GoalLag.Seconds() && last[KeyCtrLagMax] <= GoalLag.Seconds()),
			ratioText(last[KeyStart], b), GoalStartRatio, ratioVerdict(last[KeyStart], b))
		if _, ok := last[KeyRunPodHandlerMS]; ok {
			p.line("")
			p.line("Where the lag at N=%s goes: the pinned pod's RunPodSandbox call took %s s p50, of which cgdelegate's answer to the NRI event (the bubble carved, %s node-shared cpusets written) %s ms; the runtime sends the event near the call's end. Each sample started once the runtime's updates of the one before were done (they went on for %s s p50 after its removal was measured).",
				num(last, KeyN), num(last, KeyRunPodS), num(last, KeyN), num(last, KeyRunPodHandlerMS), num(last, KeyDrainS))
		}
		if same := atSize(tab.Unpinned, last[KeyN]); same != nil && same[KeyStart] > 0 {
			p.line("")
			p.line("The runtime alone (cgdelegate stopped) at N=%s: pinned pod start %s s p50, %s of its N=0, its RunPodSandbox call %s s; cgdelegate's start is %s of it at the same size.",
				num(same, KeyN), num(same, KeyStart), ratioText(same[KeyStart], base[ByNobody]), num(same, KeyRunPodS), ratioText(last[KeyStart], same[KeyStart]))
		}
	}
	if last := largest(tab.Kubelet); last != nil {
		p.line("")
		p.line("The kubelet anchor at N=%s: exclusivity lag at most %s s from RunPodSandbox and %s s from CreateContainer, as containerd logged them (p50 %s s and %s s); pinned pod start %s of its N=0.",
			num(last, KeyN), num(last, KeyPodLagMax), num(last, KeyCtrLagMax), num(last, KeyPodLag), num(last, KeyCtrLag),
			ratioText(last[KeyStart], base[ByKubelet]))
	}
	return p.err
}

// startAtZero is the pinned pod start at N=0 of rows; zero when N=0 was
// not measured.
func startAtZero(rows []map[string]float64) float64 {
	for _, s := range rows {
		if s[KeyN] == 0 {
			return s[KeyStart]
		}
	}
	return 0
}

// atSize is the row of size n; nil for none.
func atSize(rows []map[string]float64, n float64) map[string]float64 {
	for _, s := range rows {
		if s[KeyN] == n {
			return s
		}
	}
	return nil
}

// largest is the row of the largest N; nil for none.
func largest(rows []map[string]float64) map[string]float64 {
	var out map[string]float64
	for _, s := range rows {
		if out == nil || s[KeyN] > out[KeyN] {
			out = s
		}
	}
	return out
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) line(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}

// num formats a value with at most three decimals; "-" when it is missing.
func num(m map[string]float64, key string) string {
	v, ok := m[key]
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

// secs formats a time in seconds with its max in parentheses (none when
// maxKey is ""); "-" when it is missing.
func secs(m map[string]float64, key, maxKey string) string {
	if _, ok := m[key]; !ok {
		return "-"
	}
	if maxKey == "" {
		return num(m, key) + " s"
	}
	return fmt.Sprintf("%s s (%s)", num(m, key), num(m, maxKey))
}

func ms(m map[string]float64, key string) string {
	if _, ok := m[key]; !ok {
		return "-"
	}
	return num(m, key) + " ms"
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func ratioText(v, base float64) string {
	if base <= 0 {
		return "(no N=0)"
	}
	return fmt.Sprintf("%.2fx", v/base)
}

func ratioVerdict(v, base float64) string {
	if base <= 0 {
		return "not measured"
	}
	return verdict(v/base <= GoalStartRatio)
}
