// Package kubelet drives a standalone kubelet (no API server) for the VM
// integration suite: it writes the KubeletConfiguration, writes and removes
// static pod manifests, and reads the kubelet's read-only /pods endpoint
// with k8s.io/api types.
//
// Config is parameterised by the cgroup driver (cgroupfs or systemd), and
// PodCgroup knows both drivers' pod cgroup names, so the busybox and the
// systemd variants share it. The package has no build tag and touches no
// host path of its own: every directory and URL is an argument, so its unit
// tests run with the ordinary `go test`.
//
// Use it only for the integration suite; it is not a kubelet client for
// production nodes.
package kubelet
