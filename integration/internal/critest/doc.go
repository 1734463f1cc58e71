// Package critest holds what the VM suite needs to run SIG Node's CRI
// validation suite (critest, from sigs.k8s.io/cri-tools) against
// containerd with and without cgdelegate, and to judge the result:
//
//   - Images: the images critest pulls from public registries, built on
//     busybox and integration/cmd/critestimage, with the references
//     critest names (the VM serves them from a registry of its own);
//   - Skips: the specs skipped by name, each with its reason;
//   - Passes: the configurations critest runs under (no plugin, the
//     shipped config, pinning);
//   - ReadReport and Compare: ginkgo's JSON report read into one state per
//     spec, and the differences between a pass with cgdelegate and the
//     pass without it, each either explained (Explained, listed in
//     docs/critest.md) or a failure.
//
// docs/critest.md is the reference; a test keeps it and this package
// in agreement.
package critest

// Module and Version are the critest the suite builds (go test -c of
// Module's cmd/critest), cached by Version.
const (
	Module  = "sigs.k8s.io/cri-tools"
	Version = "v1.37.0"
)

// Where a conformance boot's initramfs holds critest's pieces
// (integration/vm writes them, integration/guest reads them): critest,
// the stand-in as the node's ipcmk, and the images, numbered in Images'
// order (ImagesDir/<i>.tar).
const (
	GuestBinary = "/usr/local/bin/critest"
	GuestIPCMK  = "/usr/local/bin/ipcmk"
	ImagesDir   = "/cgd/critest/images"
	ModulesDir  = "/cgd/critest/modules"
)

// Modules are the kernel modules critest's privileged and capability
// specs need (brctl addbr), as paths below lib/modules/<release>/kernel,
// in load order; the VM's kernel has them as modules, not built in. The
// guest loads them from ModulesDir before the first pass.
var Modules = []string{"net/llc/llc.ko", "net/802/stp.ko", "net/bridge/bridge.ko"}
