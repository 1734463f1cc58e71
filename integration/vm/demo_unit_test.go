package vm

import (
	"reflect"
	"testing"
)

func TestDemoTranscript(t *testing.T) {
	var d demoTranscript
	var shown []string
	for _, l := range []string{
		"[    1.2] random: crng init done",
		"CGD-DEMO Node: containerd v2.4.2\r",
		"CGD-DEMO ",
		"[    3.1] kernel noise CGD-DEMO 1. A pod",
		"CGD-DEMO-STEP writable-mount",
		"CGD-RESULT {\"scenario\":\"Demo\",\"result\":\"pass\"}",
		"CGD-DEMO-STEP delegation\r",
	} {
		if s, ok := d.Feed(l); ok {
			shown = append(shown, s)
		}
	}
	if want := []string{"Node: containerd v2.4.2", "", "1. A pod"}; !reflect.DeepEqual(shown, want) {
		t.Errorf("shown %q, want %q", shown, want)
	}
	if want := []string{"writable-mount", "delegation"}; !reflect.DeepEqual(d.Steps, want) {
		t.Errorf("steps %q, want %q", d.Steps, want)
	}
	if got := d.Missing(demoSteps); !reflect.DeepEqual(got, demoSteps[2:]) {
		t.Errorf("missing %q, want %q", got, demoSteps[2:])
	}
	var empty demoTranscript
	if got := empty.Missing(demoSteps); len(got) != len(demoSteps) {
		t.Errorf("an empty console is missing %q, want every step", got)
	}
}
