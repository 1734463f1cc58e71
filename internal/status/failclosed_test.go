package status

import (
	"errors"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

func TestNewFailClosed(t *testing.T) {
	on := func(file string) config.ValidatorSetting { return config.ValidatorSetting{On: true, File: file} }
	ctdOn := config.Validator{Keys: config.ContainerdValidatorKeys, Enable: on("/etc/containerd/conf.d/cgdelegate.toml")}
	crioOn := config.Validator{Keys: config.CRIOValidatorKeys, Enable: on("/etc/crio/crio.conf.d/10-cgdelegate.conf")}
	tests := []struct {
		name, runtime, version string
		v                      config.Validator
		known                  bool
		err                    error
		want                   string
		reason                 []string
	}{
		{"before Configure", "", "", config.Validator{}, false, nil, FailClosedUnknown, []string{"no runtime has configured"}},
		{"another runtime", "kata", "3.0", config.Validator{}, false, nil, FailClosedUnknown, []string{`"kata" is neither containerd nor CRI-O`}},
		{"unreadable", "containerd", "v2.4.2", config.Validator{}, false, errors.New("bad toml"), FailClosedUnknown, []string{"can not be read (bad toml)"}},
		{"files none", "containerd", "v2.4.2", config.Validator{}, false, nil, FailClosedUnknown, []string{"are none"}},
		{
			"containerd off by default", "containerd", "v2.4.2",
			config.Validator{Keys: config.ContainerdValidatorKeys},
			true, nil, FailClosedOff,
			[]string{"containerd's NRI default validator is off", "enable under", "is not set", RequiredPluginsAnnotation + " enforces nothing", "runtimeConfig.install"},
		},
		{
			"containerd off in a file", "containerd", "v2.4.2",
			config.Validator{Keys: config.ContainerdValidatorKeys, Enable: config.ValidatorSetting{File: "/etc/containerd/conf.d/site.toml"}},
			true, nil, FailClosedOff,
			[]string{"enable under [plugins.\"io.containerd.nri.v1.nri\".default_validator] = false in /etc/containerd/conf.d/site.toml"},
		},
		{
			"containerd on", "containerd", "v2.4.2", ctdOn, true, nil, FailClosedEnforced,
			[]string{"enable = true under", "in /etc/containerd/conf.d/cgdelegate.toml", "refused while cgdelegate is not connected"},
		},
		{"containerd 2.2 on", "containerd", "2.2.0", ctdOn, true, nil, FailClosedEnforced, []string{"enable = true under"}},
		{"containerd 10.0 on", "containerd", "v10.0.0-rc.1", ctdOn, true, nil, FailClosedEnforced, []string{"enable = true under"}},
		{"containerd with an unreadable version", "containerd", "main-abc", ctdOn, true, nil, FailClosedEnforced, []string{"enable = true under"}},
		{
			"containerd 2.1, the drop-in ignored", "containerd", "v2.1.4", ctdOn, true, nil, FailClosedOff,
			[]string{"containerd v2.1.4 has no NRI default validator (containerd 2.2 or later has it", "upgrade containerd"},
		},
		{
			"cri-o on", "cri-o", "1.34.1", crioOn, true, nil, FailClosedEnforced,
			[]string{"CRI-O's NRI default validator is on (nri_enable_default_validator = true under [crio.nri.default_validator]"},
		},
		{"cri-o 1.33, the drop-in ignored", "cri-o", "1.33.5", crioOn, true, nil, FailClosedOff, []string{"CRI-O 1.33.5 has no NRI default validator (CRI-O 1.34 or later"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFailClosed(tc.runtime, tc.version, config.RuntimeOf(tc.runtime), tc.v, tc.known, tc.err)
			if f.State != tc.want || f.Enforced() != (tc.want == FailClosedEnforced) {
				t.Errorf("state %q (enforced %t), want %q", f.State, f.Enforced(), tc.want)
			}
			for _, w := range tc.reason {
				if !strings.Contains(f.Reason, w) {
					t.Errorf("reason %q lacks %q", f.Reason, w)
				}
			}
			if w := FailClosedWarning(f); (w == "") != f.Enforced() {
				t.Errorf("warning %q for %s", w, f.State)
			}
		})
	}
}

// The readiness line says whether the node fails closed, and why not when
// it does not; Ready itself does not depend on it.
func TestReadyLine(t *testing.T) {
	rt := &Runtime{Name: "containerd", Version: "v2.4.2"}
	for _, tc := range []struct {
		fc   *FailClosed
		want string
	}{
		{nil, "ready: configured by containerd v2.4.2; supportsCgroupOptions true; fail-closed not reported"},
		{&FailClosed{State: FailClosedEnforced, Reason: "on"}, "ready: configured by containerd v2.4.2; supportsCgroupOptions true; fail-closed enforced"},
		{&FailClosed{State: FailClosedOff, Reason: "off, install the drop-in"}, "ready: configured by containerd v2.4.2; supportsCgroupOptions true; fail-closed off (off, install the drop-in)"},
	} {
		pub := Report{Supported: true, Runtime: rt, FailClosed: tc.fc, Host: Report{}.Host}
		pub.Host.CgroupRoot = "/sys/fs/cgroup"
		if got := ReadyLine(pub); got != tc.want {
			t.Errorf("ReadyLine = %q, want %q", got, tc.want)
		}
		if err := Ready(pub, nil); err != nil {
			t.Errorf("Ready with failClosed %+v: %v, want ready", tc.fc, err)
		}
	}
}
