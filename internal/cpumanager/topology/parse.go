package topology

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// MaxCPUID bounds the CPU and node ids accepted by the parsers. Linux's
// NR_CPUS tops out at 8192; the margin keeps a corrupt "0-4294967295" from
// allocating gigabytes.
const MaxCPUID = 1<<16 - 1

// ParseCPUList parses a Linux CPU list ("0-3,8,10-11", as in
// devices/system/cpu/online or nodeN/cpulist). Surrounding white space and
// a trailing newline are ignored; an empty list is an empty set. Errors wrap
// ErrMalformed.
func ParseCPUList(s string) (cpuset.CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return cpuset.New(), nil
	}
	var ids []int
	for field := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(field, "-")
		start, err := parseID(lo)
		if err != nil {
			return cpuset.New(), fmt.Errorf("%w: cpu list %q: %w", ErrMalformed, shorten(s), err)
		}
		end := start
		if isRange {
			if end, err = parseID(hi); err != nil {
				return cpuset.New(), fmt.Errorf("%w: cpu list %q: %w", ErrMalformed, shorten(s), err)
			}
			if end < start {
				return cpuset.New(), fmt.Errorf("%w: cpu list %q: range %q is reversed", ErrMalformed, shorten(s), field)
			}
		}
		for id := start; id <= end; id++ {
			ids = append(ids, id)
		}
	}
	return cpuset.New(ids...), nil
}

// parseID parses a non-negative decimal id no larger than MaxCPUID. Unlike
// strconv.Atoi it rejects signs and white space inside the list.
func parseID(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("empty id")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("id %q is not a decimal number", s)
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v > MaxCPUID {
		return 0, fmt.Errorf("id %q is out of range 0-%d", s, MaxCPUID)
	}
	return v, nil
}

// parseInt parses a single decimal integer file such as core_id. The kernel
// writes -1 for "unknown" in some of these files, so negatives are allowed.
func parseInt(s string) (int, error) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%w: want an integer: %w", ErrMalformed, err)
	}
	return v, nil
}

// ParseDistances parses a nodeN/distance row: white-space separated
// positive integers, one per online node in ascending node order. Errors
// wrap ErrMalformed.
func ParseDistances(s string) ([]int, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("%w: empty distance row", ErrMalformed)
	}
	out := make([]int, 0, len(fields))
	for _, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 || v > 255 {
			return nil, fmt.Errorf("%w: distance %q is not an integer in 1-255", ErrMalformed, f)
		}
		out = append(out, v)
	}
	return out, nil
}

// ParseMemTotal reads a nodeN/meminfo stream ("Node 0 MemTotal:  32718228 kB")
// and returns MemTotal in bytes. A stream without a MemTotal line, or with
// one that does not parse, is an error wrapping ErrMalformed.
func ParseMemTotal(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// "Node", "<id>", "MemTotal:", "<value>", "kB"
		for i, f := range fields {
			if f != "MemTotal:" {
				continue
			}
			if i+1 >= len(fields) {
				return 0, fmt.Errorf("%w: MemTotal line %q has no value", ErrMalformed, sc.Text())
			}
			v, err := strconv.ParseUint(fields[i+1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: MemTotal value %q: %w", ErrMalformed, fields[i+1], err)
			}
			mult := uint64(1)
			if i+2 < len(fields) {
				switch strings.ToLower(fields[i+2]) {
				case "kb":
					mult = 1 << 10
				case "mb":
					mult = 1 << 20
				default:
					return 0, fmt.Errorf("%w: MemTotal unit %q is unknown", ErrMalformed, fields[i+2])
				}
			}
			if v > ^uint64(0)/mult {
				return 0, fmt.Errorf("%w: MemTotal value %q overflows", ErrMalformed, fields[i+1])
			}
			return v * mult, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%w: reading meminfo: %w", ErrMalformed, err)
	}
	return 0, fmt.Errorf("%w: no MemTotal line", ErrMalformed)
}
