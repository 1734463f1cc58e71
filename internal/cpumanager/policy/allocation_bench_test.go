package policy

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/cgdelegate/cgdelegate/internal/cpumanager/topology"
)

// epyc256 is the benchmark machine: 2 sockets x 4 NUMA nodes x 16
// cores x SMT2 = 256 CPUs.
func epyc256(b *testing.B) *topology.Topology {
	b.Helper()
	topo, err := topology.FromSpec(topology.Spec{Packages: 2, NodesPerPackage: 4, CoresPerNode: 16, ThreadsPerCore: 2})
	if err != nil {
		b.Fatal(err)
	}
	return topo
}

// BenchmarkTake256 measures allocator.Take on 256 CPUs / 8 NUMA nodes, the
// path the policy uses. Target: at most 50µs per op.
func BenchmarkTake256(b *testing.B) {
	topo := epyc256(b)
	a, err := newAllocator(topo)
	if err != nil {
		b.Fatal(err)
	}
	all := topo.AllCPUs()
	r := rand.New(rand.NewPCG(5, 6))
	half := randomSubset(r, all, 0.5).Intersection(all)
	cases := []struct {
		name  string
		avail cpuset.CPUSet
		n     int
	}{
		{"all/n=1", all, 1},
		{"all/n=4", all, 4},
		{"all/n=32", all, 32},
		{"all/n=40", all, 40},
		{"all/n=100", all, 100},
		{"all/n=256", all, 256},
		{"fragmented-half/n=8", half, 8},
		{"fragmented-half/n=61", half, 61},
		{"every-3rd-taken/n=50", fragmented(all, 3), 50},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			start, n := cpuTime(b), 0
			for b.Loop() {
				if _, err := a.take(tc.avail, tc.n); err != nil {
					b.Fatal(err)
				}
				n++
			}
			reportCPU(b, start, n)
		})
	}
}

// BenchmarkTakeFunc256 is the free function, which indexes the topology on
// every call.
func BenchmarkTakeFunc256(b *testing.B) {
	topo := epyc256(b)
	all := topo.AllCPUs()
	for _, n := range []int{4, 40} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := takeCPUs(topo, all, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNew256(b *testing.B) {
	topo := epyc256(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := newAllocator(topo); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the CPU time the process has used (user + system). On a
// shared, overloaded machine wall time per op mostly measures waiting for
// a CPU; cpu-ns/op (reportCPU) measures the work.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op since start (a cpuTime) over n ops.
func reportCPU(b *testing.B, start time.Duration, n int) {
	b.ReportMetric(float64((cpuTime(b)-start).Nanoseconds())/float64(n), "cpu-ns/op")
}
