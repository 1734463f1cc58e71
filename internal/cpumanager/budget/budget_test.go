package budget

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// res builds runtime resources; negative arguments leave a field unset.
func res(shares int64, quota int64, period int64, mem int64) *api.LinuxResources {
	r := &api.LinuxResources{Cpu: &api.LinuxCPU{}, Memory: &api.LinuxMemory{}}
	if shares >= 0 {
		r.Cpu.Shares = api.UInt64(uint64(shares))
	}
	if quota != -2 {
		r.Cpu.Quota = api.Int64(quota)
	}
	if period >= 0 {
		r.Cpu.Period = api.UInt64(uint64(period))
	}
	if mem != -2 {
		r.Memory.Limit = api.Int64(mem)
	}
	return r
}

func TestSharesRoundTrip(t *testing.T) {
	for m := int64(3); m <= MaxShares*1000/1024; m++ {
		if got := MilliCPUFromShares(SharesFromMilliCPU(m)); got != m {
			t.Fatalf("shares round trip of %dm gave %dm", m, got)
		}
	}
}

func TestQuotaRoundTrip(t *testing.T) {
	for _, period := range []uint64{0, 100000, 50000, 1000000, 10000} {
		for m := 1000 * 1000 / int64(periodOrDefault(period)); m <= 200000; m++ {
			q := QuotaFromMilliCPU(m, period)
			if got := MilliCPUFromQuota(q, period); got != m {
				t.Fatalf("period %d: quota round trip of %dm (quota %d) gave %dm", period, m, q, got)
			}
		}
	}
}

func TestConversions(t *testing.T) {
	tests := []struct {
		name string
		got  int64
		want int64
	}{
		{"shares 0 is no request", MilliCPUFromShares(0), 0},
		{"shares 2 is no request", MilliCPUFromShares(2), 0},
		{"shares 3", MilliCPUFromShares(3), 3},
		{"shares 1024 is one cpu", MilliCPUFromShares(1024), 1000},
		{"shares 102 is 100m", MilliCPUFromShares(102), 100},
		{"request 0 gives min shares", int64(SharesFromMilliCPU(0)), 2},
		{"request 1m gives min shares", int64(SharesFromMilliCPU(1)), 2},
		{"request 1500m", int64(SharesFromMilliCPU(1500)), 1536},
		{"request above max shares", int64(SharesFromMilliCPU(1 << 30)), MaxShares},
		{"quota -1 is no limit", MilliCPUFromQuota(-1, 100000), 0},
		{"quota 200000/100000", MilliCPUFromQuota(200000, 100000), 2000},
		{"quota default period", MilliCPUFromQuota(150000, 0), 1500},
		{"quota rounds up", MilliCPUFromQuota(1001, 100000), 11},
		{"limit 0 is no quota", QuotaFromMilliCPU(0, 0), 0},
		{"limit 1m hits min quota", QuotaFromMilliCPU(1, 100000), MinQuota},
		{"limit 2500m", QuotaFromMilliCPU(2500, 0), 250000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %d, want %d", tc.got, tc.want)
			}
		})
	}
}

