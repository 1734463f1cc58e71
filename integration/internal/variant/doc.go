// Package variant is the one definition of a boot of the VM integration
// suite. A Variant is a host configuration (containerd version, nsdelegate,
// how cgdelegate runs, CPUs and NUMA nodes, ...) and the scenarios the guest
// runs in it, each named by a Scenario identifier.
//
// integration/vm encodes the variant onto the kernel command line (cgd.*
// parameters, Encode) and expects one result per scenario; integration/guest
// decodes it from /proc/cmdline (Decode) and runs the scenarios by the same
// identifiers. Suite and DemoVariant are the variants the harness boots.
//
// The package is pure and has no build tag, so its round-trip and error
// tests run with the ordinary `go test`. Use it only for the integration
// suite; it says nothing about how cgdelegate is configured in production.
package variant
