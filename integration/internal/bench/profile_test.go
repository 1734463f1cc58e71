package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// TestTopFunctions: flat counts the top of each stack (the first, inlined,
// line of its first location), cum every function once per sample.
func TestTopFunctions(t *testing.T) {
	fn := map[string]*profile.Function{}
	f := func(name string) *profile.Function {
		if fn[name] == nil {
			fn[name] = &profile.Function{ID: uint64(len(fn) + 1), Name: name}
		}
		return fn[name]
	}
	var locs []*profile.Location
	loc := func(names ...string) *profile.Location {
		l := &profile.Location{ID: uint64(len(locs) + 1)}
		for _, n := range names {
			l.Line = append(l.Line, profile.Line{Function: f(n)})
		}
		locs = append(locs, l)
		return l
	}
	read, parse, main, recurse := loc("syscall.read"), loc("host.parse", "host.readAll"), loc("main.main"), loc("policy.walk")
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{read, parse, main}, Value: []int64{3, int64(30 * time.Millisecond)}},
			{Location: []*profile.Location{parse, main}, Value: []int64{2, int64(20 * time.Millisecond)}},
			{Location: []*profile.Location{recurse, recurse, main}, Value: []int64{1, int64(10 * time.Millisecond)}},
		},
	}
	for _, fnc := range fn {
		p.Function = append(p.Function, fnc)
	}
	p.Location = locs
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	total, flat, cum, err := TopFunctions(&buf, 3)
	if err != nil {
		t.Fatal(err)
	}
	if total != 60*time.Millisecond {
		t.Errorf("total %v, want 60ms", total)
	}
	want := []FuncShare{{"syscall.read", 30 * time.Millisecond, 30 * time.Millisecond}, {"host.parse", 20 * time.Millisecond, 50 * time.Millisecond}, {"policy.walk", 10 * time.Millisecond, 10 * time.Millisecond}}
	if !equalShares(flat, want) {
		t.Errorf("flat %v, want %v", flat, want)
	}
	wantCum := []FuncShare{{"main.main", 0, 60 * time.Millisecond}, {"host.parse", 20 * time.Millisecond, 50 * time.Millisecond}, {"host.readAll", 0, 50 * time.Millisecond}}
	if !equalShares(cum, wantCum) {
		t.Errorf("cum %v, want %v", cum, wantCum)
	}

	if _, _, _, err := TopFunctions(strings.NewReader("not a profile"), 3); err == nil {
		t.Error("TopFunctions of garbage: no error")
	}
	p.SampleType = []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"}}
	buf.Reset()
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := TopFunctions(&buf, 3); !errors.Is(err, ErrFormat) {
		t.Errorf("TopFunctions of a heap profile = %v, want ErrFormat", err)
	}
}

func equalShares(a, b []FuncShare) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
