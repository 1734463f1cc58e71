package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"
)

// The CGD-METRIC names of the BenchNode scenario: one MetricSize per size,
// then one MetricRestart at the largest.
const (
	MetricSize    = "bench_size"
	MetricRestart = "bench_restart"
)

// The values of MetricSize. Lags and latencies are p50 over the samples
// (the pinned pods started at that size), with the largest as ...Max.
const (
	KeyN       = "n"
	KeySamples = "samples"
	// KeyPodLag: RunPodSandbox of the pinned pod until no node-shared
	// container's cpuset.cpus.effective overlaps its bubble.
	KeyPodLag, KeyPodLagMax = "pod_lag_s", "pod_lag_max_s"
	// KeyCtrLag: CreateContainer of the exclusive container until no other
	// container overlaps its CPUs.
	KeyCtrLag, KeyCtrLagMax = "ctr_lag_s", "ctr_lag_max_s"
	// KeyStart: RunPodSandbox until the exclusive container runs
	// (StartContainer returned).
	KeyStart, KeyStartMax = "start_s", "start_max_s"
	// KeyWiden: RemovePodSandbox until every node-shared container has
	// every CPU again.
	KeyWiden = "widen_s"
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

// Goals of issue 23 at the largest size.
const (
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

// WriteTable writes the measurements as a Markdown table (one row per
// size, in size order), the restart and the goals.
func WriteTable(w io.Writer, sizes []map[string]float64, restart map[string]float64) error {
	sizes = slices.Clone(sizes)
	slices.SortFunc(sizes, func(a, b map[string]float64) int { return int(a[KeyN] - b[KeyN]) })
	var base float64
	for _, s := range sizes {
		if s[KeyN] == 0 {
			base = s[KeyStart]
		}
	}
	p := &printer{w: w}
	p.line("| N | exclusivity lag, pod p50 (max) | per updated container | lag from CreateContainer p50 (max) | pinned pod start p50 (max) | start / N=0 | widen after removal | plugin CPU per create | plugin CPU per update | plugin RSS | fds | goroutines | poll round |")
	p.line("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range sizes {
		n := s[KeyN]
		perUpdate, ratio := "-", "-"
		if n > 0 {
			perUpdate = fmt.Sprintf("%.1f ms", s[KeyPodLag]*1000/n)
		}
		if base > 0 {
			ratio = fmt.Sprintf("%.2f", s[KeyStart]/base)
		}
		p.line("| %s | %s s (%s) | %s | %s s (%s) | %s s (%s) | %s | %s s | %s | %s | %s MiB | %s | %s | %s ms |",
			num(s, KeyN), num(s, KeyPodLag), num(s, KeyPodLagMax), perUpdate,
			num(s, KeyCtrLag), num(s, KeyCtrLagMax), num(s, KeyStart), num(s, KeyStartMax), ratio,
			num(s, KeyWiden), ms(s, KeyCPUPerCreateMS), ms(s, KeyCPUPerUpdateMS),
			num(s, KeyRSSMiB), num(s, KeyFDs), num(s, KeyGoroutines), num(s, KeyPollMS))
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
	if len(sizes) > 0 {
		last := sizes[len(sizes)-1]
		p.line("")
		p.line("Goals at N=%s: exclusivity lag at most %s s from RunPodSandbox and %s s from CreateContainer (goal at most %s): %s; pinned pod start %s of N=0 (goal at most %.2fx): %s.",
			num(last, KeyN), num(last, KeyPodLagMax), num(last, KeyCtrLagMax), GoalLag, verdict(last[KeyPodLagMax] <= GoalLag.Seconds() && last[KeyCtrLagMax] <= GoalLag.Seconds()),
			ratioText(last[KeyStart], base), GoalStartRatio, ratioVerdict(last[KeyStart], base))
	}
	return p.err
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
