// Package manifests renders cgdelegate's Helm chart (contrib/helm/cgdelegate)
// into the plain manifests of contrib/kubernetes, and renders the
// DaemonSet's pod as a static pod (StaticPod), for a kubelet without an API
// server: the VM suite (integration/guest) runs cgdelegate that way, from
// the shipped manifests, so what it proves is what ships.
//
// Generate is what `make manifests` writes (integration/cmd/manifests); the
// package's tests fail when a file differs from it. The package embeds its
// own copies of the rendered DaemonSet and ConfigMap (shipped/, written by
// Generate too), because go:embed cannot reach contrib/kubernetes.
//
// Use StaticPod to run the shipped pod template on a node that has no
// DaemonSet controller. Do not use it to edit the manifests: the chart is the
// source, and the rendered pod follows it.
package manifests
