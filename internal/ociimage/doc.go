// Package ociimage writes a single-layer linux/amd64 image as an OCI image
// layout tar (oci-layout, index.json, blobs/sha256/...), deterministically
// and without a container engine: what `ctr images import` and
// `podman load` accept.
//
// Use it for images built from files we already have on disk: the
// release image of `make image` (Release, for cmd/mkimage and the VM) and the busybox and pause
// images of the VM suite (integration/vm). Do not use it for multi-layer
// or multi-platform images, compressed layers, or to read images.
package ociimage
