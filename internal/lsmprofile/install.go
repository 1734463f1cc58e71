package lsmprofile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cgdelegate/cgdelegate/internal/host"
)

// Errors of InstallAppArmor, each wrapped as "%w: detail" with the path or
// the parser's output.
var (
	// ErrAppArmorDisabled: the node's kernel has no AppArmor, it is
	// switched off, or securityfs is not mounted.
	ErrAppArmorDisabled = errors.New("AppArmor is not enabled on the node")
	// ErrNoParser: the node has no apparmor_parser in /sbin or /usr/sbin.
	ErrNoParser = errors.New("no apparmor_parser on the node")
	// ErrParser: the node's apparmor_parser refused the profile or could
	// not load it.
	ErrParser = errors.New("apparmor_parser failed")
	// ErrNotLoaded: the parser succeeded but the kernel does not list the
	// profile in enforce mode.
	ErrNotLoaded = errors.New("the AppArmor profile is not loaded in enforce mode")
)

// Paths under the host root, as the node sees them.
const (
	// appArmorEnabled reads Y when the kernel's AppArmor is on.
	appArmorEnabled = "/sys/module/apparmor/parameters/enabled"
	// appArmorFS is AppArmor's directory in securityfs.
	appArmorFS = "/sys/kernel/security/apparmor"
	// loadedProfiles lists the loaded profiles, "name (mode)" per line.
	loadedProfiles = appArmorFS + "/profiles"
	// profileDir is where the node keeps its AppArmor profiles, loaded at
	// boot by apparmor.service.
	profileDir = "/etc/apparmor.d"
	// abi3 exists when the node's parser knows policy ABI 3.0.
	abi3 = profileDir + "/abi/3.0"
	// parserName is the AppArmor parser, looked for in parserDirs.
	parserName = "apparmor_parser"
)

// parserDirs are where a node keeps apparmor_parser: /sbin first, the path
// containerd checks.
var parserDirs = []string{"/sbin", "/usr/sbin"}

// Command is a program to run, as the runner gets it.
type Command struct {
	// Chroot is the directory to chroot into before running Path; "" runs
	// in the caller's root.
	Chroot string
	// Path is the program's absolute path, inside Chroot.
	Path string
	// Args are its arguments, without the program's name.
	Args []string
}

// String is the command as a shell would read it, with its chroot.
func (c Command) String() string {
	s := strings.Join(append([]string{c.Path}, c.Args...), " ")
	if c.Chroot != "" {
		s = "chroot " + c.Chroot + " " + s
	}
	return s
}

// Runner runs a command and returns its output (standard output and
// standard error together). Exec is the real one; tests fake it.
type Runner func(ctx context.Context, c Command) ([]byte, error)

// Exec runs c with os/exec: chrooted into c.Chroot (which needs
// CAP_SYS_CHROOT), in its /, with a fixed PATH. Path is not looked up in
// the caller's root: the child resolves it after its chroot.
func Exec(ctx context.Context, c Command) ([]byte, error) {
	if !filepath.IsAbs(c.Path) {
		return nil, fmt.Errorf("run %q: want an absolute path", c.Path)
	}
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	if c.Chroot != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: c.Chroot}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// SeccompResult is what InstallSeccomp did.
type SeccompResult struct {
	// Path is the profile's file.
	Path string
	// Changed is false when the file already held the profile with mode
	// 0644, and was left alone.
	Changed bool
}

// InstallSeccomp writes the seccomp profile for goarch to dir/engines.json
// (dir is normally the kubelet's <root-dir>/seccomp/cgdelegate),
// atomically (a temp file renamed over it) with mode 0644, creating dir if
// needed. A file that already holds it is left alone.
func InstallSeccomp(dir, goarch string) (SeccompResult, error) {
	data, err := Seccomp(goarch)
	if err != nil {
		return SeccompResult{}, err
	}
	path := filepath.Join(dir, SeccompFile)
	changed, err := writeIfChanged(path, data)
	return SeccompResult{Path: path, Changed: changed}, err
}

// AppArmorResult is what InstallAppArmor did.
type AppArmorResult struct {
	// Path is the profile's file under the host root.
	Path string
	// Changed is false when the file already held the profile.
	Changed bool
	// ABI3 says whether the profile kept its abi <abi/3.0> line.
	ABI3 bool
	// Command is the parser run that loaded it.
	Command Command
	// Output is what the parser printed (warnings).
	Output string
}

