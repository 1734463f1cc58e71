package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	mainHead = "version = 3\n"
	enable   = "[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = true\n"
)

// write puts files (name -> content) in a new directory and returns it.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadContainerdValidator(t *testing.T) {
	for _, tc := range []struct {
		name      string
		files     map[string]string
		hook, ns  bool
		wantKey   string
		wantFile  string // relative to the directory
		wantErr   string
		noMainCfg bool
	}{
		{name: "no config file", noMainCfg: true, hook: true, ns: true},
		{name: "validator off", files: map[string]string{"config.toml": mainHead}, hook: true, ns: true},
		{
			name:  "enabled, rejects nothing",
			files: map[string]string{"config.toml": mainHead + enable}, hook: true, ns: true,
		},
		{
			name:    "rejects hooks in the main file",
			files:   map[string]string{"config.toml": mainHead + enable + "  reject_oci_hook_adjustment = true\n"},
			hook:    true,
			wantKey: ContainerdRejectHooks, wantFile: "config.toml",
		},
		{
			name:  "rejects hooks, no hook added",
			files: map[string]string{"config.toml": mainHead + enable + "  reject_oci_hook_adjustment = true\n"},
		},
		{
			name: "rejects hooks but not enabled",
			files: map[string]string{"config.toml": mainHead +
				"[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  reject_oci_hook_adjustment = true\n"},
			hook: true,
		},
		{
			name: "a glob import enables and rejects namespaces",
			files: map[string]string{
				"config.toml":      mainHead + "imports = [\"conf.d/*.toml\"]\n",
				"conf.d/a.toml":    mainHead + enable,
				"conf.d/b.toml":    mainHead + enable + "  reject_namespace_adjustment = true\n",
				"conf.d/other.txt": "not toml [",
			},
			ns:      true,
			wantKey: ContainerdRejectNamespaces, wantFile: "conf.d/b.toml",
		},
		{
			name: "a later import turns it off again",
			files: map[string]string{
				"config.toml":   mainHead + "imports = [\"/ABS/conf.d/z.toml\"]\n" + enable + "  reject_oci_hook_adjustment = true\n",
				"conf.d/z.toml": mainHead + enable + "  reject_oci_hook_adjustment = false\n",
			},
			hook: true,
		},
		{
			name: "an import cycle is read once",
			files: map[string]string{
				"config.toml": mainHead + "imports = [\"a.toml\"]\n",
				"a.toml":      mainHead + "imports = [\"config.toml\"]\n" + enable + "  reject_oci_hook_adjustment = true\n",
			},
			hook:    true,
			wantKey: ContainerdRejectHooks, wantFile: "a.toml",
		},
		{
			name:    "not a boolean",
			files:   map[string]string{"config.toml": mainHead + enable + "  reject_oci_hook_adjustment = \"yes\"\n"},
			wantErr: `reject_oci_hook_adjustment = yes is not a boolean`,
		},
		{
			name:    "not toml",
			files:   map[string]string{"config.toml": "version = \n"},
			wantErr: "config.toml",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, tc.files)
			for name, content := range tc.files {
				if strings.Contains(content, "/ABS/") {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.ReplaceAll(content, "/ABS", dir)), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			path := filepath.Join(dir, "config.toml")
			v, err := ReadContainerdValidator(path)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrValidatorRead) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Read: %v, want ErrValidatorRead mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			key, file := v.Rejects(tc.hook, tc.ns)
			wantFile := ""
			if tc.wantFile != "" {
				wantFile = filepath.Join(dir, tc.wantFile)
			}
			if key != tc.wantKey || file != wantFile {
				t.Errorf("Rejects(%v, %v) = %q, %q; want %q, %q (validator %+v)", tc.hook, tc.ns, key, file, tc.wantKey, wantFile, v)
			}
		})
	}
}
