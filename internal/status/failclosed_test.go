package status

import (
	"errors"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

func TestNewFailClosed(t *testing.T) {
	on := func(file string) config.ValidatorSetting { return config.ValidatorSetting{On: true, File: file} }
	tests := []struct {
		name    string
		runtime string
		v       config.Validator
		known   bool
		err     error
		want    string
		reason  []string
	}{
		{"before Configure", "", config.Validator{}, false, nil, FailClosedUnknown, []string{"no runtime has configured"}},
		{"another runtime", "kata", config.Validator{}, false, nil, FailClosedUnknown, []string{`"kata" is neither containerd nor CRI-O`}},
		{"unreadable", "containerd", config.Validator{}, false, errors.New("bad toml"), FailClosedUnknown, []string{"can not be read (bad toml)"}},
		{"files none", "containerd", config.Validator{}, false, nil, FailClosedUnknown, []string{"are none"}},
		{
			"containerd off by default", "containerd",
			config.Validator{Keys: config.ContainerdValidatorKeys},
			true, nil, FailClosedOff,
			[]string{"containerd's NRI default validator is off", "enable under", "is not set", RequiredPluginsAnnotation + " enforces nothing", "runtimeConfig.install"},
		},
		{
			"containerd off in a file", "containerd",
			config.Validator{Keys: config.ContainerdValidatorKeys, Enable: config.ValidatorSetting{File: "/etc/containerd/conf.d/site.toml"}},
			true, nil, FailClosedOff,
			[]string{"enable under [plugins.\"io.containerd.nri.v1.nri\".default_validator] = false in /etc/containerd/conf.d/site.toml"},
		},
		{
			"containerd on", "containerd",
			config.Validator{Keys: config.ContainerdValidatorKeys, Enable: on("/etc/containerd/conf.d/cgdelegate.toml")},
			true, nil, FailClosedEnforced,
			[]string{"enable = true under", "in /etc/containerd/conf.d/cgdelegate.toml", "refused while cgdelegate is not connected"},
		},
		{
			"cri-o on", "cri-o",
			config.Validator{Keys: config.CRIOValidatorKeys, Enable: on("/etc/crio/crio.conf.d/10-cgdelegate.conf")},
			true, nil, FailClosedEnforced,
			[]string{"CRI-O's NRI default validator is on (nri_enable_default_validator = true under [crio.nri.default_validator]"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFailClosed(tc.runtime, config.RuntimeOf(tc.runtime), tc.v, tc.known, tc.err)
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
