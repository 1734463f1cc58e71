// Package bench holds the pure parts of `make bench-node` (the BenchNode
// scenario of integration/guest, booted by integration/vm's TestBenchNode)
// and of the suite's scale scenarios (ScaleChurn, ScaleRestart): the trace
// of the node-shared containers' cpusets that the guest polls and the lags
// read from it, the plugin's process counters parsed from /proc and its
// footprint, the comparison of two allocation tables, the sizes on the
// kernel command line and the table the host prints. It is pure (readers
// and values in, values out) so that it is unit tested on any machine.
//
// Do not use its timings for pass/fail decisions of the VM suite: they are
// measurements under emulation, reported and never judged. The guest
// judges only correctness properties with it: an overlap that never
// clears, a cpuset or an allocation table a restart changed, a leak after
// a churn (Leaks, with the tolerance the scenario states).
package bench
