package bench

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/google/pprof/profile"
)

// FuncShare is one function's share of a CPU profile: Flat is the time
// with it on top of the stack, Cum with it anywhere on the stack.
type FuncShare struct {
	Name      string
	Flat, Cum time.Duration
}

// TopFunctions reads a CPU profile (the gzipped protobuf of
// /debug/pprof/profile) and returns its total CPU time and the n functions
// with the most flat and the n with the most cumulative time, most first.
func TopFunctions(r io.Reader, n int) (total time.Duration, flat, cum []FuncShare, err error) {
	p, err := profile.Parse(r)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("parse CPU profile: %w", err)
	}
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return 0, nil, nil, fmt.Errorf("%w: the profile has no cpu/nanoseconds samples (%d sample types)", ErrFormat, len(p.SampleType))
	}
	shares := map[string]*FuncShare{}
	get := func(name string) *FuncShare {
		s, ok := shares[name]
		if !ok {
			s = &FuncShare{Name: name}
			shares[name] = s
		}
		return s
	}
	for _, s := range p.Sample {
		d := time.Duration(s.Value[vi])
		total += d
		seen := map[string]bool{}
		for li, loc := range s.Location {
			// Inlined functions come first in a location's lines.
			for ki, line := range loc.Line {
				name := "?"
				if line.Function != nil {
					name = line.Function.Name
				}
				if li == 0 && ki == 0 {
					get(name).Flat += d
				}
				if !seen[name] {
					seen[name] = true
					get(name).Cum += d
				}
			}
		}
	}
	all := make([]FuncShare, 0, len(shares))
	for _, s := range shares {
		all = append(all, *s)
	}
	top := func(by func(FuncShare) time.Duration) []FuncShare {
		out := slices.Clone(all)
		slices.SortFunc(out, func(a, b FuncShare) int {
			return cmp.Or(cmp.Compare(by(b), by(a)), cmp.Compare(a.Name, b.Name))
		})
		return out[:min(n, len(out))]
	}
	return total, top(func(s FuncShare) time.Duration { return s.Flat }), top(func(s FuncShare) time.Duration { return s.Cum }), nil
}
