package bench

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// MetricBurst is one burst of the writable pod burst:
// BurstPods pods annotated for writable cgroups created at once through
// the CRI, with cgdelegate running or stopped, in rounds that alternate
// which goes first.
const MetricBurst = "bench_burst"

// The values of MetricBurst.
const (
	KeyBurstRound = "round"
	// KeyBurstWith is 1 for a burst with cgdelegate, 0 without it.
	KeyBurstWith = "with_cgdelegate"
	KeyBurstPods = "pods"
	// KeyBurstP50 and KeyBurstP99: from the burst's start until a pod's
	// container runs (RunPodSandbox, CreateContainer and StartContainer
	// returned), over the burst's pods.
	KeyBurstP50, KeyBurstP99 = "p50_s", "p99_s"
	// KeyBurstRunPodP50, KeyBurstCreateP50 and KeyBurstStartP50: the p50
	// of each call's own duration over the burst's pods (RunPodSandbox,
	// CreateContainer, StartContainer, where the createRuntime hook runs).
	KeyBurstRunPodP50, KeyBurstCreateP50, KeyBurstStartP50 = "run_pod_p50_s", "create_p50_s", "start_p50_s"
	// KeyBurstPluginCPUMS: the plugin's CPU time (utime+stime) from the
	// burst's start until its last pod ran; KeyBurstHandlersMS: the time
	// its NRI handlers took over the same span, summed
	// (cgdelegate_nri_event_duration_seconds). Bursts with cgdelegate only.
	KeyBurstPluginCPUMS, KeyBurstHandlersMS = "plugin_cpu_ms", "handlers_ms"
	// KeyBurstAfterRestart is 1 for the burst right after cgdelegate
	// restarted: reported, but not in the ratio, which compares a running
	// plugin with none (a fresh process's first burst is its own number).
	KeyBurstAfterRestart = "after_restart"
)

// MetricHookExec is the start of the createRuntime hook binary, timed in
// the guest against /bin/true's (KeyHookExecs times each, means).
const MetricHookExec = "bench_hook_exec"

// The values of MetricHookExec: wall and CPU (the child's utime+stime) in
// milliseconds.
const (
	KeyHookExecs                = "execs"
	KeyHookWallMS, KeyHookCPUMS = "hook_wall_ms", "hook_cpu_ms"
	KeyTrueWallMS, KeyTrueCPUMS = "true_wall_ms", "true_cpu_ms"
	// KeyHookRunWallMS and KeyHookRunCPUMS are a whole run of the hook as
	// runc runs it at a writable container's start: its checks too.
	KeyHookRunWallMS, KeyHookRunCPUMS = "hook_run_wall_ms", "hook_run_cpu_ms"
)

// GoalBurstRatio is the burst's goal: the p50 pod start with cgdelegate at
// most this times the p50 without it.
const GoalBurstRatio = 1.05

// Percentile is the q-th percentile of ds (0 < q <= 1), the nearest rank:
// the smallest value with at least q of them at or below it; zero for none.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	i := int(float64(len(s))*q+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// WriteBurst writes the bursts as a Markdown table (one row per burst, in
// the order run) and the ratio of the median p50 with cgdelegate to the
// median p50 without it, against GoalBurstRatio, leaving out the bursts
// right after a restart, which get a sentence of their own; then the
// hook's start (MetricHookExec) when hook is not nil.
func WriteBurst(w io.Writer, bursts []map[string]float64, hook map[string]float64) error {
	p := &printer{w: w}
	p.line("| round | cgdelegate | pods | to running p50 | p99 | RunPodSandbox p50 | CreateContainer p50 | StartContainer p50 | plugin CPU | plugin handlers |")
	p.line("|---|---|---|---|---|---|---|---|---|---|")
	var with, without, restarted []time.Duration
	for _, b := range bursts {
		on, fresh := b[KeyBurstWith] == 1, b[KeyBurstAfterRestart] == 1
		p50 := time.Duration(b[KeyBurstP50] * float64(time.Second))
		state := "stopped"
		switch {
		case on && fresh:
			state = "just restarted (not in the ratio)"
			restarted = append(restarted, p50)
		case on:
			state = "running"
			with = append(with, p50)
		default:
			without = append(without, p50)
		}
		p.line("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", num(b, KeyBurstRound), state, num(b, KeyBurstPods),
			secs(b, KeyBurstP50, ""), secs(b, KeyBurstP99, ""), secs(b, KeyBurstRunPodP50, ""), secs(b, KeyBurstCreateP50, ""), secs(b, KeyBurstStartP50, ""),
			ms(b, KeyBurstPluginCPUMS), ms(b, KeyBurstHandlersMS))
	}
	if len(with) > 0 && len(without) > 0 && Median(without) > 0 {
		a, b := Median(with).Seconds(), Median(without).Seconds()
		p.line("")
		p.line("Writable pod burst: p50 with cgdelegate %.3f s, without %.3f s (medians of %d and %d bursts): %.2fx (goal at most %.2fx): %s.",
			a, b, len(with), len(without), a/b, GoalBurstRatio, verdict(a/b <= GoalBurstRatio))
		if len(restarted) > 0 {
			p.line("")
			p.line("Right after cgdelegate restarted (the first burst of the new process): p50 %.3f s, %.2fx of the median without.",
				Median(restarted).Seconds(), Median(restarted).Seconds()/b)
		}
	}
	if hook != nil {
		extra := hook[KeyHookCPUMS] - hook[KeyTrueCPUMS]
		perBurst := ""
		if len(bursts) > 0 {
			perBurst = fmt.Sprintf(" (%.1f s for a burst of %s pods)", bursts[0][KeyBurstPods]*extra/1000, num(bursts[0], KeyBurstPods))
		}
		p.line("")
		p.line("The createRuntime hook's start (`cgdelegate-hook -version`, %s execs): %s ms wall, %s ms CPU each, against /bin/true's %s ms and %s ms: each writable container's start pays at least %.1f ms more CPU for the hook%s.",
			num(hook, KeyHookExecs), num(hook, KeyHookWallMS), num(hook, KeyHookCPUMS), num(hook, KeyTrueWallMS), num(hook, KeyTrueCPUMS),
			extra, perBurst)
		if _, ok := hook[KeyHookRunCPUMS]; ok {
			p.line("")
			p.line("A whole run of the hook as runc runs it (its checks of a running writable container): %s ms wall, %s ms CPU each, %.1f ms of CPU more than its start.",
				num(hook, KeyHookRunWallMS), num(hook, KeyHookRunCPUMS), hook[KeyHookRunCPUMS]-hook[KeyHookCPUMS])
		}
	}
	return p.err
}

// BurstOrder says whether round r runs its burst with cgdelegate first:
// rounds alternate, so that neither side always meets the node fresher.
func BurstOrder(r int) [2]bool {
	if r%2 == 0 {
		return [2]bool{true, false}
	}
	return [2]bool{false, true}
}

// BurstName names a burst for logs.
func BurstName(round int, with bool) string {
	if with {
		return fmt.Sprintf("round %d with cgdelegate", round)
	}
	return fmt.Sprintf("round %d without cgdelegate", round)
}
