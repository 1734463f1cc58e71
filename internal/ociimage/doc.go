// Package ociimage writes a linux/amd64 image of one or two layers as an
// OCI image layout tar (oci-layout, index.json, blobs/sha256/...) with the
// manifest.json of `docker save` beside it, deterministically and without
// a container engine: what `ctr images import`, `podman load` and
// `docker load` accept.
//
// Use it for images built from files we already have on disk: the
// release image of `make image` (Release, for cmd/mkimage and the VM) and the busybox and pause
// images of the VM suite (integration/vm), among them a Debian root
// filesystem with files of ours above it. Do not use it for
// multi-platform images, compressed layers, or to read images.
package ociimage
