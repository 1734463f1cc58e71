package bench

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/policy"
)

// Footprint is what the plugin process holds at one moment: its RSS
// (VmRSS), its open fds and its goroutines (go_goroutines of its /metrics).
type Footprint struct {
	RSS        int64
	FDs        int
	Goroutines int
}

// MiB is the RSS in MiB, to a tenth.
func (f Footprint) MiB() float64 { return float64(f.RSS*10>>20) / 10 }

func (f Footprint) String() string {
	return fmt.Sprintf("RSS %.1f MiB, %d fds, %d goroutines", f.MiB(), f.FDs, f.Goroutines)
}

// Put adds the footprint to a CGD-METRIC's values under KeyRSSMiB, KeyFDs
// and KeyGoroutines, each followed by suffix.
func (f Footprint) Put(values map[string]float64, suffix string) {
	values[KeyRSSMiB+suffix] = f.MiB()
	values[KeyFDs+suffix] = float64(f.FDs)
	values[KeyGoroutines+suffix] = float64(f.Goroutines)
}

// Leaks judges the footprint at the end of a churn: its goroutines must be
// back to start (the plugin before any churn), its fds at most warm's (the
// plugin after the warm-up wave: an fd is never garbage, one more is a
// leak) and its RSS at most warm's plus rssTolerance. It returns one
// sentence per leak, none when there is none.
func Leaks(start, warm, end Footprint, rssTolerance int64) []string {
	var out []string
	if end.Goroutines > start.Goroutines {
		out = append(out, fmt.Sprintf("%d goroutines after the churn, %d before it", end.Goroutines, start.Goroutines))
	}
	if end.FDs > warm.FDs {
		out = append(out, fmt.Sprintf("%d open fds after the churn, %d after its warm-up wave", end.FDs, warm.FDs))
	}
	if end.RSS > warm.RSS+rssTolerance {
		out = append(out, fmt.Sprintf("RSS %.1f MiB after the churn, %.1f MiB after its warm-up wave: more than the %.1f MiB allowed above it",
			end.MiB(), warm.MiB(), float64(rssTolerance*10>>20)/10))
	}
	return out
}

// WithLowestRSS returns last with the lowest RSS of last and readings,
// the plugin's footprints just before it: a leak raises every reading,
// garbage that no collection has freed yet only some.
func WithLowestRSS(last Footprint, readings ...Footprint) Footprint {
	for _, r := range readings {
		last.RSS = min(last.RSS, r.RSS)
	}
	return last
}

// StatusDiff lists how two allocation tables of `cgdelegate status`
// differ: the node's pools, each pod missing from one of them, and each pod
// whose row (budget, bubble, pools, containers with their pools and sets)
// is not the same. Empty when they are equal.
func StatusDiff(before, after policy.Status) []string {
	var out []string
	hb, ha := before, after
	hb.Pods, ha.Pods = nil, nil
	if !reflect.DeepEqual(hb, ha) {
		out = append(out, fmt.Sprintf("node: %s, was %s", jsonText(ha), jsonText(hb)))
	}
	rows := func(s policy.Status) map[string]policy.PodStatus {
		m := make(map[string]policy.PodStatus, len(s.Pods))
		for _, p := range s.Pods {
			m[p.ID] = p
		}
		return m
	}
	rb, ra := rows(before), rows(after)
	for _, p := range before.Pods {
		a, ok := ra[p.ID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("pod %s (%s) is gone, was %s", p.Name, p.ID, jsonText(p)))
		case !reflect.DeepEqual(p, a):
			out = append(out, fmt.Sprintf("pod %s (%s): %s, was %s", p.Name, p.ID, jsonText(a), jsonText(p)))
		}
	}
	for _, p := range after.Pods {
		if _, ok := rb[p.ID]; !ok {
			out = append(out, fmt.Sprintf("pod %s (%s) is new: %s", p.Name, p.ID, jsonText(p)))
		}
	}
	return out
}

// WithoutContainers returns s without the containers of ids; s is not
// changed.
func WithoutContainers(s policy.Status, ids ...string) policy.Status {
	out := s
	out.Pods = make([]policy.PodStatus, 0, len(s.Pods))
	for _, p := range s.Pods {
		p.Containers = slices.DeleteFunc(slices.Clone(p.Containers), func(c policy.ContainerStatus) bool { return slices.Contains(ids, c.ID) })
		out.Pods = append(out.Pods, p)
	}
	return out
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// failedUpdate matches the plugin's log line (slog text) about container
// updates that failed: its time and the container IDs it names, in
// containers=[...] (the call failed) or failed=[...] (the runtime failed
// some).
var (
	logTimeField   = regexp.MustCompile(`(?:^|\s)time=(\S+)`)
	failedIDsField = regexp.MustCompile(`(?:containers|failed)=\[([^\]]*)\]`)
)

// FailedUpdate reads a plugin log line about failed container updates:
// when it was logged and the containers it names. ok is false for a line
// without both.
func FailedUpdate(line string) (at time.Time, ids []string, ok bool) {
	tm, m := logTimeField.FindStringSubmatch(line), failedIDsField.FindStringSubmatch(line)
	if tm == nil || m == nil {
		return time.Time{}, nil, false
	}
	at, err := time.Parse(time.RFC3339Nano, tm[1])
	if err != nil {
		return time.Time{}, nil, false
	}
	ids = strings.Fields(m[1])
	return at, ids, len(ids) > 0
}
