package writable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// writeFiles puts files (name -> content) in a new directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
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

// The admission rule refuses a container that would get the hook or a
// cgroup namespace the validator rejects, naming the setting, the file and
// the fix; others pass.
func TestValidatorCheck(t *testing.T) {
	const hook = "/usr/local/bin/cgdelegate-hook"
	withHook := &api.Container{Hooks: &api.Hooks{CreateRuntime: []*api.Hook{{Path: hook}}}}
	withNS := &api.Container{Linux: &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{{Type: "cgroup"}}}}
	plain := &api.Container{}
	hooks := config.Validator{Keys: config.ContainerdValidatorKeys, Enable: config.ValidatorSetting{On: true, File: "/etc/containerd/config.toml"}, RejectHooks: config.ValidatorSetting{On: true, File: "/etc/containerd/conf.d/x.toml"}}
	nss := config.Validator{Keys: config.ContainerdValidatorKeys, Enable: config.ValidatorSetting{On: true, File: "/c"}, RejectNamespaces: config.ValidatorSetting{On: true, File: "/c"}}
	crioHooks := config.Validator{Keys: config.CRIOValidatorKeys, Enable: config.ValidatorSetting{On: true, File: "/etc/crio/crio.conf.d/10-cgdelegate.conf"}, RejectHooks: config.ValidatorSetting{On: true, File: "/etc/crio/crio.conf.d/20-hardening.conf"}}
	crioNS := config.Validator{Keys: config.CRIOValidatorKeys, Enable: config.ValidatorSetting{On: true, File: "/etc/crio/crio.conf"}, RejectNamespaces: config.ValidatorSetting{On: true, File: "/etc/crio/crio.conf"}}
	for _, tc := range []struct {
		name  string
		v     config.Validator
		ctr   *api.Container
		nilOK bool // Check returns no rule
		want  []string
	}{
		{name: "nothing rejected", v: config.Validator{Keys: config.ContainerdValidatorKeys, Enable: config.ValidatorSetting{On: true, File: "/c"}}, nilOK: true},
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
			check := ValidatorCheck(tc.v, hook)
			if tc.nilOK {
				if check != nil {
					t.Fatal("a rule for a validator that rejects nothing")
				}
				return
			}
			err := check(&Candidate{Input: Input{Pod: &api.PodSandbox{}, Ctr: tc.ctr}})
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrValidatorRejects) {
				t.Fatalf("err = %v, want ErrValidatorRejects", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q: %v", w, err)
				}
			}
		})
	}
}

// ValidatorRule reads the files of the runtime seen in Configure; "none"
// reads nothing, and neither does an unknown runtime.
func TestValidatorRule(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"config.toml":                "version = 3\n[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = true\n" + "  reject_oci_hook_adjustment = true\n",
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
		runtime  config.Runtime
		wantRule bool
	}{
		{"containerd", cfg, config.RuntimeContainerd, true},
		{"containerd, none", noContainerd, config.RuntimeContainerd, false},
		{"CRI-O", cfg, config.RuntimeCRIO, true},
		{"CRI-O, no drop-in directory", noCRIODir, config.RuntimeCRIO, false},
		{"unknown runtime", cfg, config.RuntimeUnknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check, err := ValidatorRule(tc.cfg, tc.runtime)
			if err != nil || (check != nil) != tc.wantRule {
				t.Fatalf("ValidatorRule = rule %v, %v; want rule %v", check != nil, err, tc.wantRule)
			}
		})
	}
}
