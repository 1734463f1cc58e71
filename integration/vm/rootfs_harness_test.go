package vm

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// debianSuite and debianSources are where every Debian root filesystem of
// the suite comes from: the archive the host's kernel package comes from.
const debianSuite = "bookworm"

var debianSources = []string{
	"deb http://deb.debian.org/debian bookworm main",
	"deb http://deb.debian.org/debian bookworm-updates main",
	"deb http://deb.debian.org/debian-security bookworm-security main",
}

// rootfsRecipe is the part of mmdebstrap's command line that shapes the
// root filesystem besides the package set; changing it changes every cache
// key. /usr is merged by mmdebstrap's own hook (usr-is-merged instead of
// usrmerge, which would pull in perl: 35 MB), Recommends are not
// installed, and documentation, manual pages, translations and info pages
// are never unpacked.
var rootfsRecipe = []string{
	"--variant=minbase",
	"--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
	`--aptopt=APT::Install-Recommends "false"`,
	"--dpkgopt=path-exclude=/usr/share/man/*",
	"--dpkgopt=path-exclude=/usr/share/doc/*",
	"--dpkgopt=path-exclude=/usr/share/locale/*",
	"--dpkgopt=path-exclude=/usr/share/info/*",
}

// rootfsSpec is one of the suite's Debian root filesystems.
type rootfsSpec struct {
	// Name names its cache entry (rootfsKey).
	Name string
	// Packages are installed besides mmdebstrap's minbase, with what they
	// depend on (never what they recommend).
	Packages []string
	// Exclude are dpkg path patterns never unpacked (dpkg's path-exclude,
	// beside rootfsRecipe's): files of the packages that no scenario runs.
	Exclude []string
}

// mmdebstrapArgs is mmdebstrap's command line for the root filesystem of
// spec, written as a tar to out. simulate only resolves the package set
// (apt-get --simulate, printed with --verbose).
func mmdebstrapArgs(spec rootfsSpec, out string, simulate bool) []string {
	args := slices.Clone(rootfsRecipe)
	for _, p := range spec.Exclude {
		args = append(args, "--dpkgopt=path-exclude="+p)
	}
	if simulate {
		args = append(args, "--simulate", "--verbose")
	}
	if len(spec.Packages) > 0 {
		args = append(args, "--include="+strings.Join(spec.Packages, ","))
	}
	args = append(args, debianSuite, out)
	return append(args, debianSources...)
}

// errNoPackages: a simulation that resolved nothing.
var errNoPackages = errors.New("no package resolved")

// resolvedPackages reads the "Inst <name> (<version> ...)" lines apt-get
// --simulate prints (mmdebstrap --simulate --verbose) and returns
// "<name>=<version>", sorted, each once.
func resolvedPackages(out string) ([]string, error) {
	var pkgs []string
	for _, l := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), "Inst ")
		if !ok {
			continue
		}
		name, rest, _ := strings.Cut(rest, " ")
		// A package that replaces an installed one reads
		// "Inst name [old] (new ...)".
		if strings.HasPrefix(rest, "[") {
			_, rest, _ = strings.Cut(rest, "] ")
		}
		version, ok := strings.CutPrefix(rest, "(")
		if !ok || name == "" {
			return nil, fmt.Errorf("apt simulation line %q: want \"Inst <name> (<version> ...)\"", l)
		}
		version, _, _ = strings.Cut(version, " ")
		pkgs = append(pkgs, name+"="+version)
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%w: no \"Inst\" line in the simulation", errNoPackages)
	}
	slices.Sort(pkgs)
	return slices.Compact(pkgs), nil
}

// rootfsKey names the cached root filesystem of a package set: the name,
// then a hash of the recipe, the requested packages and every resolved
// package version, so a new Debian point release or security update builds
// a new one. The resolution is apt's simulation, which runs no hooks (it
// still lists usrmerge and perl); what the tar really holds is listed from
// its dpkg status (installedPackages). The exclusions count only when
// there are some, so a spec without any keeps the key it had before they
// existed.
func rootfsKey(spec rootfsSpec, resolved []string) (string, error) {
	if !isCacheName(spec.Name) {
		return "", fmt.Errorf("root filesystem name %q: want letters, digits, '.', '_' or '-'", spec.Name)
	}
	h := sha256.New()
	parts := [][]string{rootfsRecipe, {debianSuite}, debianSources, spec.Packages, resolved}
	if len(spec.Exclude) > 0 {
		parts = append(parts, spec.Exclude)
	}
	for _, part := range parts {
		for _, s := range part {
			fmt.Fprintf(h, "%s\n", s)
		}
		fmt.Fprint(h, "--\n")
	}
	return spec.Name + "-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

func isCacheName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsFunc(s, func(r rune) bool {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '.', r == '_', r == '-':
			return false
		}
		return true
	})
}

// installedPackages reads a dpkg status file and returns "<name>=<version>"
// of every installed package, sorted.
func installedPackages(r io.Reader) ([]string, error) {
	var pkgs []string
	var name, version, status string
	flush := func() {
		if name != "" && status == "install ok installed" {
			pkgs = append(pkgs, name+"="+version)
		}
		name, version, status = "", "", ""
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "":
			flush()
		case strings.HasPrefix(l, "Package: "):
			name = strings.TrimPrefix(l, "Package: ")
		case strings.HasPrefix(l, "Version: "):
			version = strings.TrimPrefix(l, "Version: ")
		case strings.HasPrefix(l, "Status: "):
			status = strings.TrimPrefix(l, "Status: ")
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dpkg status: %w", err)
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%w: no installed package in the dpkg status", errNoPackages)
	}
	slices.Sort(pkgs)
	return pkgs, nil
}

// rootfsPackages lists the installed packages of a root filesystem tar
// from its var/lib/dpkg/status.
func rootfsPackages(tarPath string) ([]string, error) {
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, fmt.Errorf("root filesystem packages: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no var/lib/dpkg/status", tarPath)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", tarPath, err)
		}
		if cleanName(hdr.Name) == "var/lib/dpkg/status" && hdr.Typeflag == tar.TypeReg {
			pkgs, err := installedPackages(tr)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", tarPath, err)
			}
			return pkgs, nil
		}
	}
}
