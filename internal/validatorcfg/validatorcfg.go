// Package validatorcfg reads what the runtime's NRI default validator is
// set to reject, from the runtime's own config files, so that cgdelegate
// refuses a container it could not adjust anyway with an error naming the
// setting.
//
// NRI's Configure tells a plugin the runtime's name and version, never its
// validator settings, and the validator's own refusal ("plugin "cgdelegate"
// attempted restricted OCI hook injection") does not say which setting to
// change. Use FromConfig with the runtime seen in Configure. For containerd,
// Read takes its config.toml (config containerdConfig) and follows imports
// as containerd does (globs, paths relative to the importing file, main
// file first, later files override earlier ones). For CRI-O, ReadCRIO takes
// crio.conf and the crio.conf.d directory (crioConfig, crioConfigDir) and
// reads them as CRI-O does (crio.go). Both return which settings reject
// cgdelegate's adjustments and where they are set. Settings given on the
// runtime's command line are not seen.
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
	"github.com/cgdelegate/cgdelegate/internal/spec"
	"github.com/cgdelegate/cgdelegate/internal/writable"
)

// Table is where containerd keeps the default validator's settings.
const Table = `[plugins."io.containerd.nri.v1.nri".default_validator]`

// The containerd settings that reject cgdelegate's adjustments.
const (
	// RejectHooks refuses any plugin's OCI hook (cgdelegate's createRuntime
	// hook, on every writable container).
	RejectHooks = "reject_oci_hook_adjustment"
	// RejectNamespaces refuses any plugin's namespace change (cgdelegate
	// adds a cgroup namespace when a spec has none).
	RejectNamespaces = "reject_namespace_adjustment"
)

// Dialect is how one runtime names the default validator's settings.
type Dialect struct {
	// Runtime is the runtime's name in messages ("containerd", "CRI-O").
	Runtime string
	// Table is the TOML table holding the settings.
	Table string
	// The keys: the validator on, hooks refused, namespaces refused.
	EnableKey, RejectHooksKey, RejectNamespacesKey string
}

// Containerd and CRIO are the two runtimes' dialects.
var (
	Containerd = Dialect{"containerd", Table, "enable", RejectHooks, RejectNamespaces}
	CRIO       = Dialect{"CRI-O", CRIOTable, "nri_enable_default_validator", CRIORejectHooks, CRIORejectNamespaces}
)

// Setting is one validator key in force and the file that set it.
type Setting struct {
	On   bool
	File string
}

// Validator is what a runtime's default validator is set to, after every
// file the runtime reads.
type Validator struct {
	Keys             Dialect
	Enable           Setting
	RejectHooks      Setting
	RejectNamespaces Setting
}

// Rejects returns the setting (its key in v.Keys) that makes the enabled
// validator refuse an adjustment with a hook (hook) or a namespace (ns),
// and the file that sets it; "" when none does.
func (v Validator) Rejects(hook, ns bool) (key, file string) {
	switch {
	case !v.Enable.On:
		return "", ""
	case hook && v.RejectHooks.On:
		return v.Keys.RejectHooksKey, v.RejectHooks.File
	case ns && v.RejectNamespaces.On:
		return v.Keys.RejectNamespacesKey, v.RejectNamespaces.File
	}
	return "", ""
}

// set sets on v every validator key of values (the validator table of the
// file at path).
func (v *Validator) set(path string, values map[string]any) error {
	for key, dst := range map[string]*Setting{
		v.Keys.EnableKey: &v.Enable, v.Keys.RejectHooksKey: &v.RejectHooks, v.Keys.RejectNamespacesKey: &v.RejectNamespaces,
	} {
		val, ok := values[key]
		if !ok {
			continue
		}
		b, isBool := val.(bool)
		if !isBool {
			return fmt.Errorf("%s: %s %s = %v is not a boolean", path, v.Keys.Table, key, val)
		}
		*dst = Setting{On: b, File: path}
	}
	return nil
}

// ErrRead is wrapped by every error of Read and ReadCRIO.
var ErrRead = errors.New("cannot read the runtime's NRI validator settings")

// maxFiles bounds the files read (an import cycle, a huge glob, a huge
// drop-in directory).
const maxFiles = 256

// Read reads containerd's config file at path and every file it imports.
// A missing main file is no error: the zero Validator (nothing rejected).
func Read(path string) (Validator, error) {
	v := Validator{Keys: Containerd}
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
			return Validator{Keys: Containerd}, nil
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
	if err := v.set(path, nri.DefaultValidator); err != nil {
		return nil, err
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

// ErrRejected is wrapped by the refusal of Check, after the runtime's
// name: the runtime's validator would refuse the container's adjustment
// anyway, with a message that does not name the setting.
var ErrRejected = errors.New("NRI default validator is set to refuse cgdelegate's adjustment")

// FromConfig reads the validator settings of the runtime the plugin runs
// under (runtime, from Configure): containerd's config cfg.ContainerdConfig
// names, or CRI-O's cfg.CRIOConfig and cfg.CRIOConfigDir. It returns the
// admission rule for them, for nri.WithAdmission: nil when they refuse
// nothing cgdelegate does, the files are disabled or missing, or the
// runtime is neither (nothing is known of its validator).
func FromConfig(cfg config.Config, runtime Runtime) (writable.Check, error) {
	var (
		v   Validator
		err error
	)
	switch runtime {
	case RuntimeContainerd:
		path := cfg.ContainerdConfigPath()
		if path == "" {
			return nil, nil
		}
		v, err = Read(path)
	case RuntimeCRIO:
		v, err = ReadCRIO(cfg.CRIOConfigPaths())
	default:
		return nil, nil
	}
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
		key, file := v.Rejects(!spec.HasHook(c.Ctr, hookPath), !hasCgroupNS(c.Ctr))
		if key == "" {
			return nil
		}
		what := "OCI hook (cgdelegate-hook, createRuntime)"
		if key == v.Keys.RejectNamespacesKey {
			what = "cgroup namespace"
		}
		return fmt.Errorf("%s's %w: %s = true under %s in %s refuses the %s cgdelegate adds to this container; "+
			"set %s = false there and restart %s, or do not ask for writable cgroups",
			v.Keys.Runtime, ErrRejected, key, v.Keys.Table, file, what, key, v.Keys.Runtime)
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