// InstallAppArmor writes the AppArmor profile to
// <hostRoot>/etc/apparmor.d/cgdelegate-engines (atomically, mode 0644; the
// node's apparmor.service loads it at boot) and loads it into the kernel
// with the node's own parser, `apparmor_parser -r -W` (replace, and write
// the node's cache when it can), run through chroot hostRoot unless
// hostRoot is /. Then it checks that the kernel lists the profile in
// enforce mode. The profile keeps its abi line only where the node has
// /etc/apparmor.d/abi/3.0.
//
// It fails, before writing anything, when hostRoot is no directory, when
// AppArmor is not enabled under hostRoot (ErrAppArmorDisabled:
// /sys/module/apparmor/parameters/enabled missing or not Y, or no
// /sys/kernel/security/apparmor) or when the node has no apparmor_parser
// in /sbin or /usr/sbin (ErrNoParser): it never skips. After writing, it
// fails with ErrParser or ErrNotLoaded. Running it again does the same: the file is
// left alone when it holds the profile, and the parser replaces the
// loaded profile with itself.
func InstallAppArmor(ctx context.Context, hostRoot string, run Runner) (AppArmorResult, error) {
	var res AppArmorResult
	if st, err := os.Stat(hostRoot); err != nil {
		return res, fmt.Errorf("host root: %w", err)
	} else if !st.IsDir() {
		return res, fmt.Errorf("host root %s: not a directory", hostRoot)
	}
	at := func(p string) string { return filepath.Join(hostRoot, p) }
	if err := checkEnabled(at(appArmorEnabled), at(appArmorFS)); err != nil {
		return res, err
	}
	parser, err := findParser(hostRoot)
	if err != nil {
		return res, err
	}
	switch _, err := os.Stat(at(abi3)); {
	case err == nil:
		res.ABI3 = true
	case !errors.Is(err, fs.ErrNotExist):
		return res, fmt.Errorf("stat %s: %w", at(abi3), err)
	}
	file := filepath.Join(profileDir, AppArmorName)
	res.Path = at(file)
	if res.Changed, err = writeIfChanged(res.Path, AppArmor(res.ABI3)); err != nil {
		return res, err
	}
	res.Command = parserCommand(hostRoot, parser, file)
	out, err := run(ctx, res.Command)
	res.Output = strings.TrimSpace(string(out))
	if err != nil {
		return res, fmt.Errorf("%w: %s: %w: %s", ErrParser, res.Command, err, oneLine(res.Output))
	}
	return res, checkLoaded(at(loadedProfiles))
}

// parserCommand is the parser run that loads file (a path on the node):
// replace the profile, write the node's cache when it can (it skips that
// silently on a read-only cache), chrooted into hostRoot unless that is /.
func parserCommand(hostRoot, parser, file string) Command {
	c := Command{Path: parser, Args: []string{"-r", "-W", file}}
	if filepath.Clean(hostRoot) != "/" {
		c.Chroot = hostRoot
	}
	return c
}

// checkEnabled fails with ErrAppArmorDisabled unless the kernel's AppArmor
// is on (enabled reads Y) and securityfs shows it (fsDir exists).
func checkEnabled(enabled, fsDir string) error {
	b, err := os.ReadFile(enabled)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s does not exist: the kernel has no AppArmor (or it was built without it)", ErrAppArmorDisabled, enabled)
	case err != nil:
		return fmt.Errorf("%w: read %s: %w", ErrAppArmorDisabled, enabled, err)
	case !strings.HasPrefix(string(b), "Y"):
		return fmt.Errorf("%w: %s reads %q, want Y (the kernel was booted with apparmor=0 or another major LSM)", ErrAppArmorDisabled, enabled, strings.TrimSpace(string(b)))
	}
	if _, err := os.Stat(fsDir); err != nil {
		return fmt.Errorf("%w: %s: %w (securityfs is not mounted at /sys/kernel/security)", ErrAppArmorDisabled, fsDir, err)
	}
	return nil
}

// findParser returns the path of the node's apparmor_parser as the node
// sees it: the first of parserDirs that has it under hostRoot.
func findParser(hostRoot string) (string, error) {
	var tried []string
	for _, dir := range parserDirs {
		p := filepath.Join(dir, parserName)
		onHost := filepath.Join(hostRoot, p)
		tried = append(tried, onHost)
		st, err := os.Stat(onHost)
		if err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: stat %s: %w", ErrNoParser, onHost, err)
		}
	}
	return "", fmt.Errorf("%w: no executable %s: install the node's AppArmor tools (Debian and Ubuntu: the apparmor package)", ErrNoParser, strings.Join(tried, " or "))
}

// checkLoaded fails with ErrNotLoaded unless the kernel's profile list
// (profiles) has AppArmorName in enforce mode.
func checkLoaded(profiles string) error {
	f, err := os.Open(profiles)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotLoaded, err)
	}
	defer f.Close()
	mode, err := profileMode(f, AppArmorName)
	switch {
	case err != nil:
		return fmt.Errorf("%w: read %s: %w", ErrNotLoaded, profiles, err)
	case mode == "":
		return fmt.Errorf("%w: %s does not list %s", ErrNotLoaded, profiles, AppArmorName)
	case mode != "enforce":
		return fmt.Errorf("%w: %s lists %s (%s)", ErrNotLoaded, profiles, AppArmorName, mode)
	}
	return nil
}

// profileMode returns the mode of profile name in the kernel's profile
// list ("name (mode)" per line), or "" when it is not listed.
func profileMode(r io.Reader, name string) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		n, mode, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if ok && n == name {
			return strings.Trim(mode, "()"), nil
		}
	}
	return "", sc.Err()
}

// writeIfChanged writes data to path atomically with mode 0644, unless the
// file already holds data with that mode; it reports whether it wrote.
func writeIfChanged(path string, data []byte) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() == 0o644 {
			return false, nil
		}
	}
	if err := host.WriteFileAtomic(path, data, 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// oneLine joins the lines of s with "; ", for an error message.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ; ")), " ")
}
