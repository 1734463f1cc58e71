// Package podnet is the address plan of the VM cluster's network, shared by
// the host harness (integration/vm), which builds the host's side of it,
// and the guest scenarios (integration/guest), which configure a node:
//
//   - a Linux bridge on the host (the host's address on it is where the
//     API server listens) with one tap per guest node;
//   - each node's address on that bridge, which its kubelet registers as
//     its InternalIP, so the API server reaches the kubelet (kubectl logs,
//     exec) and the nodes reach each other;
//   - each node's pod CIDR, handed out by the bridge and host-local CNI
//     plugins (Debian's containernetworking-plugins) on a bridge inside the
//     node, routed to by the host and by the other nodes;
//   - the files a node needs for that: the CNI network list and kube-proxy's
//     configuration.
//
// Everything here is pure: commands are returned as argument lists, files
// as bytes. Use it for the Cluster boots only; the other boots have no
// network (or qemu's user network) and never import it.
package podnet
