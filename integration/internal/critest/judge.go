package critest

import (
	"fmt"
	"regexp"
	"strings"
)

// Skip is a spec critest is told not to run (--ginkgo.skip), and why.
type Skip struct {
	// Spec is the spec's own text (its It), which its full name ends
	// with.
	Spec   string
	Reason string
}

// Skips are the specs skipped by name in every pass. Each needs what the
// VM cannot give: an image pinned by a digest only its public registry
// has, or a pod network the node can reach (the conformance boot gives
// pods a network namespace wired to nothing, integration/cmd/nullcni).
var Skips = []Skip{
	{
		Spec:   "public image with digest should be pulled and removed [Conformance]",
		Reason: "pulls gcr.io/k8s-staging-cri-tools/test-image-digest by a digest pinned in critest: only that image's exact manifest has it, and the VM has no network to the public registry",
	},
	{
		Spec:   "runtime should support port mapping with only container port [Conformance]",
		Reason: "reads the web server at the pod's IP from the node: pods here have no network the node can reach",
	},
	{
		Spec:   "runtime should support port mapping with host port and container port [Conformance]",
		Reason: "needs the CNI portmap plugin and a pod network: pods here have none",
	},
	{
		Spec:   "runtime should support portforward [Conformance]",
		Reason: "first reads the web server at the pod's IP from the node: pods here have no network the node can reach (portforward in host network runs)",
	},
	{
		Spec:   "when running multiple containers in a pod should support network",
		Reason: "reads the httpd container at the pod's IP from the node: pods here have no network the node can reach",
	},
	{
		Spec: "runtime should support listing pod sandbox metrics [Conformance]",
		Reason: "containerd 2.4.2 collects a pod's metrics from its eth0 counters and leaves out a pod it cannot read them for " +
			"(internal/cri/server/list_pod_sandbox_metrics_linux.go); pods here have no eth0, so the list has no entry for the pod in any pass",
	},
}

// SkipPattern is the --ginkgo.skip regular expression of Skips: each
// spec's text, at the end of the full name.
func SkipPattern() string {
	parts := make([]string, len(Skips))
	for i, s := range Skips {
		parts[i] = regexp.QuoteMeta(s.Spec) + "$"
	}
	return strings.Join(parts, "|")
}

// Pass is one configuration critest runs under.
type Pass struct {
	// Name names the pass in logs, reports and docs/critest.md.
	Name string
	// Plugin runs cgdelegate; without it the pass is the baseline.
	Plugin bool
	// Extra is added to the shipped ConfigMap's config
	// (contrib/kubernetes), which the chart renders the same.
	Extra string
}

// Passes are critest's runs, the baseline first: containerd without
// cgdelegate; with cgdelegate and the shipped config (guard: enforce is
// its default); and with CPU pinning on too.
var Passes = []Pass{
	{Name: "none"},
	{Name: "default", Plugin: true},
	{Name: "pinning", Plugin: true, Extra: "cpuPinning: true\n"},
}

// Explanation is a known difference between a pass with cgdelegate and
// the baseline, documented in docs/critest.md.
type Explanation struct {
	Pass, Spec, Reason string
}

// Explained are the differences docs/critest.md explains. There are none:
// every spec ends the same with cgdelegate as without it.
var Explained []Explanation

// Difference is a spec that ended differently in a pass than in the
// baseline.
type Difference struct {
	Spec           string
	Baseline, Pass State
	// Explained is the documented reason, empty when there is none.
	Explained string
}

func (d Difference) String() string {
	s := fmt.Sprintf("%q: %s without cgdelegate, %s with it", d.Spec, d.Baseline, d.Pass)
	if d.Explained != "" {
		s += " (explained: " + d.Explained + ")"
	}
	return s
}

// Compare lists the specs whose state in got (pass) differs from
// baseline's, every spec of either, each with its explanation if
// Explained has one.
func Compare(baseline, got Result, pass string) []Difference {
	names := map[string]bool{}
	for _, r := range []Result{baseline, got} {
		for _, s := range r.Specs {
			names[s.Name] = true
		}
	}
	var out []Difference
	for _, s := range append(append([]Spec(nil), baseline.Specs...), got.Specs...) {
		if !names[s.Name] {
			continue
		}
		delete(names, s.Name)
		b, g := baseline.state(s.Name), got.state(s.Name)
		if b == g {
			continue
		}
		d := Difference{Spec: s.Name, Baseline: b, Pass: g}
		for _, e := range Explained {
			if e.Pass == pass && strings.HasSuffix(s.Name, e.Spec) {
				d.Explained = e.Reason
			}
		}
		out = append(out, d)
	}
	return out
}

// Unexplained are the differences without an explanation.
func Unexplained(ds []Difference) []Difference {
	var out []Difference
	for _, d := range ds {
		if d.Explained == "" {
			out = append(out, d)
		}
	}
	return out
}
