package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CRI-O drop-ins as an operator would write them.
const (
	crioValidator   = "[crio.nri.default_validator]\n"
	crioRejectHooks = "# Hardening: no plugin may inject OCI hooks.\n" + crioValidator +
		"nri_enable_default_validator = true\nnri_validator_reject_oci_hook_adjustment = true\n"
	crioAllowHooks = crioValidator + "nri_validator_reject_oci_hook_adjustment = false\n"
	crioRejectNS   = crioValidator + "nri_enable_default_validator = true\nnri_validator_reject_namespace_adjustment = true\n"
)

// fixture reads a file of testdata/crio, or of the repository's contrib/crio
// (the drop-in cgdelegate ships).
func fixture(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// ReadCRIOValidator reads crio.conf, then crio.conf.d recursively in lexical order,
// each file overriding the keys it sets, as CRI-O does.
func TestReadCRIOValidator(t *testing.T) {
	template := fixture(t, "testdata/crio/crio.conf")              // CRI-O's template, validator commented out
	shipped := fixture(t, "../../contrib/crio/10-cgdelegate.conf") // the validator on, nothing rejected
	mainRejects := template + "\n" + crioRejectHooks               // the main file sets it
	for _, tc := range []struct {
		name     string
		files    map[string]string // crio.conf and crio.conf.d/...
		noMain   bool              // crioConfig: none
		noDir    bool              // crioConfigDir: none
		hook, ns bool              // what cgdelegate would add
		wantKey  string
		wantFile string // relative to the directory
		wantErr  []string
	}{
		{name: "no files at all", hook: true, ns: true},
		{name: "the template: validator commented out", files: map[string]string{"crio.conf": template}, hook: true, ns: true},
		{
			name:  "the shipped drop-in: on, rejects nothing",
			files: map[string]string{"crio.conf": template, "crio.conf.d/10-cgdelegate.conf": shipped}, hook: true, ns: true,
		},
		{
			name: "a drop-in rejects hooks",
			files: map[string]string{
				"crio.conf": template, "crio.conf.d/10-cgdelegate.conf": shipped, "crio.conf.d/20-hardening.conf": crioRejectHooks,
			},
			hook: true, wantKey: CRIORejectHooks, wantFile: "crio.conf.d/20-hardening.conf",
		},
		{
			name:  "rejects hooks, but cgdelegate adds none (hook already in the spec)",
			files: map[string]string{"crio.conf": template, "crio.conf.d/20-hardening.conf": crioRejectHooks},
		},
		{
			name: "the main file rejects hooks; a drop-in that leaves the key out keeps it",
			files: map[string]string{
				"crio.conf": mainRejects, "crio.conf.d/10-cgdelegate.conf": shipped,
			},
			hook: true, wantKey: CRIORejectHooks, wantFile: "crio.conf",
		},
		{
			name: "a later drop-in turns it off",
			files: map[string]string{
				"crio.conf.d/20-hardening.conf": crioRejectHooks, "crio.conf.d/30-allow-hooks.conf": crioAllowHooks,
			},
			hook: true,
		},
		{
			name: "drop-ins override the main file",
			files: map[string]string{
				"crio.conf": mainRejects, "crio.conf.d/30-allow-hooks.conf": crioAllowHooks,
			},
			hook: true,
		},
		{
			name: "lexical order, not numeric: 9- comes after 10-",
			files: map[string]string{
				"crio.conf.d/9-hardening.conf": crioRejectHooks, "crio.conf.d/10-allow-hooks.conf": crioAllowHooks,
			},
			hook: true, wantKey: CRIORejectHooks, wantFile: "crio.conf.d/9-hardening.conf",
		},
		{
			name: "subdirectories are walked in place, names without .conf read too",
			files: map[string]string{
				"crio.conf.d/05-site/hardening": crioRejectHooks, "crio.conf.d/10-cgdelegate.conf": shipped,
			},
			hook: true, wantKey: CRIORejectHooks, wantFile: "crio.conf.d/05-site/hardening",
		},
		{
			name: "the validator turned off later: nothing rejected",
			files: map[string]string{
				"crio.conf.d/20-hardening.conf": crioRejectHooks, "crio.conf.d/90-off.conf": crioValidator + "nri_enable_default_validator = false\n",
			},
			hook: true,
		},
		{
			name:  "rejects namespaces",
			files: map[string]string{"crio.conf": template, "crio.conf.d/20-ns.conf": crioRejectNS},
			ns:    true, wantKey: CRIORejectNamespaces, wantFile: "crio.conf.d/20-ns.conf",
		},
		{
			name:  "rejects namespaces, but cgdelegate adds none (the spec has one)",
			files: map[string]string{"crio.conf.d/20-ns.conf": crioRejectNS}, hook: true,
		},
		{
			name: "containerd's key names mean nothing to CRI-O",
			files: map[string]string{
				"crio.conf.d/20-wrong.conf": crioValidator + "enable = true\nreject_oci_hook_adjustment = true\n",
			},
			hook: true,
		},
		{
			name:  "crioConfigDir none: the drop-ins are not read",
			files: map[string]string{"crio.conf": template, "crio.conf.d/20-hardening.conf": crioRejectHooks},
			noDir: true, hook: true,
		},
		{
			name:   "crioConfig none: the drop-ins still are",
			files:  map[string]string{"crio.conf": "not toml [", "crio.conf.d/20-hardening.conf": crioRejectHooks},
			noMain: true, hook: true, wantKey: CRIORejectHooks, wantFile: "crio.conf.d/20-hardening.conf",
		},
		{
			name:    "not a boolean",
			files:   map[string]string{"crio.conf.d/20-hardening.conf": crioValidator + "nri_validator_reject_oci_hook_adjustment = \"yes\"\n"},
			wantErr: []string{"crio.conf.d/20-hardening.conf", "[crio.nri.default_validator] nri_validator_reject_oci_hook_adjustment = yes is not a boolean"},
		},
		{
			name:    "not TOML",
			files:   map[string]string{"crio.conf": template, "crio.conf.d/README.md": "# Drop-ins for CRI-O\n\nSee [crio.conf.d(5)].\n"},
			wantErr: []string{"crio.conf.d/README.md"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, tc.files)
			file, dropIns := filepath.Join(dir, "crio.conf"), filepath.Join(dir, "crio.conf.d")
			if tc.noMain {
				file = ""
			}
			if tc.noDir {
				dropIns = ""
			}
			v, err := ReadCRIOValidator(file, dropIns)
			if len(tc.wantErr) > 0 {
				if !errors.Is(err, ErrValidatorRead) {
					t.Fatalf("ReadCRIOValidator: %v, want ErrValidatorRead", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not mention %q: %v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			key, got := v.Rejects(tc.hook, tc.ns)
			want := ""
			if tc.wantFile != "" {
				want = filepath.Join(dir, tc.wantFile)
			}
			if key != tc.wantKey || got != want {
				t.Errorf("Rejects(%v, %v) = %q, %q; want %q, %q (validator %+v)", tc.hook, tc.ns, key, got, tc.wantKey, want, v)
			}
			if v.Keys != CRIOValidatorKeys {
				t.Errorf("keys %+v, want CRI-O's", v.Keys)
			}
		})
	}
}

// A drop-in directory that can not be read is an error naming it.
func TestReadCRIOValidatorUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a directory without permissions")
	}
	dir := write(t, map[string]string{"crio.conf.d/20-hardening.conf": crioRejectHooks})
	locked := filepath.Join(dir, "crio.conf.d")
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(locked, 0o755) })
	if _, err := ReadCRIOValidator("", locked); !errors.Is(err, ErrValidatorRead) || !strings.Contains(err.Error(), locked) {
		t.Fatalf("ReadCRIOValidator: %v, want ErrValidatorRead naming %s", err, locked)
	}
}
