package validatorcfg

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/config"
	"github.com/cgdelegate/cgdelegate/internal/writable"
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

func TestRead(t *testing.T) {
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
			wantKey: RejectHooks, wantFile: "config.toml",
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
			wantKey: RejectNamespaces, wantFile: "conf.d/b.toml",
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
			wantKey: RejectHooks, wantFile: "a.toml",
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
			v, err := Read(path)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrRead) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Read: %v, want ErrRead mentioning %q", err, tc.wantErr)
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

// The admission rule refuses a container that would get the hook or a
// cgroup namespace the validator rejects, naming the setting, the file and
// the fix; others pass.
func TestCheck(t *testing.T) {
	const hook = "/usr/local/bin/cgdelegate-hook"
	withHook := &api.Container{Hooks: &api.Hooks{CreateRuntime: []*api.Hook{{Path: hook}}}}
	withNS := &api.Container{Linux: &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{{Type: "cgroup"}}}}
	plain := &api.Container{}
	hooks := Validator{Keys: Containerd, Enable: Setting{true, "/etc/containerd/config.toml"}, RejectHooks: Setting{true, "/etc/containerd/conf.d/x.toml"}}
	nss := Validator{Keys: Containerd, Enable: Setting{true, "/c"}, RejectNamespaces: Setting{true, "/c"}}
	crioHooks := Validator{Keys: CRIO, Enable: Setting{true, "/etc/crio/crio.conf.d/10-cgdelegate.conf"}, RejectHooks: Setting{true, "/etc/crio/crio.conf.d/20-hardening.conf"}}
	crioNS := Validator{Keys: CRIO, Enable: Setting{true, "/etc/crio/crio.conf"}, RejectNamespaces: Setting{true, "/etc/crio/crio.conf"}}
	for _, tc := range []struct {
		name  string
		v     Validator
		ctr   *api.Container
		nilOK bool // Check returns no rule
		want  []string
	}{
		{name: "nothing rejected", v: Validator{Keys: Containerd, Enable: Setting{true, "/c"}}, nilOK: true},
		{name: "hooks rejected", v: hooks, ctr: plain, want: []string{
			"containerd's NRI default validator is set to refuse cgdelegate's adjustment: reject_oci_hook_adjustment = true under " +
				`[plugins."io.containerd.nri.v1.nri".default_validator] in /etc/containerd/conf.d/x.toml refuses the OCI hook`,
			"set reject_oci_hook_adjustment = false there and restart containerd",
		}},
		{name: "CRI-O: hooks rejected", v: crioHooks, ctr: plain, want: []string{
			"CRI-O's NRI default validator is set to refuse cgdelegate's adjustment: nri_validator_reject_oci_hook_adjustment = true under " +
				"[crio.nri.default_validator] in /etc/crio/crio.conf.d/20-hardening.conf refuses the OCI hook (cgdelegate-hook, createRuntime)",
			"set nri_validator_reject_oci_hook_adjustment = false there and restart CRI-O",
		}},
		{name: "CRI-O: hook already in the spec", v: crioHooks, ctr: withHook},
		{name: "CRI-O: namespaces rejected, no cgroupns", v: crioNS, ctr: plain, want: []string{
			"nri_validator_reject_namespace_adjustment = true under [crio.nri.default_validator] in /etc/crio/crio.conf refuses the cgroup namespace",
		}},
		{name: "CRI-O: namespaces rejected, has cgroupns", v: crioNS, ctr: withNS},
		{name: "hook already in the spec", v: hooks, ctr: withHook},
		{name: "namespaces rejected, no cgroupns", v: nss, ctr: plain, want: []string{"reject_namespace_adjustment = true", "cgroup namespace"}},
		{name: "namespaces rejected, has cgroupns", v: nss, ctr: withNS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := tc.v.Check(hook)
			if tc.nilOK {
				if check != nil {
					t.Fatal("a rule for a validator that rejects nothing")
				}
				return
			}
			err := check(&writable.Candidate{Input: writable.Input{Pod: &api.PodSandbox{}, Ctr: tc.ctr}})
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("err = %v, want ErrRejected", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q: %v", w, err)
				}
			}
		})
	}
}

// FromConfig reads the files of the runtime seen in Configure; "none"
// reads nothing, and neither does an unknown runtime.
func TestFromConfig(t *testing.T) {
	dir := write(t, map[string]string{
		"config.toml":                mainHead + enable + "  reject_oci_hook_adjustment = true\n",
		"crio.conf":                  "[crio.nri.default_validator]\nnri_enable_default_validator = true\n",
		"crio.conf.d/20-reject.conf": "[crio.nri.default_validator]\nnri_validator_reject_oci_hook_adjustment = true\n",
	})
	cfg := config.Default()
	cfg.ContainerdConfig = filepath.Join(dir, "config.toml")
	cfg.CRIOConfig, cfg.CRIOConfigDir = filepath.Join(dir, "crio.conf"), filepath.Join(dir, "crio.conf.d")
	noCRIODir := cfg
	noCRIODir.CRIOConfigDir = config.Disabled
	noContainerd := cfg
	noContainerd.ContainerdConfig = config.Disabled
	for _, tc := range []struct {
		name     string
		cfg      config.Config
		runtime  Runtime
		wantRule bool
	}{
		{"containerd", cfg, RuntimeContainerd, true},
		{"containerd, none", noContainerd, RuntimeContainerd, false},
		{"CRI-O", cfg, RuntimeCRIO, true},
		{"CRI-O, no drop-in directory", noCRIODir, RuntimeCRIO, false},
		{"unknown runtime", cfg, RuntimeUnknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check, err := FromConfig(tc.cfg, tc.runtime)
			if err != nil || (check != nil) != tc.wantRule {
				t.Fatalf("FromConfig = rule %v, %v; want rule %v", check != nil, err, tc.wantRule)
			}
		})
	}
}
