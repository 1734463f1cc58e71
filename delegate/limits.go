package delegate

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"
)

// Limits are a group's limits. The zero value limits nothing.
type Limits struct {
	// CPUMilli is the CPU bandwidth in millicores (cpu.max); 0 is none.
	CPUMilli int64
	// MemoryBytes is memory.max; 0 is none.
	MemoryBytes int64
	// Pids is pids.max; 0 is none.
	Pids int64
	// Cpuset are the CPUs (cpuset.cpus); empty is none. It must lie inside
	// the root's cpuset.cpus.effective.
	Cpuset cpuset.CPUSet
}

// cpuPeriod is the cpu.max period, in microseconds, that CPUMilli is
// written against.
const cpuPeriod = 100000

// Bounds of what the parsers accept.
const (
	// minCPUMilli is the smallest quota the kernel takes (1ms per 100ms).
	minCPUMilli = 10
	maxCPUMilli = 1 << 40
	maxMemory   = 1 << 62
	maxPids     = 1 << 22 // PID_MAX_LIMIT
)

// ParseCPU parses a CPU quantity in Kubernetes syntax ("500m", "2") into
// millicores.
func ParseCPU(s string) (int64, error) {
	q, err := parseQuantity("--cpu", s, "500m or 2")
	if err != nil {
		return 0, err
	}
	if q.Cmp(*resource.NewMilliQuantity(minCPUMilli, resource.DecimalSI)) < 0 || q.Cmp(*resource.NewMilliQuantity(maxCPUMilli, resource.DecimalSI)) > 0 {
		return 0, fmt.Errorf("%w: --cpu %q is out of range; give between %dm and %d CPUs", ErrBadLimit, s, minCPUMilli, maxCPUMilli/1000)
	}
	return q.MilliValue(), nil
}

// ParseMemory parses a memory quantity in Kubernetes syntax ("256Mi",
// "1G") into bytes.
func ParseMemory(s string) (int64, error) {
	q, err := parseQuantity("--memory", s, "256Mi or 1Gi")
	if err != nil {
		return 0, err
	}
	if q.Sign() <= 0 || q.Cmp(*resource.NewQuantity(maxMemory, resource.BinarySI)) > 0 {
		return 0, fmt.Errorf("%w: --memory %q is out of range; give between 1 byte and 4Ei", ErrBadLimit, s)
	}
	return q.Value(), nil
}

// ParsePids parses a pids.max count.
func ParsePids(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > maxPids {
		return 0, fmt.Errorf("%w: --pids %q; give a whole number from 1 to %d", ErrBadLimit, s, maxPids)
	}
	return n, nil
}

// ParseCpuset parses a CPU list ("0-3,6").
func ParseCpuset(s string) (cpuset.CPUSet, error) {
	set, err := cpuset.Parse(s)
	if err != nil || set.IsEmpty() {
		return cpuset.CPUSet{}, fmt.Errorf("%w: --cpuset %q; give a CPU list such as 0-3,6", ErrBadLimit, s)
	}
	return set, nil
}

// maxExponent bounds a quantity's decimal exponent ("1e3"): comparing one
// with a huge exponent ("1e222222215") takes the decimal library minutes.
const maxExponent = 30

func parseQuantity(flag, s, example string) (resource.Quantity, error) {
	s = strings.TrimSpace(s)
	// "e3" and "E3" are exponents; "E" and "Ei" are suffixes.
	if i := strings.IndexAny(s, "eE"); i >= 0 && s[i+1:] != "" && s[i+1:] != "i" {
		if exp, err := strconv.Atoi(s[i+1:]); err != nil || exp > maxExponent || exp < -maxExponent {
			return resource.Quantity{}, fmt.Errorf("%w: %s %q: exponent out of range; give a Kubernetes quantity such as %s", ErrBadLimit, flag, s, example)
		}
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return q, fmt.Errorf("%w: %s %q: %w; give a Kubernetes quantity such as %s", ErrBadLimit, flag, s, err, example)
	}
	return q, nil
}

// controllers returns the controllers the limits need.
func (l Limits) controllers() []string {
	var c []string
	for _, want := range []struct {
		on   bool
		name string
	}{{l.CPUMilli > 0, "cpu"}, {!l.Cpuset.IsEmpty(), "cpuset"}, {l.MemoryBytes > 0, "memory"}, {l.Pids > 0, "pids"}} {
		if want.on {
			c = append(c, want.name)
		}
	}
	return c
}

// limitFile is one interface file a limit is written to.
type limitFile struct{ file, value string }

// files returns what to write, in order.
func (l Limits) files() []limitFile {
	var f []limitFile
	if l.CPUMilli > 0 {
		f = append(f, limitFile{"cpu.max", fmt.Sprintf("%d %d", l.CPUMilli*cpuPeriod/1000, cpuPeriod)})
	}
	if !l.Cpuset.IsEmpty() {
		f = append(f, limitFile{"cpuset.cpus", l.Cpuset.String()})
	}
	if l.MemoryBytes > 0 {
		f = append(f, limitFile{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)})
	}
	if l.Pids > 0 {
		f = append(f, limitFile{"pids.max", strconv.FormatInt(l.Pids, 10)})
	}
	return f
}
