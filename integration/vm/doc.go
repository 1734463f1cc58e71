// Package vm is the host side of the integration suite: it builds a small
// qemu VM with pure cgroup v2 (with or without nsdelegate), real containerd
// 2.x with NRI, real runc and cgdelegate, boots it once per variant and
// reports every guest scenario as its own subtest.
//
// The harness itself lives in vm_test.go behind the integration_vm build tag;
// run it with `make integration`. The files without a build tag are its pure
// helpers (initramfs and OCI image writers, console result parsing), unit
// tested by the ordinary `go test`.
//
// Do not use this package for anything but the integration suite: it runs
// go install, apt-get download and qemu-system-x86_64 on the host.
package vm