func TestFromLinuxResources(t *testing.T) {
	tests := []struct {
		name    string
		in      *api.LinuxResources
		want    Budget
		wantErr string
	}{
		{name: "nil", in: nil},
		{name: "empty", in: &api.LinuxResources{}},
		{name: "all unset", in: res(-1, -2, -1, -2)},
		{
			name: "guaranteed 2 cpus", in: res(2048, 200000, 100000, 1<<30),
			want: Budget{CPURequest: 2000, CPULimit: 2000, MemoryLimit: 1 << 30},
		},
		{
			name: "burstable", in: res(512, 100000, 100000, -2),
			want: Budget{CPURequest: 500, CPULimit: 1000},
		},
		{name: "besteffort", in: res(2, -1, 100000, 0), want: Budget{}},
		{name: "unlimited memory", in: res(-1, -2, -1, -1), want: Budget{}},
		{name: "default period", in: res(-1, 50000, 0, -2), want: Budget{CPULimit: 500}},
		{name: "shares above kernel max", in: res(MaxShares+1, -2, -1, -2), wantErr: "cpu shares 262145 above 262144"},
		{name: "period too small", in: res(-1, 1000, 999, -2), wantErr: "cpu period 999 outside [1000, 1000000]"},
		{name: "period too large", in: res(-1, 1000, 1000001, -2), wantErr: "cpu period 1000001 outside"},
		{name: "quota too large", in: res(-1, 1<<62, 1000, -2), wantErr: "too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromLinuxResources(tc.in)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want ErrInvalid containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestBudgetMethods(t *testing.T) {
	tests := []struct {
		name      string
		b         Budget
		hasCPU    bool
		cpuBudget int64
		whole     int
	}{
		{"zero", Budget{}, false, 0, 0},
		{"limit wins", Budget{CPURequest: 1000, CPULimit: 2500}, true, 2500, 3},
		{"request only", Budget{CPURequest: 1500}, true, 1500, 2},
		{"exact cpus", Budget{CPULimit: 4000}, true, 4000, 4},
		{"memory only", Budget{MemoryLimit: 1}, false, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.HasCPU(); got != tc.hasCPU {
				t.Errorf("HasCPU %v, want %v", got, tc.hasCPU)
			}
			if got := tc.b.CPUBudget(); got != tc.cpuBudget {
				t.Errorf("CPUBudget %d, want %d", got, tc.cpuBudget)
			}
			if got := tc.b.WholeCPUs(); got != tc.whole {
				t.Errorf("WholeCPUs %d, want %d", got, tc.whole)
			}
		})
	}
	if !(Budget{}).IsZero() || (Budget{MemoryRequest: 1}).IsZero() {
		t.Error("IsZero")
	}
	if got, want := (Budget{CPURequest: 500, MemoryLimit: 1 << 30}).String(), "cpu=500m/-,memory=-/1Gi"; got != want {
		t.Errorf("String %q, want %q", got, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		b       Budget
		sentinl error
		wantErr []string
	}{
		{name: "ok", b: Budget{CPURequest: 1000, CPULimit: 2000, MemoryRequest: 1, MemoryLimit: 2}},
		{name: "request without limit", b: Budget{CPURequest: 5000}},
		{
			name: "cpu request above limit", b: Budget{CPURequest: 3000, CPULimit: 2000},
			sentinl: ErrInconsistent, wantErr: []string{"cpu request 3000m exceeds cpu limit 2000m"},
		},
		{
			name: "memory request above limit", b: Budget{MemoryRequest: 2 << 30, MemoryLimit: 1 << 30},
			sentinl: ErrInconsistent, wantErr: []string{"memory request 2Gi exceeds memory limit 1Gi"},
		},
		{
			name: "negative", b: Budget{CPURequest: -1, MemoryLimit: -5},
			sentinl: ErrInvalid, wantErr: []string{"cpu request -1 is negative", "memory limit -5 is negative"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.b.Validate()
			if tc.sentinl == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.sentinl) {
				t.Fatalf("error %v is not %v", err, tc.sentinl)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFormatMemory(t *testing.T) {
	for in, want := range map[int64]string{
		0: "0", 1000: "1000", 1024: "1Ki", 1536 << 20: "1536Mi", 1 << 30: "1Gi", 3 << 50: "3Pi",
	} {
		if got := FormatMemory(in); got != want {
			t.Errorf("FormatMemory(%d) = %q, want %q", in, got, want)
		}
	}
}

// weightReadBack is what the kubelet reports for a pod cgroup whose CPU
// request was milli: v1.37 writes cpu.weight = 1 + (shares-2)*9999/262142
// (cgroup_manager_linux.go, getCPUWeight) and reads shares back as
// (weight-1)*262142/9999 + 2 (cgroup_v2_manager_linux.go,
// cpuWeightToCPUShares), then millicores rounding up.
func weightReadBack(milli int64) int64 {
	weight := 1 + (SharesFromMilliCPU(milli)-2)*9999/262142
	return MilliCPUFromShares((weight-1)*262142/9999 + 2)
}

func TestSameCPURequest(t *testing.T) {
	tests := []struct {
		a, b int64
		want bool
	}{
		{250, 250, true},
		{250, 232, true}, // a 250m request read back through cpu.weight
		{2000, 1999, true},
		{0, 1, true}, // both the floor of 2 shares
		{250, 300, false},
		{232, 500, false},
		{1000, 2000, false},
	}
	for _, tc := range tests {
		if got := SameCPURequest(tc.a, tc.b); got != tc.want || SameCPURequest(tc.b, tc.a) != tc.want {
			t.Errorf("SameCPURequest(%d, %d) = %v, want %v (both ways)", tc.a, tc.b, got, tc.want)
		}
	}
	// Every request the kubelet can write is the same as its read-back, up
	// to the kernel's maximum (MaxShares); one more weight step is not.
	for milli := int64(0); milli <= MaxShares*1000/1024; milli++ {
		back := weightReadBack(milli)
		if !SameCPURequest(milli, back) {
			t.Fatalf("SameCPURequest(%d, read back %d) = false", milli, back)
		}
		if far := back - 2*weightStepShares; far > 0 && SameCPURequest(milli, far) {
			t.Fatalf("SameCPURequest(%d, %d) = true, two weight steps apart", milli, far)
		}
	}
}

func TestBudgetEquivalent(t *testing.T) {
	base := Budget{CPURequest: 250, CPULimit: 500, MemoryLimit: 64 << 20}
	tests := []struct {
		name string
		o    Budget
		want bool
	}{
		{"same", base, true},
		{"request read back", Budget{CPURequest: 232, CPULimit: 500, MemoryLimit: 64 << 20}, true},
		{"memory read back to a page", Budget{CPURequest: 250, CPULimit: 500, MemoryLimit: 64<<20 - 4096}, true},
		{"cpu limit", Budget{CPURequest: 250, CPULimit: 750, MemoryLimit: 64 << 20}, false},
		{"cpu request", Budget{CPURequest: 500, CPULimit: 500, MemoryLimit: 64 << 20}, false},
		{"memory limit", Budget{CPURequest: 250, CPULimit: 500, MemoryLimit: 96 << 20}, false},
		{"memory limit gone", Budget{CPURequest: 250, CPULimit: 500}, false},
		{"memory request", Budget{CPURequest: 250, CPULimit: 500, MemoryLimit: 64 << 20, MemoryRequest: 32 << 20}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := base.Equivalent(tc.o); got != tc.want || tc.o.Equivalent(base) != tc.want {
				t.Errorf("Equivalent(%s, %s) = %v, want %v (both ways)", base, tc.o, got, tc.want)
			}
		})
	}
}
