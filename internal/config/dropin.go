package config

// The runtime's NRI drop-in, as `cgdelegate install-nri-config` (the
// chart's runtimeConfig.install) puts it on a node: where each runtime
// reads it, its text (contrib's embedded files, the one source), the
// systemd unit to restart, and the check that the runtime's config, read as
// the runtime reads it, turns the default validator on with it.

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cgdelegate/cgdelegate/contrib"
)

// DropIn is one runtime's NRI drop-in.
type DropIn struct {
	Runtime Runtime
	// Path is the file, absolute on the node.
	Path string
	// Text is its content.
	Text string
	// Unit is the runtime's systemd unit.
	Unit string
}

// The main config files the drop-ins are read with.
const (
	// ContainerdMainConfig is containerd's config file: containerd 2.x
	// reads its conf.d only when this file exists and imports it (with no
	// file it runs on built-in defaults and imports nothing).
	ContainerdMainConfig = "/etc/containerd/config.toml"
	// ContainerdImport is the import containerd 2.x's default config
	// (`containerd config default`) has.
	ContainerdImport = "/etc/containerd/conf.d/*.toml"
	// CRIOMainConfig and CRIOConfigDir are what CRI-O reads by default.
	CRIOMainConfig = "/etc/crio/crio.conf"
	CRIOConfigDir  = "/etc/crio/crio.conf.d"
)

// MinimalContainerdConfig is the config.toml written where there is none:
// containerd's built-in defaults, plus the import of its conf.d (relative
// to the file, which containerd resolves as the same directory).
const MinimalContainerdConfig = "# Written by cgdelegate install-nri-config: containerd's defaults, and its\n" +
	"# drop-ins (containerd 2.x reads none without this file).\n" +
	"version = 3\nimports = [\"conf.d/*.toml\"]\n"

// DropInFor returns the drop-in of the runtime family rt; false for
// another.
func DropInFor(rt Runtime) (DropIn, bool) {
	switch rt {
	case RuntimeContainerd:
		return DropIn{rt, "/etc/containerd/conf.d/cgdelegate.toml", contrib.ContainerdDropIn, "containerd.service"}, true
	case RuntimeCRIO:
		return DropIn{rt, CRIOConfigDir + "/10-cgdelegate.conf", contrib.CRIODropIn, "crio.service"}, true
	}
	return DropIn{}, false
}

// ErrDropInIgnored means the runtime's config, read as the runtime reads
// it, does not turn the default validator on although the drop-in is in
// place.
var ErrDropInIgnored = errors.New("the runtime's config does not enable NRI's default validator with cgdelegate's drop-in")

// CheckDropIn reads the runtime's config files under root ("/" on the
// node) as the runtime does, and returns nil when the default validator is
// on, else an error wrapping ErrDropInIgnored saying why and what to do.
func (d DropIn) CheckDropIn(root string) error {
	var (
		v   Validator
		err error
	)
	switch d.Runtime {
	case RuntimeContainerd:
		v, err = ReadContainerdValidator(filepath.Join(root, ContainerdMainConfig))
	case RuntimeCRIO:
		v, err = ReadCRIOValidator(filepath.Join(root, CRIOMainConfig), filepath.Join(root, CRIOConfigDir))
	default:
		return fmt.Errorf("%w: runtime %q has no drop-in", ErrDropInIgnored, d.Runtime)
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrDropInIgnored, err)
	case v.Enable.On:
		return nil
	case v.Enable.File != "":
		return fmt.Errorf("%w: %s = false under %s in %s, read after %s; remove it there",
			ErrDropInIgnored, v.Keys.EnableKey, v.Keys.Table, v.Enable.File, d.Path)
	case d.Runtime == RuntimeContainerd:
		return fmt.Errorf("%w: %s does not import %s; add imports = [%q] to it (containerd 2.x's default config has it)",
			ErrDropInIgnored, ContainerdMainConfig, d.Path, ContainerdImport)
	}
	return fmt.Errorf("%w: CRI-O does not read %s", ErrDropInIgnored, d.Path)
}
