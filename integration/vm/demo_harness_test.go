package vm

import (
	"slices"
	"strings"
)

// The demo's console protocol (the guest's Demo scenario): story lines for
// a person, and the name of each step whose observations were all made.
const (
	markDemo     = "CGD-DEMO "
	markDemoStep = "CGD-DEMO-STEP "
)

// Demo steps the guest must report, in order; demoStepPinning only when the
// variant pins CPUs.
var demoSteps = []string{"writable-mount", "delegation", "own-limit", "pod-bounds", "refused", "advertisement"}

const demoStepPinning = "pinning"

// demoTranscript collects the demo's story and steps from console lines.
type demoTranscript struct {
	Lines []string
	Steps []string
}

// Feed consumes one console line. It returns the story line to show and
// true when the line carries one. Kernel noise may precede a marker.
func (d *demoTranscript) Feed(line string) (string, bool) {
	line = strings.TrimRight(line, "\r")
	if i := strings.Index(line, markDemoStep); i >= 0 {
		d.Steps = append(d.Steps, strings.TrimSpace(line[i+len(markDemoStep):]))
		return "", false
	}
	if i := strings.Index(line, markDemo); i >= 0 {
		text := line[i+len(markDemo):]
		d.Lines = append(d.Lines, text)
		return text, true
	}
	return "", false
}

// Missing returns the wanted steps the guest did not report.
func (d *demoTranscript) Missing(want []string) []string {
	var out []string
	for _, s := range want {
		if !slices.Contains(d.Steps, s) {
			out = append(out, s)
		}
	}
	return out
}
