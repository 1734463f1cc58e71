package lsmprofile

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// decodeStrict decodes a seccomp profile as containerd does (into the
// runtime-spec struct), but refusing unknown keys: moby's archMap,
// includes and excludes, which containerd would silently drop, fail.
func decodeStrict(t *testing.T, data []byte) specs.LinuxSeccomp {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p specs.LinuxSeccomp
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if dec.More() {
		t.Fatal("data after the profile")
	}
	return p
}

// allowed reports whether p allows name: unconditionally (an allow rule
// without argument conditions), or only for some arguments.
func allowed(p specs.LinuxSeccomp, name string) (always, sometimes bool) {
	for _, r := range p.Syscalls {
		if r.Action != specs.ActAllow || !slices.Contains(r.Names, name) {
			continue
		}
		if len(r.Args) == 0 {
			always = true
		} else {
			sometimes = true
		}
	}
	return always, sometimes
}

// archGroups are the architecture-specific allow rules of containerd's
// DefaultProfile, which is all the two files may differ by besides their
// architectures (gen/main.go).
var archGroups = map[string][]string{
	"amd64": {"arch_prctl", "modify_ldt"},
	"arm64": {"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush", "set_tls"},
}

var archList = map[string][]specs.Arch{
	"amd64": {specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
	"arm64": {specs.ArchARM, specs.ArchAARCH64},
}

func TestSeccompProfiles(t *testing.T) {
	// Calls the engines need, and calls RuntimeDefault refuses even with
	// CAP_SYS_ADMIN that they do not need (docs/engine-profiles.md).
	calls := []struct {
		name  string
		allow bool
		why   string
	}{
		{"keyctl", true, "runc and crun join a session keyring"},
		{"pivot_root", true, "runc and crun switch roots"},
		{"mount", true, "CAP_SYS_ADMIN's group"},
		{"umount2", true, "CAP_SYS_ADMIN's group"},
		{"unshare", true, "CAP_SYS_ADMIN's group"},
		{"setns", true, "CAP_SYS_ADMIN's group"},
		{"clone", true, "CAP_SYS_ADMIN: clone with namespace flags"},
		{"clone3", true, "CAP_SYS_ADMIN: no ENOSYS rule"},
		{"fsopen", true, "CAP_SYS_ADMIN's group: the new mount API"},
		{"move_mount", true, "CAP_SYS_ADMIN's group: the new mount API"},
		{"bpf", true, "CAP_SYS_ADMIN's group: crun's device filter"},
		{"sethostname", true, "CAP_SYS_ADMIN's group"},
		{"chroot", true, "CAP_SYS_CHROOT, a default capability"},
		{"ptrace", true, "kernels 4.8 and later"},
		{"seccomp", true, "the nested containers' own filters"},
		{"add_key", false, "not used by runc or crun"},
		{"request_key", false, "not used by runc or crun"},
		{"io_uring_setup", false, "not in RuntimeDefault"},
		{"io_uring_enter", false, "not in RuntimeDefault"},
		{"kexec_load", false, "CAP_SYS_BOOT"},
		{"init_module", false, "CAP_SYS_MODULE"},
		{"finit_module", false, "CAP_SYS_MODULE"},
		{"reboot", false, "CAP_SYS_BOOT"},
		{"open_by_handle_at", false, "CAP_DAC_READ_SEARCH"},
		{"userfaultfd", false, "not in RuntimeDefault"},
		{"process_madvise", false, "CAP_SYS_PTRACE"},
		{"kcmp", false, "CAP_SYS_PTRACE"},
		{"acct", false, "CAP_SYS_PACCT"},
		{"settimeofday", false, "CAP_SYS_TIME"},
		{"iopl", false, "CAP_SYS_RAWIO"},
	}
	profiles := map[string]specs.LinuxSeccomp{}
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			data, err := Seccomp(arch)
			if err != nil {
				t.Fatal(err)
			}
			p := decodeStrict(t, data)
			profiles[arch] = p
			// The file is the generator's output: indented JSON of the
			// struct, nothing edited by hand.
			again, err := json.MarshalIndent(p, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(append(again, '\n'), data) {
				t.Error("engines-" + arch + ".json is not the generator's output (indented JSON of specs.LinuxSeccomp): run go generate ./internal/lsmprofile")
			}
			if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet != nil {
				t.Errorf("defaultAction %s errnoRet %v, want SCMP_ACT_ERRNO (EPERM)", p.DefaultAction, p.DefaultErrnoRet)
			}
			if !slices.Equal(p.Architectures, archList[arch]) {
				t.Errorf("architectures %q, want %q", p.Architectures, archList[arch])
			}
			if len(p.Flags) != 0 || p.ListenerPath != "" || p.ListenerMetadata != "" {
				t.Errorf("flags %q listenerPath %q listenerMetadata %q, want none", p.Flags, p.ListenerPath, p.ListenerMetadata)
			}
			if strings.Contains(string(data), string(specs.ActLog)) {
				t.Error("SCMP_ACT_LOG is left in the profile (the discovery run's action)")
			}
			for _, r := range p.Syscalls {
				if r.Action != specs.ActAllow && r.Action != specs.ActErrno {
					t.Errorf("rule %q: action %s, want only SCMP_ACT_ALLOW (and RuntimeDefault's SCMP_ACT_ERRNO)", r.Names, r.Action)
				}
			}
			last := p.Syscalls[len(p.Syscalls)-1]
			if !slices.Equal(last.Names, []string{"keyctl", "pivot_root"}) || last.Action != specs.ActAllow || len(last.Args) != 0 {
				t.Errorf("the last rule is %+v, want the engines' rule allowing keyctl and pivot_root", last)
			}
			for _, c := range calls {
				t.Run(c.name, func(t *testing.T) {
					always, sometimes := allowed(p, c.name)
					if c.allow && !always {
						t.Errorf("%s is not allowed (%s)", c.name, c.why)
					}
					if !c.allow && (always || sometimes) {
						t.Errorf("%s is allowed, want refused (%s)", c.name, c.why)
					}
				})
			}
			// socket is allowed for some domains only (no AF_ALG, no
			// AF_VSOCK), as in RuntimeDefault.
			if always, sometimes := allowed(p, "socket"); always || !sometimes {
				t.Errorf("socket allowed always %v, for some domains %v: want only for some", always, sometimes)
			}
			for other, group := range archGroups {
				always, _ := allowed(p, group[0])
				if (other == arch) != always {
					t.Errorf("%s's group (%s) allowed %v in the %s profile", other, group[0], always, arch)
				}
			}
		})
	}
	// The two differ only by their architectures and their architecture's
	// group of calls.
	strip := func(arch string) specs.LinuxSeccomp {
		p := profiles[arch]
		p.Architectures = nil
		p.Syscalls = slices.DeleteFunc(slices.Clone(p.Syscalls), func(r specs.LinuxSyscall) bool { return slices.Equal(r.Names, archGroups[arch]) })
		if len(p.Syscalls) != len(profiles[arch].Syscalls)-1 {
			t.Errorf("%s: the group %q is not exactly one rule", arch, archGroups[arch])
		}
		return p
	}
	if len(profiles) == 2 && !reflect.DeepEqual(strip("amd64"), strip("arm64")) {
		t.Error("engines-amd64.json and engines-arm64.json differ by more than their architectures and architecture group")
	}
}

