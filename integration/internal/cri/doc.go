// Package cri is a small CRI (Container Runtime Interface) client for the
// integration suite. It drives a real containerd through its CRI gRPC socket
// the way a kubelet would: host-network pods with a cgroupfs cgroup_parent,
// busybox containers, and ExecSync to observe what happens inside them.
//
// Use it from the guest-side scenarios in integration/guest. It is not a
// general-purpose CRI library: it fills in only the fields those scenarios
// need, and it never talks to anything but a local Unix socket.
package cri
