package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux architecture the VM runs (x86-64).
const userHZ = 100

// ErrFormat says a /proc file did not have the expected form.
var ErrFormat = errors.New("unexpected format")

// CPUTime is utime + stime of /proc/<pid>/stat: the CPU the process used,
// in user and kernel mode, at a resolution of 10 ms.
func CPUTime(stat string) (time.Duration, error) {
	// The command (field 2) is in parentheses and may hold spaces and
	// parentheses: the fields after it start after the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: /proc/<pid>/stat without a command: %q", ErrFormat, stat)
	}
	f := strings.Fields(stat[i+1:])
	// After the command: state (3), ..., utime (14), stime (15).
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("%w: /proc/<pid>/stat has %d fields after the command, want more than %d", ErrFormat, len(f), stime)
	}
	var ticks int64
	for _, s := range []string{f[utime], f[stime]} {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: /proc/<pid>/stat utime or stime %q: %w", ErrFormat, s, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// RSSBytes is VmRSS of /proc/<pid>/status.
func RSSBytes(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		kb, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
		n, err := strconv.ParseInt(kb, 10, 64)
		if err != nil || strings.TrimSpace(unit) != "kB" {
			return 0, fmt.Errorf("%w: VmRSS %q", ErrFormat, v)
		}
		return n << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read /proc/<pid>/status: %w", err)
	}
	return 0, fmt.Errorf("%w: no VmRSS in /proc/<pid>/status", ErrFormat)
}
