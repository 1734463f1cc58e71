// Package inspect parses what the integration scenarios observe inside the
// VM and inside containers: mountinfo lines, cgroup files and the kernel
// command line. It is pure (readers in, values out) so that it is unit
// tested on any machine.
package inspect
