package config

// The runtime's NRI default validator settings, read from the runtime's own
// config files, so that cgdelegate can refuse a container it could not
// adjust anyway with an error naming the setting (writable.ValidatorRule).
//
// NRI's Configure tells a plugin the runtime's name and version, never its
// validator settings, and the validator's own refusal ("plugin "cgdelegate"
// attempted restricted OCI hook injection") does not say which setting to
// change. For containerd, ReadContainerdValidator takes its config.toml
// (config containerdConfig) and follows imports as containerd does (globs,
// paths relative to the importing file, main file first, later files
// override earlier ones). For CRI-O, ReadCRIOValidator takes crio.conf and
// the crio.conf.d directory (crioConfig, crioConfigDir) and reads them as
// CRI-O does (validator_crio.go). Both return which settings reject
// cgdelegate's adjustments and where they are set. Settings given on the
// runtime's command line are not seen.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// ContainerdValidatorTable is where containerd keeps the default
// validator's settings.
const ContainerdValidatorTable = `[plugins."io.containerd.nri.v1.nri".default_validator]`

// The containerd settings that reject cgdelegate's adjustments.
const (
	// ContainerdRejectHooks refuses any plugin's OCI hook (cgdelegate's createRuntime
	// hook, on every writable container).
	ContainerdRejectHooks = "reject_oci_hook_adjustment"
	// ContainerdRejectNamespaces refuses any plugin's namespace change (cgdelegate
	// adds a cgroup namespace when a spec has none).
	ContainerdRejectNamespaces = "reject_namespace_adjustment"
)

// ValidatorDialect is how one runtime names the default validator's settings.
type ValidatorDialect struct {
	// Runtime is the runtime's name in messages ("containerd", "CRI-O").
	Runtime string
	// Table is the TOML table holding the settings.
	Table string
	// The keys: the validator on, hooks refused, namespaces refused.
	EnableKey, RejectHooksKey, RejectNamespacesKey string
	// Since is the first release (major, minor) with the default
	// validator: an older one ignores the table (docs/compatibility.md).
	Since [2]int
}

// HasValidator reports whether the runtime's version (as NRI's Configure
// reports it: "v2.4.2", "2.1.0", "1.34.1") has the default validator; true
// when the version can not be read.
func (d ValidatorDialect) HasValidator(version string) bool {
	v := strings.TrimPrefix(strings.TrimSpace(version), "v")
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")
	maj, err1 := strconv.Atoi(major)
	mnr, err2 := strconv.Atoi(strings.TrimRightFunc(minor, func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil || d.Since == [2]int{} {
		return true
	}
	return maj > d.Since[0] || maj == d.Since[0] && mnr >= d.Since[1]
}

// ContainerdValidatorKeys and CRIOValidatorKeys are the two runtimes'
// dialects.
var (
	ContainerdValidatorKeys = ValidatorDialect{"containerd", ContainerdValidatorTable, "enable", ContainerdRejectHooks, ContainerdRejectNamespaces, [2]int{2, 2}}
	CRIOValidatorKeys       = ValidatorDialect{"CRI-O", CRIOValidatorTable, "nri_enable_default_validator", CRIORejectHooks, CRIORejectNamespaces, [2]int{1, 34}}
)

// ValidatorSetting is one validator key in force and the file that set it.
type ValidatorSetting struct {
	On   bool
	File string
}

// Validator is what a runtime's default validator is set to, after every
// file the runtime reads.
type Validator struct {
	Keys             ValidatorDialect
	Enable           ValidatorSetting
	RejectHooks      ValidatorSetting
	RejectNamespaces ValidatorSetting
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
	for key, dst := range map[string]*ValidatorSetting{
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
		*dst = ValidatorSetting{On: b, File: path}
	}
	return nil
}

// ReadValidator reads the NRI default validator settings of the runtime
// family runtime from the files cfg names: containerd's ContainerdConfig
// and its imports, or CRI-O's CRIOConfig and CRIOConfigDir. known is false
// when nothing can be known: another runtime (or none yet), or its files
// disabled (none). A missing file is no error: the runtime's defaults.
func ReadValidator(cfg Config, runtime Runtime) (v Validator, known bool, err error) {
	switch runtime {
	case RuntimeContainerd:
		path := cfg.ContainerdConfigPath()
		if path == "" {
			return Validator{Keys: ContainerdValidatorKeys}, false, nil
		}
		v, err = ReadContainerdValidator(path)
		return v, err == nil, err
	case RuntimeCRIO:
		file, dir := cfg.CRIOConfigPaths()
		if file == "" && dir == "" {
			return Validator{Keys: CRIOValidatorKeys}, false, nil
		}
		v, err = ReadCRIOValidator(file, dir)
		return v, err == nil, err
	}
	return Validator{}, false, nil
}

// ErrValidatorRead is wrapped by every error of ReadContainerdValidator and
// ReadCRIOValidator.
var ErrValidatorRead = errors.New("cannot read the runtime's NRI validator settings")

// maxFiles bounds the files read (an import cycle, a huge glob, a huge
// drop-in directory).
const maxFiles = 256

// ReadContainerdValidator reads containerd's config file at path and every file it imports.
// A missing main file is no error: the zero Validator (nothing rejected).
func ReadContainerdValidator(path string) (Validator, error) {
	v := Validator{Keys: ContainerdValidatorKeys}
	pending := []string{path}
	seen := map[string]bool{}
	for len(pending) > 0 {
		file := pending[0]
		pending = pending[1:]
		if seen[file] {
			continue // containerd loads a file once
		}
		if seen[file] = true; len(seen) > maxFiles {
			return Validator{}, fmt.Errorf("%w: more than %d files imported from %s", ErrValidatorRead, maxFiles, path)
		}
		imports, err := readContainerdFile(file, &v)
		if errors.Is(err, fs.ErrNotExist) && file == path {
			return Validator{Keys: ContainerdValidatorKeys}, nil
		}
		if err != nil {
			return Validator{}, fmt.Errorf("%w: %w", ErrValidatorRead, err)
		}
		more, err := resolveImports(file, imports)
		if err != nil {
			return Validator{}, fmt.Errorf("%w: %w", ErrValidatorRead, err)
		}
		pending = append(pending, more...)
	}
	return v, nil
}

// file is the part of a containerd config file Read looks at.
type containerdFile struct {
	Imports []string                  `toml:"imports"`
	Plugins map[string]toml.Primitive `toml:"plugins"`
}

type nriPlugin struct {
	DefaultValidator map[string]any `toml:"default_validator"`
}

// readFile sets on v every validator key the file sets, and returns its
// imports.
func readContainerdFile(path string, v *Validator) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f containerdFile
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
		return nil, fmt.Errorf("%s: %s: %w", path, ContainerdValidatorTable, err)
	}
	if err := v.set(path, nri.DefaultValidator); err != nil {
		return nil, err
	}
	return f.Imports, nil
}

// resolve expands the imports of the file at path as containerd does:
// relative paths are relative to the importing file's directory, and globs
// are expanded in order.
func resolveImports(path string, imports []string) ([]string, error) {
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