func TestSeccompUnknownArch(t *testing.T) {
	if _, err := Seccomp("riscv64"); err == nil || !strings.Contains(err.Error(), `"riscv64"`) {
		t.Errorf("Seccomp(riscv64) = %v, want an error naming it", err)
	}
}

func TestAppArmorText(t *testing.T) {
	lines := func(b []byte) []string {
		var out []string
		for l := range strings.Lines(string(b)) {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				l, _, _ = strings.Cut(l, "  #") // trailing comments
				out = append(out, strings.TrimSpace(l))
			}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		hasABI3 bool
	}{{"abi 3.0", true}, {"no abi 3.0", false}} {
		t.Run(tc.name, func(t *testing.T) {
			text := AppArmor(tc.hasABI3)
			rules := lines(text)
			if got := slices.Contains(rules, "abi <abi/3.0>,"); got != tc.hasABI3 {
				t.Errorf("abi line present %v, want %v", got, tc.hasABI3)
			}
			if tc.hasABI3 && !bytes.HasPrefix(text, []byte(abiLine)) {
				t.Error("the abi line is not the first line")
			}
			if !tc.hasABI3 && (bytes.Contains(text, []byte("abi <")) || bytes.HasPrefix(text, []byte("\n"))) {
				t.Errorf("the abi line, or the blank line after it, is left:\n%s", text)
			}
			for _, want := range []string{
				"profile " + AppArmorName + " flags=(attach_disconnected,mediate_deleted) {",
				"mount,", "pivot_root,", "umount,", "network,", "capability,", "file,",
				"deny /proc/sys/[^kn]** w,", // /proc/sys/net writable
				"deny /proc/sys/kernel/{?,??,[^s][^h][^m]**} w,",
				"deny /sys/kernel/security/** rwklx,",
				"deny /sys/fs/cg[^r]*/** wklx,",
				"signal (send,receive) peer=" + AppArmorName + ",",
				"ptrace (trace,tracedby,read,readby) peer=" + AppArmorName + ",",
				"}",
			} {
				if !slices.Contains(rules, want) {
					t.Errorf("no rule %q", want)
				}
			}
			for _, rule := range rules {
				for _, bad := range []string{"deny mount", "#include", "include <", "@{"} {
					if strings.Contains(rule, bad) {
						t.Errorf("rule %q: the profile must have no %q", rule, bad)
					}
				}
			}
			if bytes.Contains(text, []byte("deny mount")) {
				t.Error("the profile denies mounts")
			}
		})
	}
	// Asking again gives the same text, and changing it changes no other.
	a := AppArmor(true)
	a[0] = 'X'
	if AppArmor(true)[0] != 'a' {
		t.Error("AppArmor returns the embedded text itself")
	}
}
