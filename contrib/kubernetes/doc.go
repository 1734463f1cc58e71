// Package kubernetes holds cgdelegate's Kubernetes manifests (the DaemonSet,
// its ConfigMap and the admission policies, as YAML next to this file) and
// renders the DaemonSet's pod as a static pod (StaticPod), for a kubelet
// without an API server: the VM suite (integration/guest) runs cgdelegate
// that way, from the shipped manifests, so what it proves is what ships.
//
// Use StaticPod to run the shipped pod template on a node that has no
// DaemonSet controller. Do not use it to edit the manifests: they are the
// source, and the rendered pod follows them.
package kubernetes
