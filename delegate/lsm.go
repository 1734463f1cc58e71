package delegate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Confinement is how the Linux security modules confine this process, as
// /proc/self says.
type Confinement struct {
	// AppArmor is the AppArmor profile, e.g. cri-containerd.apparmor.d or
	// unconfined; "" when the kernel has no AppArmor on (or the label is
	// another module's).
	AppArmor string
	// AppArmorMode is the profile's mode: enforce, complain, ... ("" for
	// unconfined).
	AppArmorMode string
	// Label is the raw label read, when it is not AppArmor's (SELinux's,
	// from /proc/self/attr/current on kernels without the per-module
	// directory).
	Label string
	// Seccomp is the seccomp mode: 0 disabled, 1 strict, 2 filter; -1
	// unknown.
	Seccomp int
	// SysAdmin is whether CAP_SYS_ADMIN is in the effective set.
	SysAdmin bool
}

// runtimeDefaultProfiles are the AppArmor profiles runtimes apply by
// default, which deny every mount: containerd's CRI plugin's and Docker's.
var runtimeDefaultProfiles = []string{"cri-containerd.apparmor.d", "docker-default"}

// engineProfile is the AppArmor profile that allows mounts (the
// cgdelegate chart installs it, engineProfiles.appArmor).
const engineProfile = "cgdelegate-engines"

// capSysAdmin is CAP_SYS_ADMIN's bit in /proc/<pid>/status's CapEff.
const capSysAdmin = 21

// MountsDenied says whether the AppArmor profile denies every mount while
// the process holds CAP_SYS_ADMIN (so it would try them): a runtime's
// default profile. A nested runtime or systemd then fails with EACCES
// ("permission denied") on its first mount.
func (c Confinement) MountsDenied() bool {
	if !c.SysAdmin || c.AppArmorMode != "enforce" {
		return false
	}
	for _, p := range runtimeDefaultProfiles {
		if c.AppArmor == p {
			return true
		}
	}
	return false
}

// MountsDeniedHint is what to do when MountsDenied.
func (c Confinement) MountsDeniedHint() string {
	return fmt.Sprintf("mounts are denied by AppArmor profile %s: nested runtimes and systemd need appArmorProfile {type: Localhost, localhostProfile: %s} (docs/engine-profiles.md)", c.AppArmor, engineProfile)
}

// Confinement reads this process's AppArmor label and seccomp mode under
// the root's /proc: attr/apparmor/current (kernel 5.1+), else attr/current,
// and status.
func (r *Root) Confinement() (Confinement, error) {
	c := Confinement{Seccomp: -1}
	self := filepath.Join(r.proc, "self")
	if label, fromLSMDir := readLabel(self); label != "" {
		name, mode, ok := parseAppArmorLabel(label)
		switch {
		case ok:
			c.AppArmor, c.AppArmorMode = name, mode
		case fromLSMDir:
			// attr/apparmor/current holds only AppArmor labels.
			c.AppArmor = label
		default:
			c.Label = label
		}
	}
	path := filepath.Join(self, "status")
	f, err := os.Open(path)
	if err != nil {
		return c, fmt.Errorf("read the seccomp mode: %w", err)
	}
	defer f.Close()
	seccomp, capEff, err := parseStatus(f)
	if err != nil {
		return c, fmt.Errorf("parse %s: %w", path, err)
	}
	c.Seccomp, c.SysAdmin = seccomp, capEff&(1<<capSysAdmin) != 0
	return c, nil
}

// readLabel reads the process's AppArmor label: from attr/apparmor/current
// (fromLSMDir), or, on kernels without that directory, attr/current (whose
// label may be another module's). It is "" where no module gives one: the
// file is missing, or reading it fails with EINVAL (AppArmor built in but
// off).
func readLabel(self string) (label string, fromLSMDir bool) {
	b, err := os.ReadFile(filepath.Join(self, "attr", "apparmor", "current"))
	if err == nil {
		return strings.TrimRight(string(b), "\x00\n"), true
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", true
	}
	if b, err = os.ReadFile(filepath.Join(self, "attr", "current")); err == nil {
		return strings.TrimRight(string(b), "\x00\n"), false
	}
	return "", false
}

// parseAppArmorLabel splits an AppArmor label, "name (mode)" or
// "unconfined", into its profile name and mode. ok is false for a label
// that is not AppArmor's (an SELinux context).
func parseAppArmorLabel(label string) (name, mode string, ok bool) {
	label = strings.TrimSpace(label)
	if label == "unconfined" {
		return label, "", true
	}
	name, rest, found := strings.Cut(label, " ")
	if !found || name == "" || !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
		return "", "", false
	}
	return name, strings.TrimSuffix(strings.TrimPrefix(rest, "("), ")"), true
}

// parseStatus reads the Seccomp mode and the CapEff mask from
// /proc/<pid>/status. A kernel without seccomp has no Seccomp line: -1.
func parseStatus(r io.Reader) (seccomp int, capEff uint64, err error) {
	seccomp = -1
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch key {
		case "Seccomp":
			if seccomp, err = strconv.Atoi(value); err != nil {
				return -1, 0, fmt.Errorf("field Seccomp %q: %w", value, err)
			}
		case "CapEff":
			if capEff, err = strconv.ParseUint(value, 16, 64); err != nil {
				return seccomp, 0, fmt.Errorf("field CapEff %q: %w", value, err)
			}
		}
	}
	return seccomp, capEff, sc.Err()
}

// seccompModes names the Seccomp modes of /proc/<pid>/status.
var seccompModes = map[int]string{-1: "unknown", 0: "disabled", 1: "strict", 2: "filter"}

// String describes the confinement in one line.
func (c Confinement) String() string {
	aa := "AppArmor: off"
	switch {
	case c.AppArmor != "" && c.AppArmorMode != "":
		aa = fmt.Sprintf("AppArmor: %s (%s)", c.AppArmor, c.AppArmorMode)
	case c.AppArmor != "":
		aa = "AppArmor: " + c.AppArmor
	case c.Label != "":
		aa = fmt.Sprintf("AppArmor: off (security label %s)", c.Label)
	}
	sec, ok := seccompModes[c.Seccomp]
	if !ok {
		sec = strconv.Itoa(c.Seccomp)
	}
	return aa + "; seccomp: " + sec
}
