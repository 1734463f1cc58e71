// Package vm is the host side of the integration suite: it builds a small
// qemu VM with pure cgroup v2 (with or without nsdelegate), real containerd
// 2.x with NRI, real runc and cgdelegate, boots it once per variant of
// integration/internal/variant (Suite) and reports every scenario the variant lists
// as its own subtest, variant/scenario (TestVM/ctd24-nsdelegate-external/PodBounds).
// The variant reaches the guest as cgd.* kernel parameters (Variant.Encode).
//
// The harness itself lives in vm_test.go behind the integration_vm build tag;
// run it with `make integration` after integration/vm/install-deps.sh. The
// files without a build tag are its pure helpers (initramfs writer, console
// result parsing), unit tested by the ordinary `go test`; the OCI image
// layouts are written by internal/ociimage.
//
// What it builds, and where:
//   - the Debian 6.12 kernel (apt-get download + dpkg-deb), containerd (each
//     pinned version) and runc with go install, cached by version under
//     $CGDELEGATE_CACHE (default $HOME/.cache/cgdelegate-integration);
//   - the kubelet, kube-proxy, kube-apiserver, kube-controller-manager,
//     kube-scheduler and kubectl (kubelet_build_test.go: k8s.io/kubernetes
//     from the module proxy with its staging modules replaced by their
//     published versions), in one go build cached by version under
//     kubernetes/, only when a selected variant runs a kubelet;
//   - for the cluster variants (Variant.Cluster): our etcd (testdata/etcd,
//     around go.etcd.io/etcd/server/v3/embed, in a module of its own) under
//     etcd/; the kernel's virtio-net modules under netmodules/; the pod
//     network's bridge, host-local and loopback CNI plugins of Debian's
//     containernetworking-plugins under cni/, the kernel's netfilter,
//     bridge and veth modules under netfilter/ (podnet_run_test.go); and,
//     every run, the cluster's PKI and kubeconfigs (cluster.go,
//     crypto/x509, nothing downloaded);
//   - for the conformance boot (Variant.RunsCritest): critest built from
//     the module proxy under critest/<version>, the kernel's bridge, stp
//     and llc modules under critestmodules/ (critest_build_test.go); every
//     run, critest's images and their stand-in (integration/internal/critest);
//   - for the systemd variants (Variant.Systemd), a Debian bookworm root
//     filesystem (mmdebstrap minbase + systemd, dbus, kmod; builder
//     debianRootfs, reusable for other package sets), cached as a tar under
//     rootfs/<name>-<hash of the resolved package versions>;
//   - cgdelegate, cgdelegate-hook, the guest test binary, a pause and a null
//     CNI plugin, the busybox and pause OCI images and one uncompressed
//     initramfs per containerd version, init and kubelet or not (only the
//     kubelet variants carry its 90 MB), in a temporary work dir, every run.
//     The busybox image also holds the in-pod tools (cgdelegate-init, the
//     delegate package's test binary, runc); when a variant runs
//     InPodSystemd, the initramfs also holds an image made from the systemd
//     root filesystem, which that scenario imports; when a variant runs
//     ClusterDocker or ClusterPodman, its initramfs holds the engines image
//     (engines_harness_test.go: a second root filesystem, Debian's
//     docker.io, podman and crun with paths no scenario runs excluded,
//     with cgdelegate-init and a busybox image to load in a layer above
//     it; about 330 MB), which the first of them imports.
//   - the release image (internal/ociimage.Release, what `make image`
//     writes), only in the initramfs of variants that run the DaemonSet's pod.
//
// Two inits: the busybox variants boot init.sh (busybox PID 1, cgroup2
// mounted by the script); the systemd variants boot init-systemd.sh, which
// copies the Debian root into a tmpfs and switch_roots to systemd, which
// mounts cgroup2 (nsdelegate) and starts cgd-guest.service (systemd.go),
// which runs guest-run.sh and powers off. More units (a kubelet) are one
// more entry in systemdUnits.
//
// The cluster (cluster.go, cluster_run_test.go): before it boots a
// Cluster variant, the harness brings up the pod network's host side
// (podnet_run_test.go, the plan in integration/internal/podnet; root only):
// a bridge, cgdbr0 with the host at 10.213.0.1/24, a tap per guest node in
// it and a route to each node's pod CIDR (10.244.<n>.0/24) through the
// node, under a lock (/run/cgdelegate-vm-net.lock) that also tells a killed
// run's leftover links, which it removes, from a running one's. It then
// starts etcd, kube-apiserver (on the bridge address, Node,RBAC
// authorization, client certificates signed by the run's CA),
// kube-controller-manager and kube-scheduler, each after the one before
// answers its health check, and stops them and takes the network down when
// the variant's test ends, passed or failed (process groups, SIGTERM then
// SIGKILL; Pdeathsig kills them if the test binary dies first). The guest's
// NIC is on its tap (only that variant; every other boots with -nic none);
// its cgdnet.* kernel parameters say which node it is, guest-run.sh gives
// eth0 its address, and its kubelet registers as Node cgd-vm with that
// InternalIP, which the API server reaches for kubectl logs and exec. The
// guest writes the bridge CNI network for its pod CIDR before containerd
// starts and runs kube-proxy (nftables mode) once its Node is Ready; pods,
// cgdelegate's DaemonSet among them, reach the API server through the
// kubernetes Service. A cluster boot that runs ClusterMixedFleet also
// boots a second, smaller node without nsdelegate on the second tap
// (mixedfleet_test.go, variant.MixedFleetNode), in the background before
// the first; it idles with only containerd until that scenario asks it to
// join, and the host stops it and reports it after the first node's VM
// ends. The control plane runs on
// the host rather than in the guest because under TCG it would take the
// guest's CPU: the API server and etcd alone would compete with the
// kubelet, containerd and the pods the scenarios time, on an emulated
// machine that is already several times slower than the host.
//
// Knobs, all optional:
//
//	CGD_VARIANTS=ctd24,numa         boot only variants whose name contains one of these
//	                                (CGD_VARIANTS=Cluster: the cluster boot alone)
//	CGD_SCENARIOS=PodBounds,...     run only these scenarios (variant.Scenario
//	                                identifiers)
//	CGD_VM_VERBOSE=1                stream the whole serial console into the test log
//	CGD_KEEP_WORKDIR=1              keep the work dir (initramfs, console logs)
//	CGD_QEMU_ACCEL=kvm              qemu accelerator (default tcg,thread=multi;
//	                                nested KVM hangs a stock kernel on our machines)
//
// Two tests boot a VM of their own and never run in the suite: TestDemo
// (CGD_DEMO=1, make demo) and TestBenchNode (CGD_BENCH=1, make bench-node;
// CGD_BENCH_SIZES=0,10 picks the numbers of node-shared containers, passed
// to the guest as the cgdbench.sizes kernel parameter, which is not a cgd.*
// one: integration/internal/bench).
//
// The guest side protocol: /init prints CGD-BOOT, each scenario prints
// "CGD-SCENARIO <id>" when it starts and "CGD-RESULT {json}" when it ends,
// the guest test binary's exit is "CGD-DONE {json}", and "CGD-FATAL ..."
// says why the guest gave up. "CGD-METRIC {json}" is a measurement of a
// scenario; the host logs it in the scenario's subtest and never judges it. A scenario without a result line fails; so
// do a result for a scenario the variant does not list and a boot that
// never finishes.
//
// Do not use this package for anything but the integration suite: it runs
// go install, apt-get download and qemu-system-x86_64 on the host.
package vm
