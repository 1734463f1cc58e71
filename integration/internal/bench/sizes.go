package bench

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SizesParam is the kernel parameter that tells the guest how many
// node-shared containers to measure at, e.g. cgdbench.sizes=0,50,100. It is
// not a cgd.* parameter (integration/internal/variant ignores it), so every
// boot of the suite keeps its command line.
const SizesParam = "cgdbench.sizes"

// DefaultSizes are the sizes of the issue: an empty node, half and a full
// one (110 pods of one container, 100 in the fleet), and 250 containers,
// where it asks for the plugin's cost and its restart.
var DefaultSizes = []int{0, 50, 100, 250}

// MaxSize bounds a size: each container of the fleet costs a shim share and
// a sleep process in a VM of a few GiB. The plugin's cost and restart
// are judged at 250 containers.
const MaxSize = 300

// KubeletMaxSize is the largest size the kubelet anchor measures: its
// lag at 100 is already ten reconcile periods, and a sample there takes
// minutes (the narrowing and the widening), so larger sizes would add an
// hour to the run for a number the smaller ones predict.
const KubeletMaxSize = 100

// ErrSizes says a list of sizes is not usable.
var ErrSizes = errors.New("bad bench sizes")

// ParseSizes reads a comma-separated list of sizes: numbers from 0 to
// MaxSize, strictly increasing (the fleet only grows).
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %q: %w", ErrSizes, s, err)
		case n < 0 || n > MaxSize:
			return nil, fmt.Errorf("%w: %q: %d is not between 0 and %d", ErrSizes, s, n, MaxSize)
		case len(out) > 0 && n <= out[len(out)-1]:
			return nil, fmt.Errorf("%w: %q: want increasing sizes", ErrSizes, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// SizesFromCmdline reads SizesParam from a kernel command line;
// DefaultSizes when it is not there.
func SizesFromCmdline(cmdline string) ([]int, error) {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, SizesParam+"="); ok {
			return ParseSizes(v)
		}
	}
	return slices.Clone(DefaultSizes), nil
}

// FormatSizes is the inverse of ParseSizes.
func FormatSizes(sizes []int) string {
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
