// Package contrib holds, embedded, the runtime drop-ins that turn NRI on
// with its default validator (fail closed per pod): the files
// containerd/cgdelegate.toml and crio/10-cgdelegate.conf are the one
// source of their text. `cgdelegate install-nri-config` (the chart's
// runtimeConfig.install) writes them on a node; the chart's NOTES.txt shows
// them from its own copies under files/, which a test keeps equal.
//
// Use it only for those two texts; it holds nothing else.
package contrib

import _ "embed"

// ContainerdDropIn is containerd/cgdelegate.toml, for
// /etc/containerd/conf.d/cgdelegate.toml.
//
//go:embed containerd/cgdelegate.toml
var ContainerdDropIn string

// CRIODropIn is crio/10-cgdelegate.conf, for
// /etc/crio/crio.conf.d/10-cgdelegate.conf.
//
//go:embed crio/10-cgdelegate.conf
var CRIODropIn string
