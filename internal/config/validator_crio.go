package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/BurntSushi/toml"
)

// CRIOValidatorTable is where CRI-O keeps the default validator's settings
// (internal/config/nri in CRI-O, DefaultValidatorConfig).
const CRIOValidatorTable = "[crio.nri.default_validator]"

// The CRI-O settings that reject cgdelegate's adjustments; CRI-O hands them
// to the same NRI default validator as containerd's reject_* keys.
const (
	// CRIORejectHooks refuses any plugin's OCI hook.
	CRIORejectHooks = "nri_validator_reject_oci_hook_adjustment"
	// CRIORejectNamespaces refuses any plugin's namespace change.
	CRIORejectNamespaces = "nri_validator_reject_namespace_adjustment"
)

// ReadCRIOValidator reads CRI-O's config as CRI-O does at start-up (crio --config
// file --config-dir dir; either may be "", not read):
//
//  1. the main file, /etc/crio/crio.conf by default; a missing one is
//     skipped;
//  2. then every file under the drop-in directory, /etc/crio/crio.conf.d
//     by default, walked recursively in lexical order (filepath.Walk, so
//     00-a.conf before 10-b.conf and sub/ at its name's place), whatever
//     its name; a missing directory is skipped.
//
// Each file is decoded over what the earlier ones set, so a key a later
// file sets overrides it and a key it leaves out keeps its value. CRI-O
// refuses to start on a file that is not TOML or a key of the wrong type;
// so does ReadCRIOValidator, naming the file. CRI-O's command-line flags
// (--nri-validator-reject-oci-hook-adjustment, ...) override every file and
// are not seen here, nor is a reload: CRI-O applies these settings at
// start-up only.
func ReadCRIOValidator(file, dir string) (Validator, error) {
	v := Validator{Keys: CRIOValidatorKeys}
	n := 0
	read := func(path string) error {
		if n++; n > maxFiles {
			return fmt.Errorf("%w: more than %d files in %s", ErrValidatorRead, maxFiles, dir)
		}
		if err := readCRIOFile(path, &v); err != nil {
			return fmt.Errorf("%w: %w", ErrValidatorRead, err)
		}
		return nil
	}
	if file != "" {
		if err := read(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Validator{}, err
		}
	}
	if dir == "" {
		return v, nil
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist) && path == dir:
			return filepath.SkipDir
		case err != nil:
			return fmt.Errorf("%w: %w", ErrValidatorRead, err)
		case d.IsDir():
			return nil
		}
		return read(path)
	})
	if err != nil {
		return Validator{}, err
	}
	return v, nil
}

// crioFile is the part of a CRI-O config file ReadCRIOValidator looks at.
type crioFile struct {
	Crio struct {
		NRI struct {
			DefaultValidator map[string]any `toml:"default_validator"`
		} `toml:"nri"`
	} `toml:"crio"`
}

// readCRIOFile sets on v every validator key the file sets.
func readCRIOFile(path string, v *Validator) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f crioFile
	if _, err := toml.Decode(string(data), &f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return v.set(path, f.Crio.NRI.DefaultValidator)
}
