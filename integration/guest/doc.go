// Package guest holds the integration scenarios that run inside the VM
// booted by integration/vm. They are compiled on the host, behind the
// integration_guest build tag, with
//
//	CGO_ENABLED=0 go test -c -tags integration_guest ./integration/guest
//
// and run as /cgd/guest.test by the VM's /init. TestMain decodes the boot
// variant from the kernel command line (integration/variant, cgd.*
// parameters), starts containerd and, per variant, the cgdelegate NRI
// plugin. TestScenarios then runs the variant's scenarios in order, each a
// subtest named by its variant.Scenario identifier and looked up in the
// scenarios table (scenarios_test.go); a scenario the table lacks fails.
// Every scenario drives containerd through its CRI socket, never through
// ctr, which would bypass NRI, and is framed on the console by
// "CGD-SCENARIO <id>" and "CGD-RESULT {json}" lines for the host.
//
// The scenario files are named by behaviour: writable_test.go (the mount,
// delegation, user namespaces), bounds_test.go (own limits, pod bounds),
// guard_test.go (no nsdelegate, cgroup_writable), hook_test.go,
// pluginmode_test.go, restart_test.go, pinning_test.go, harness_test.go and
// demo_test.go.
//
// Running these tests anywhere but in that VM is pointless and unsafe: they
// remount /sys/fs/cgroup and kill processes.
package guest
