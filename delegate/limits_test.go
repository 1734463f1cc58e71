package delegate

import (
	"errors"
	"slices"
	"testing"

	"k8s.io/utils/cpuset"
)

func TestParseLimits(t *testing.T) {
	tests := []struct {
		name  string
		parse func(string) (int64, error)
		in    string
		want  int64
		ok    bool
	}{
		{"cpu millis", ParseCPU, "500m", 500, true},
		{"cpu whole", ParseCPU, "2", 2000, true},
		{"cpu fraction", ParseCPU, "0.25", 250, true},
		{"cpu too small", ParseCPU, "5m", 0, false},
		{"cpu negative", ParseCPU, "-1", 0, false},
		{"cpu huge", ParseCPU, "1e30", 0, false},
		{"cpu garbage", ParseCPU, "two", 0, false},
		{"cpu exponent", ParseCPU, "1e1", 10000, true},
		{"cpu huge exponent", ParseCPU, "e222222215", 0, false},
		{"memory huge negative exponent", ParseMemory, "1e-222222215", 0, false},
		{"memory huge E exponent", ParseMemory, "E222252212", 0, false},
		{"memory E exponent", ParseMemory, "1E3", 1000, true},
		{"memory exa", ParseMemory, "1E", 1e18, true},
		{"memory exbi", ParseMemory, "1Ei", 1 << 60, true},
		{"memory Mi", ParseMemory, "256Mi", 256 << 20, true},
		{"memory G", ParseMemory, "1G", 1e9, true},
		{"memory bytes", ParseMemory, "4096", 4096, true},
		{"memory zero", ParseMemory, "0", 0, false},
		{"memory huge", ParseMemory, "100Ei", 0, false},
		{"memory garbage", ParseMemory, "lots", 0, false},
		{"pids", ParsePids, "64", 64, true},
		{"pids zero", ParsePids, "0", 0, false},
		{"pids quantity", ParsePids, "1k", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.parse(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("parse(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadLimit) {
				t.Fatalf("error %v does not wrap ErrBadLimit", err)
			}
		})
	}
	if _, err := ParseCpuset("0-x"); !errors.Is(err, ErrBadLimit) {
		t.Errorf("ParseCpuset(0-x) = %v", err)
	}
	if set, err := ParseCpuset("0-1,3"); err != nil || set.String() != "0-1,3" {
		t.Errorf("ParseCpuset(0-1,3) = %v, %v", set, err)
	}
}

func TestLimitFiles(t *testing.T) {
	l := Limits{CPUMilli: 500, MemoryBytes: 256 << 20, Pids: 64, Cpuset: cpuset.New(1, 2)}
	want := []limitFile{{"cpu.max", "50000 100000"}, {"cpuset.cpus", "1-2"}, {"memory.max", "268435456"}, {"pids.max", "64"}}
	if got := l.files(); !slices.Equal(got, want) {
		t.Errorf("files = %v, want %v", got, want)
	}
	if got := l.controllers(); !slices.Equal(got, []string{"cpu", "cpuset", "memory", "pids"}) {
		t.Errorf("controllers = %v", got)
	}
	if (Limits{}).files() != nil || (Limits{}).controllers() != nil {
		t.Error("zero Limits must write nothing")
	}
}

func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"500m", "2", "256Mi", "1e3", "0.001", "-1", "9223372036854775807", "1Ei", "+.5", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if m, err := ParseCPU(s); err == nil && (m < minCPUMilli || m > maxCPUMilli) {
			t.Fatalf("ParseCPU(%q) = %d accepted out of range", s, m)
		}
		if b, err := ParseMemory(s); err == nil && (b < 1 || b > maxMemory) {
			t.Fatalf("ParseMemory(%q) = %d accepted out of range", s, b)
		}
		if n, err := ParsePids(s); err == nil && (n < 1 || n > maxPids) {
			t.Fatalf("ParsePids(%q) = %d accepted out of range", s, n)
		}
		_, _ = ParseCpuset(s)
	})
}
