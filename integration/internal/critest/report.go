package critest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// State is a spec's outcome as ginkgo reports it.
type State string

// The states a spec ends in; ginkgo's others (pending, interrupted,
// aborted, timedout, panicked) are kept as they come and count as failed.
const (
	Passed  State = "passed"
	Skipped State = "skipped"
	Failed  State = "failed"
)

// Spec is one spec's result.
type Spec struct {
	// Name is the spec's full text: its containers' texts and its own,
	// joined by spaces, as --ginkgo.skip and --ginkgo.focus match it.
	Name  string
	State State
	// Message is the failure's or the skip's message; empty for a spec
	// skipped by name.
	Message string
}

// Result is one run of critest: every spec, in name order.
type Result struct {
	Specs []Spec
}

// ErrReport is wrapped when a report cannot be read.
var ErrReport = errors.New("critest report")

// report is the part of ginkgo's JSON report (--ginkgo.json-report) read
// here: a list of suites, each with its specs and suite nodes.
type report []struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeType            string
		LeafNodeText            string
		State                   string
		Failure                 struct {
			Message string
		}
	}
}

// ReadReport reads ginkgo's JSON report. Only specs (It nodes) count; a
// suite node (BeforeSuite, AfterSuite...) that did not pass is returned
// as a spec of its own, so a broken suite cannot look like an empty one.
func ReadReport(r io.Reader) (Result, error) {
	var rep report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrReport, err)
	}
	var res Result
	for _, suite := range rep {
		for _, s := range suite.SpecReports {
			name := strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " ")
			if s.LeafNodeType != "It" {
				if s.State == string(Passed) {
					continue
				}
				name = "[" + s.LeafNodeType + "] " + name
			}
			res.Specs = append(res.Specs, Spec{Name: strings.TrimSpace(name), State: State(s.State), Message: s.Failure.Message})
		}
	}
	if len(res.Specs) == 0 {
		return Result{}, fmt.Errorf("%w: no specs", ErrReport)
	}
	slices.SortFunc(res.Specs, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(res.Specs); i++ {
		if res.Specs[i].Name == res.Specs[i-1].Name {
			return Result{}, fmt.Errorf("%w: spec %q reported twice", ErrReport, res.Specs[i].Name)
		}
	}
	return res, nil
}

// Counts are a result's totals.
type Counts struct {
	Specs, Passed, Failed, Skipped int
	// ByName are the skipped specs that Skips named (no message); the
	// others skipped themselves (an absent feature) and say why.
	ByName int
}

// Counts totals the result.
func (r Result) Counts() Counts {
	c := Counts{Specs: len(r.Specs)}
	for _, s := range r.Specs {
		switch s.State {
		case Passed:
			c.Passed++
		case Skipped:
			c.Skipped++
			if s.Message == "" {
				c.ByName++
			}
		default:
			c.Failed++
		}
	}
	return c
}

func (c Counts) String() string {
	return fmt.Sprintf("%d specs: %d passed, %d failed, %d skipped (%d by name)", c.Specs, c.Passed, c.Failed, c.Skipped, c.ByName)
}

// Failures are the specs that neither passed nor were skipped.
func (r Result) Failures() []Spec {
	var out []Spec
	for _, s := range r.Specs {
		if s.State != Passed && s.State != Skipped {
			out = append(out, s)
		}
	}
	return out
}

// Skipped are the skipped specs; a spec skipped by name has no message.
func (r Result) Skipped() []Spec {
	var out []Spec
	for _, s := range r.Specs {
		if s.State == Skipped {
			out = append(out, s)
		}
	}
	return out
}

// state is the spec's state in r; "absent" when r has no such spec.
func (r Result) state(name string) State {
	i, ok := slices.BinarySearchFunc(r.Specs, name, func(s Spec, n string) int { return strings.Compare(s.Name, n) })
	if !ok {
		return "absent"
	}
	return r.Specs[i].State
}
