// Package inspect parses what the integration scenarios observe inside the
// VM and inside containers: mountinfo lines, cgroup files and the markers
// that container scripts print. It is pure (readers in, values out) so that
// it is unit tested on any machine. The boot variant on the kernel command
// line is integration/internal/variant's, not this package's.
package inspect
