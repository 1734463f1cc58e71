// Package ociimage writes images as OCI image layout archives (a tar of
// oci-layout, index.json and blobs/sha256/...), deterministically and
// without a container engine, and pushes such an archive to a registry.
// The OCI objects (manifests, configs, indexes, the layout, the registry
// protocol) are go-containerregistry's; this package only decides what
// goes in them and how the archive is named.
//
// Use it for images built from files we already have on disk: the release
// image of `make image` and `make release` (Release, for cmd/mkimage and
// the VM suite), one image per architecture behind an image index, and the
// busybox and pause images of the VM suite (integration/vm), among them a
// Debian root filesystem with files of ours above it (Image, WriteLayout).
// A single-image archive is what `ctr images import`, `podman load` and
// `docker load` accept; a multi-architecture archive is an image index,
// for PushArchive, `ctr images import` and `podman load` (which take the
// image of their own platform). Do not use it to read or change
// images built elsewhere: use go-containerregistry directly.
package ociimage
