// Package guest holds the integration scenarios that run inside the VM
// booted by integration/vm. They are compiled on the host, behind the
// integration_guest build tag, with
//
//	CGO_ENABLED=0 go test -c -tags integration_guest ./integration/guest
//
// and run as /cgd/guest.test by the VM's /init. TestMain decodes the boot
// variant from the kernel command line (integration/internal/variant, cgd.*
// parameters), starts containerd and, per variant, the cgdelegate NRI
// plugin. TestScenarios then runs the variant's scenarios in order, each a
// subtest named by its variant.Scenario identifier and looked up in the
// scenarios table (scenarios_test.go); a scenario the table lacks fails.
// Every scenario drives containerd through its CRI socket, never through
// ctr, which would bypass NRI, and is framed on the console by
// "CGD-SCENARIO <id>" and "CGD-RESULT {json}" lines for the host; a
// scenario that measures something also prints "CGD-METRIC {json}".
//
// The Kubelet scenarios (variants with cgd.kubelet=1) go through a real
// standalone kubelet instead: kubelet_test.go starts it at the first such
// scenario (it kills pods it did not make, so CRI scenarios of the same
// boot run before it), writes static pod manifests from testdata/pods
// (real Pod YAML, embedded) and observes them through the kubelet's /pods
// and containerd's CRI; integration/internal/kubelet holds the pieces that need no
// VM (config by cgroup driver, manifests, the /pods client, pod cgroup
// names). kubelet_scenarios_test.go holds the scenarios.
//
// The Cluster scenarios (variants with cgd.cluster=1) go through a real
// cluster: the control plane runs on the host (integration/vm starts it),
// cluster_test.go starts the kubelet registered with it as Node cgd-vm
// (its kubeconfig from the initramfs) at the first such scenario, and the
// scenarios apply, patch and read pods with kubectl and helm, which run on
// the host as on an operator's workstation (workstation_test.go), and
// poll with an API client on the admin kubeconfig at /root/.kube/config;
// cgroups are read on the node as in the other scenarios.
//
// The scenario files are named by behaviour: writable_test.go (the mount,
// delegation, user namespaces), bounds_test.go (own limits, pod bounds),
// guard_test.go (no nsdelegate, cgroup_writable), hook_test.go,
// pluginmode_test.go, restart_test.go, pinning_test.go, harness_test.go,
// demo_test.go, kubelet_scenarios_test.go and cluster_test.go.
//
// Running these tests anywhere but in that VM is pointless and unsafe: they
// remount /sys/fs/cgroup and kill processes.
package guest
