// Package bench holds the pure parts of `make bench-node` (the BenchNode
// scenario of integration/guest, booted by integration/vm's TestBenchNode):
// the trace of the node-shared containers' cpusets that the guest polls and
// the lags read from it, the plugin's process counters parsed from /proc,
// the sizes on the kernel command line and the table the host prints. It is
// pure (readers and values in, values out) so that it is unit tested on any
// machine.
//
// Do not use it for pass/fail decisions of the VM suite: its numbers are
// measurements under emulation, reported and never judged, except where the
// guest checks a correctness property (an overlap that never clears, a
// cpuset a restart moved).
package bench
