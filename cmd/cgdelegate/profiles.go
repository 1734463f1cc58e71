package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cgdelegate/cgdelegate/internal/logging"
	"github.com/cgdelegate/cgdelegate/internal/lsmprofile"
)

const installProfilesUsage = `usage: cgdelegate install-profiles [-seccomp-dir DIR] [-apparmor [-host-root DIR]] [flags]

Installs the security profiles for pods that run container engines, nested
runtimes or systemd (docs/engine-profiles.md); running it again changes
nothing. The chart's install-profiles init container runs it
(engineProfiles.seccomp, engineProfiles.appArmor).

-seccomp-dir DIR writes the seccomp profile for this binary's architecture
to DIR/` + lsmprofile.SeccompFile + ` (atomically, mode 0644; DIR is created).
DIR is the kubelet's <root-dir>/seccomp/` + lsmprofile.SeccompDir + ` as this
process sees it (not under -host-root); pods name the profile
seccompProfile {type: Localhost, localhostProfile: ` + lsmprofile.SeccompName + `}.

-apparmor writes the AppArmor profile ` + lsmprofile.AppArmorName + ` to
<host-root>/etc/apparmor.d/` + lsmprofile.AppArmorName + ` and loads it with the
node's own parser: chroot <host-root> /sbin/apparmor_parser -r -W
/etc/apparmor.d/` + lsmprofile.AppArmorName + ` (or /usr/sbin/apparmor_parser;
no chroot when the host root is /). It needs CAP_MAC_ADMIN, CAP_SYS_CHROOT
for the chroot, and no AppArmor confinement. It fails, saying what is
missing, when AppArmor is not enabled under the host root
(/sys/module/apparmor/parameters/enabled is not Y, or securityfs is not
mounted) or the node has no apparmor_parser: it never skips.

Exits 0 when everything asked for is installed, 1 when anything failed
(each failure logged), 2 for a command line that can not run.

flags:
`

// defaultProfilesTimeout bounds the whole install by default: the parser
// compiles the profile in a second or two natively, ten times that in an
// emulated VM.
const defaultProfilesTimeout = 2 * time.Minute

// profilesFlags is the install-profiles command line.
type profilesFlags struct {
	seccompDir string
	appArmor   bool
	hostRoot   string
	timeout    time.Duration
	level      slog.Level
	format     logging.Format
}

// parseProfilesFlags parses `install-profiles`'s command line (args after
// "install-profiles"). Every error has been printed to stderr; flag.ErrHelp
// means -h.
func parseProfilesFlags(args []string, stderr io.Writer) (profilesFlags, error) {
	const prog = "cgdelegate install-profiles"
	fs := newFlagSet(prog, installProfilesUsage, stderr)
	f := profilesFlags{}
	var lf logFlags
	fs.StringVar(&f.seccompDir, "seccomp-dir", "", "write the seccomp profile to DIR/"+lsmprofile.SeccompFile+", DIR an absolute path (e.g. /var/lib/kubelet/seccomp/"+lsmprofile.SeccompDir+"); empty: no seccomp profile")
	fs.BoolVar(&f.appArmor, "apparmor", false, "write and load the AppArmor profile "+lsmprofile.AppArmorName+" on the node under -host-root")
	fs.StringVar(&f.hostRoot, "host-root", "/", "where the node's root filesystem is (e.g. /host in a pod), an absolute path; only with -apparmor")
	fs.DurationVar(&f.timeout, "timeout", defaultProfilesTimeout, "give up after this long, e.g. 30s or 2m")
	lf.register(fs)
	if err := fs.Parse(args); err != nil {
		return profilesFlags{}, err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var errs []error
	var err error
	switch {
	case f.seccompDir == "" && !f.appArmor:
		errs = append(errs, errors.New("nothing to install: give -seccomp-dir DIR, -apparmor, or both"))
	case f.seccompDir != "" && !filepath.IsAbs(f.seccompDir):
		errs = append(errs, fmt.Errorf("-seccomp-dir %q: want an absolute path", f.seccompDir))
	}
	switch {
	case !filepath.IsAbs(f.hostRoot):
		errs = append(errs, fmt.Errorf("-host-root %q: want an absolute path", f.hostRoot))
	case set["host-root"] && !f.appArmor:
		errs = append(errs, fmt.Errorf("-host-root %q: only -apparmor uses it (-seccomp-dir is a path as this process sees it)", f.hostRoot))
	}
	if f.timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout %q: must be more than 0", f.timeout))
	}
	f.level, f.format, err = lf.finish(fs, "install-profiles takes only flags", errs)
	if err != nil {
		logging.ErrorLine(stderr, prog, fmt.Errorf("%w (see cgdelegate install-profiles -h)", err))
		return profilesFlags{}, err
	}
	return f, nil
}

// runInstallProfiles is `cgdelegate install-profiles`: the seccomp profile
// for goarch and the AppArmor profile, as the flags ask, the parser run
// by run.
func runInstallProfiles(args []string, stderr io.Writer, goarch string, run lsmprofile.Runner) int {
	f, err := parseProfilesFlags(args, stderr)
	if err != nil {
		return usageExit(err)
	}
	log := logging.New(stderr, f.level, f.format)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	failed := false
	if f.seccompDir != "" {
		res, err := lsmprofile.InstallSeccomp(f.seccompDir, goarch)
		switch {
		case err != nil:
			failed = true
			log.Error("cannot install the seccomp profile", "seccompDir", f.seccompDir, "arch", goarch, "error", err)
		case res.Changed:
			log.Info("seccomp profile installed", "path", res.Path, "arch", goarch, "localhostProfile", lsmprofile.SeccompName)
		default:
			log.Info("seccomp profile already installed", "path", res.Path, "arch", goarch, "localhostProfile", lsmprofile.SeccompName)
		}
	}
	if f.appArmor {
		res, err := lsmprofile.InstallAppArmor(ctx, f.hostRoot, run)
		if res.Output != "" {
			log.Warn("apparmor_parser said", "command", res.Command.String(), "output", res.Output)
		}
		if err != nil {
			failed = true
			log.Error("cannot install the AppArmor profile", "hostRoot", f.hostRoot, "profile", lsmprofile.AppArmorName, "error", err)
		} else {
			log.Info("AppArmor profile loaded", "profile", lsmprofile.AppArmorName, "path", res.Path, "written", res.Changed,
				"abi3", res.ABI3, "command", res.Command.String())
		}
	}
	if failed {
		return 1
	}
	return 0
}
