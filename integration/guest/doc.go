// Package guest holds the integration scenarios that run inside the VM
// booted by integration/vm. They are Go tests behind the integration_guest
// build tag, compiled on the host with
//
//	CGO_ENABLED=0 go test -c -tags integration_guest ./integration/guest
//
// and run as /cgd/guest.test by the VM's /init. TestMain reads the boot
// variant from the kernel command line (cgd.* parameters), starts containerd
// and, per variant, the cgdelegate NRI plugin, then every scenario drives
// containerd through its CRI socket, never through ctr, which would bypass
// NRI. Each scenario prints one "CGD-RESULT {json}" line for the host.
//
// Running these tests anywhere but in that VM is pointless and unsafe: they
// remount /sys/fs/cgroup and kill processes.
package guest
