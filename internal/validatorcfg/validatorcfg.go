// Package validatorcfg reads what containerd's NRI default validator is set
// to reject, from containerd's own config files, so that cgdelegate refuses
// a container it could not adjust anyway with an error naming the setting.
//
// NRI's Configure tells a plugin the runtime's name and version, never its
// validator settings, and the validator's own refusal ("plugin "cgdelegate"
// attempted restricted OCI hook injection") does not say which setting to
// change. Use Read with containerd's config.toml (config containerdConfig):
// it follows imports as containerd does (globs, paths relative to the
// importing file, main file first, later files override earlier ones) and
// returns which settings reject cgdelegate's adjustments and where they are
// set. It knows nothing of CRI-O, whose [crio.nri.default_validator] it does
// not read.
package validatorcfg

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/BurntSushi/toml"
	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/writable"
	"github.com/cgdelegate/cgdelegate/ocispec"
)

// Table is where containerd keeps the default validator's settings.
const Table = `[plugins."io.containerd.nri.v1.nri".default_validator]`

// The settings that reject cgdelegate's adjustments.
const (
	// RejectHooks refuses any plugin's OCI hook (cgdelegate's createRuntime
	// hook, on every writable container).
	RejectHooks = "reject_oci_hook_adjustment"
	// RejectNamespaces refuses any plugin's namespace change (cgdelegate
	// adds a cgroup namespace when a spec has none).
	RejectNamespaces = "reject_namespace_adjustment"
)

// Setting is one validator key in force and the file that set it.
type Setting struct {
	On   bool
	File string
}

// Validator is what the default validator is set to, after every import.
type Validator struct {
	Enable           Setting
	RejectHooks      Setting
	RejectNamespaces Setting
}

// Rejects returns the setting (RejectHooks or RejectNamespaces) that makes
// the enabled validator refuse an adjustment with a hook (hook) or a
// namespace (ns), and the file that sets it; "" when none does.
func (v Validator) Rejects(hook, ns bool) (key, file string) {
	switch {
	case !v.Enable.On:
		return "", ""
	case hook && v.RejectHooks.On:
		return RejectHooks, v.RejectHooks.File
	case ns && v.RejectNamespaces.On:
		return RejectNamespaces, v.RejectNamespaces.File
	}
	return "", ""
}

// ErrRead is wrapped by every error of Read.
var ErrRead = errors.New("cannot read containerd's NRI validator settings")

// maxFiles bounds the imports followed (an import cycle, a huge glob).
const maxFiles = 64

// Read reads containerd's config file at path and every file it imports.
// A missing main file is no error: the zero Validator (nothing rejected).
func Read(path string) (Validator, error) {
	var v Validator
	pending := []string{path}
	seen := map[string]bool{}
	for len(pending) > 0 {
		file := pending[0]
		pending = pending[1:]
		if seen[file] {
			continue // containerd loads a file once
		}
		if seen[file] = true; len(seen) > maxFiles {
			return Validator{}, fmt.Errorf("%w: more than %d files imported from %s", ErrRead, maxFiles, path)
		}
		imports, err := readFile(file, &v)
		if errors.Is(err, fs.ErrNotExist) && file == path {
			return Validator{}, nil
		}
		if err != nil {
			return Validator{}, fmt.Errorf("%w: %w", ErrRead, err)
		}
		more, err := resolve(file, imports)
		if err != nil {
			return Validator{}, fmt.Errorf("%w: %w", ErrRead, err)
		}
		pending = append(pending, more...)
	}
	return v, nil
}

// file is the part of a containerd config file Read looks at.
type file struct {
	Imports []string                  `toml:"imports"`
	Plugins map[string]toml.Primitive `toml:"plugins"`
}

type nriPlugin struct {
	DefaultValidator map[string]any `toml:"default_validator"`
}

// readFile sets on v every validator key the file sets, and returns its
// imports.
func readFile(path string, v *Validator) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f file
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	prim, ok := f.Plugins["io.containerd.nri.v1.nri"]
	if !ok {
		return f.Imports, nil
	}
	var nri nriPlugin
	if err := md.PrimitiveDecode(prim, &nri); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, Table, err)
	}
	for key, dst := range map[string]*Setting{"enable": &v.Enable, RejectHooks: &v.RejectHooks, RejectNamespaces: &v.RejectNamespaces} {
		val, ok := nri.DefaultValidator[key]
		if !ok {
			continue
		}
		b, isBool := val.(bool)
		if !isBool {
			return nil, fmt.Errorf("%s: %s %s = %v is not a boolean", path, Table, key, val)
		}
		*dst = Setting{On: b, File: path}
	}
	return f.Imports, nil
}

// resolve expands the imports of the file at path as containerd does:
// relative paths are relative to the importing file's directory, and globs
// are expanded in order.
func resolve(path string, imports []string) ([]string, error) {
	var out []string
	for _, imp := range imports {
		if !filepath.IsAbs(imp) {
			imp = filepath.Join(filepath.Dir(path), imp)
		}
		matches, err := filepath.Glob(imp)
		if err != nil {
			return nil, fmt.Errorf("%s: import %q: %w", path, imp, err)
		}
		out = append(out, matches...)
	}
	return out, nil
}

// ErrRejected is wrapped by the refusal of Check: the runtime's validator
// would refuse the container's adjustment anyway, with a message that does
// not name the setting.
var ErrRejected = errors.New("containerd's NRI default validator is set to refuse cgdelegate's adjustment")

// FromConfig reads the validator settings of the containerd config
// cfg.ContainerdConfig names and returns the admission rule for them (nil
// when they refuse nothing cgdelegate does, or the file is disabled or
// missing), for nri.WithAdmission.
func FromConfig(cfg config.Config) (writable.Check, error) {
	path := cfg.ContainerdConfigPath()
	if path == "" {
		return nil, nil
	}
	v, err := Read(path)
	if err != nil {
		return nil, err
	}
	return v.Check(cfg.HookPath), nil
}

// Check is the admission rule for v: it refuses a container whose
// adjustment v would refuse, naming the setting, the file and the fix. It
// is nil when v refuses nothing cgdelegate adds.
func (v Validator) Check(hookPath string) writable.Check {
	if key, _ := v.Rejects(true, true); key == "" {
		return nil
	}
	return func(c *writable.Candidate) error {
		key, file := v.Rejects(!ocispec.HasHook(c.Ctr, hookPath), !hasCgroupNS(c.Ctr))
		if key == "" {
			return nil
		}
		what := "OCI hook (cgdelegate-hook, createRuntime)"
		if key == RejectNamespaces {
			what = "cgroup namespace"
		}
		return fmt.Errorf("%w: %s = true under %s in %s refuses the %s cgdelegate adds to this container; "+
			"set %s = false there and restart containerd, or do not ask for writable cgroups", ErrRejected, key, Table, file, what, key)
	}
}

func hasCgroupNS(ctr *api.Container) bool {
	for _, ns := range ctr.GetLinux().GetNamespaces() {
		if ns.GetType() == "cgroup" {
			return true
		}
	}
	return false
}
