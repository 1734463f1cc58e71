//go:build integration_vm

package vm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// debianRootfs returns the path of a tar holding a Debian bookworm root
// filesystem: mmdebstrap's minbase variant plus packages (and what they
// depend on, never what they recommend), from the Debian archive, with no
// documentation, manual pages or translations. It is cached under
// rootfs/<name>-<hash> by the resolved version of every package (see
// rootfsKey), next to packages.txt listing what it holds; resolving asks the
// archive (mmdebstrap --simulate, about 15 s). Offline, the newest cached
// root filesystem of that name is used.
//
// The tar is what mmdebstrap writes: entries named ./path, owners and
// modes as installed. cpioWriter.Tar packs it into an initramfs; an OCI
// image can take it as its layer.
func (b *builder) debianRootfs(ctx context.Context, spec rootfsSpec) (string, error) {
	name := spec.Name
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", fmt.Errorf("root filesystem %s needs mmdebstrap (run integration/vm/install-deps.sh): %w", name, err)
	}
	resolved, err := b.resolveRootfs(ctx, spec)
	if err != nil {
		pattern := filepath.Join(b.cacheDir, "rootfs", name+"-"+strings.Repeat("?", 16), ".complete")
		if matches, _ := filepath.Glob(pattern); len(matches) > 0 {
			d := filepath.Dir(matches[len(matches)-1])
			b.log.Warn("cannot resolve the root filesystem's packages, using a cached one", "err", err, "dir", d)
			return filepath.Join(d, "rootfs.tar"), nil
		}
		return "", fmt.Errorf("root filesystem %s: %w", name, err)
	}
	key, err := rootfsKey(spec, resolved)
	if err != nil {
		return "", err
	}
	dir, err := b.cached("rootfs/"+key, func(tmp string) error {
		out := filepath.Join(tmp, "rootfs.tar")
		if _, err := b.run(ctx, tmp, nil, "mmdebstrap", mmdebstrapArgs(spec, out, false)...); err != nil {
			return err
		}
		installed, err := rootfsPackages(out)
		if err != nil {
			return err
		}
		list := strings.Join(installed, "\n") + "\n"
		if err := os.WriteFile(filepath.Join(tmp, "packages.txt"), []byte(list), 0o644); err != nil {
			return fmt.Errorf("root filesystem %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "rootfs.tar"), nil
}

// resolveRootfs asks the archive which package versions the root
// filesystem would hold.
func (b *builder) resolveRootfs(ctx context.Context, spec rootfsSpec) ([]string, error) {
	tmp, err := os.MkdirTemp(b.workDir, "rootfs-resolve-")
	if err != nil {
		return nil, fmt.Errorf("resolve root filesystem: %w", err)
	}
	defer os.RemoveAll(tmp)
	out, err := b.run(ctx, tmp, nil, "mmdebstrap", mmdebstrapArgs(spec, filepath.Join(tmp, "rootfs.tar"), true)...)
	if err != nil {
		return nil, err
	}
	return resolvedPackages(string(out))
}
