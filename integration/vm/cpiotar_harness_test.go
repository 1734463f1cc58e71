package vm

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Tar adds every entry of the tar archive at src (a root filesystem such as
// mmdebstrap writes) with its mode and owner. Like every other entry, a path
// already written wins: write overrides first. Hard links become copies
// (the initramfs is unpacked into a tmpfs, where that costs only memory);
// FIFOs, sockets and block devices are skipped, the kernel would not need
// them and the guest's devtmpfs provides devices. Entries for which skip
// returns true are left out.
func (c *cpioWriter) Tar(src string, skip func(name string) bool) {
	if c.err != nil {
		return
	}
	// Pass one: which regular files are the target of a hard link, so pass
	// two keeps their content for the links that follow them.
	targets, err := tarLinkTargets(src)
	if err != nil {
		c.err = err
		return
	}
	f, err := os.Open(src)
	if err != nil {
		c.err = fmt.Errorf("cpio: %w", err)
		return
	}
	defer f.Close()
	kept := map[string][]byte{}
	tr := tar.NewReader(f)
	for c.err == nil {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			c.err = fmt.Errorf("cpio: read %s: %w", src, err)
			return
		}
		name := cleanName(hdr.Name)
		if name == "" || (skip != nil && skip(name)) {
			continue
		}
		perm := uint32(hdr.Mode) & 0o7777
		uid, gid := uint32(hdr.Uid), uint32(hdr.Gid)
		switch hdr.Typeflag {
		case tar.TypeDir:
			c.parents(name)
			if c.claim(name) {
				c.headerOwned(name, cpioModeDir|perm, uid, gid, 0, 0, 0)
			}
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err != nil {
				c.err = fmt.Errorf("cpio: read %s from %s: %w", name, src, err)
				return
			}
			if targets[name] {
				kept[name] = data
			}
			c.owned(name, cpioModeReg|perm, uid, gid, data)
		case tar.TypeLink:
			target := cleanName(hdr.Linkname)
			data, ok := kept[target]
			if !ok {
				c.err = fmt.Errorf("cpio: %s: hard link %s to %s, which the archive does not hold before it", src, name, target)
				return
			}
			c.owned(name, cpioModeReg|perm, uid, gid, data)
		case tar.TypeSymlink:
			c.parents(name)
			if c.claim(name) {
				c.headerOwned(name, cpioModeLink|0o777, uid, gid, int64(len(hdr.Linkname)), 0, 0)
				if c.err == nil {
					_, c.err = c.w.WriteString(hdr.Linkname)
				}
				c.pad(int64(len(hdr.Linkname)))
			}
		case tar.TypeChar:
			c.parents(name)
			if c.claim(name) {
				c.headerOwned(name, cpioModeChr|perm, uid, gid, 0, uint32(hdr.Devmajor), uint32(hdr.Devminor))
			}
		}
	}
}

// owned adds a regular file with an owner.
func (c *cpioWriter) owned(name string, mode, uid, gid uint32, data []byte) {
	c.parents(name)
	if !c.claim(name) {
		return
	}
	c.headerOwned(name, mode, uid, gid, int64(len(data)), 0, 0)
	if c.err == nil {
		_, c.err = c.w.Write(data)
	}
	c.pad(int64(len(data)))
}

// tarLinkTargets returns the names hard links in the archive point to.
func tarLinkTargets(src string) (map[string]bool, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, fmt.Errorf("cpio: %w", err)
	}
	defer f.Close()
	targets := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return targets, nil
		}
		if err != nil {
			return nil, fmt.Errorf("cpio: read %s: %w", src, err)
		}
		if hdr.Typeflag == tar.TypeLink {
			targets[cleanName(hdr.Linkname)] = true
		}
	}
}

// isUnder reports whether name is dir or below it (both clean, relative).
func isUnder(name, dir string) bool {
	return name == dir || strings.HasPrefix(name, dir+"/")
}
