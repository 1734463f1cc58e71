package vm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// cpioWriter writes a newc ("070701") cpio archive, the format the kernel
// unpacks as an initramfs. It creates missing parent directories and keeps
// the first entry written for a path. It needs no privileges: device nodes
// are only headers.
type cpioWriter struct {
	w    *bufio.Writer
	ino  uint32
	seen map[string]bool
	err  error
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriterSize(w, 1<<20), ino: 300000, seen: map[string]bool{}}
}

const (
	cpioModeDir  = 0o040000
	cpioModeReg  = 0o100000
	cpioModeLink = 0o120000
	cpioModeChr  = 0o020000
)

func cleanName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func (c *cpioWriter) header(name string, mode uint32, size int64, rdevMajor, rdevMinor uint32) {
	c.headerOwned(name, mode, 0, 0, size, rdevMajor, rdevMinor)
}

// headerOwned writes one entry header owned by uid:gid.
func (c *cpioWriter) headerOwned(name string, mode, uid, gid uint32, size int64, rdevMajor, rdevMinor uint32) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := uint32(1)
	if mode&0o170000 == cpioModeDir {
		nlink = 2
	}
	fields := []uint32{c.ino, mode, uid, gid, nlink, 0, uint32(size), 0, 0, rdevMajor, rdevMinor, uint32(len(name) + 1), 0}
	var b strings.Builder
	b.WriteString("070701")
	for _, f := range fields {
		fmt.Fprintf(&b, "%08x", f)
	}
	b.WriteString(name)
	b.WriteByte(0)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	_, c.err = c.w.WriteString(b.String())
}

func (c *cpioWriter) pad(n int64) {
	if c.err != nil {
		return
	}
	if r := n % 4; r != 0 {
		_, c.err = c.w.Write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) parents(name string) {
	dir := path.Dir(name)
	if dir == "." || dir == "/" || c.seen[dir] {
		return
	}
	c.Dir(dir, 0o755)
}

// claim reports whether name is new, and records it.
func (c *cpioWriter) claim(name string) bool {
	if name == "" || c.seen[name] {
		return false
	}
	c.seen[name] = true
	return true
}

// Dir adds a directory (and its parents).
func (c *cpioWriter) Dir(name string, perm uint32) {
	name = cleanName(name)
	c.parents(name)
	if !c.claim(name) {
		return
	}
	c.header(name, cpioModeDir|perm, 0, 0, 0)
}

// Bytes adds a regular file with the given content.
func (c *cpioWriter) Bytes(name string, perm uint32, data []byte) {
	name = cleanName(name)
	c.parents(name)
	if !c.claim(name) {
		return
	}
	c.header(name, cpioModeReg|perm, int64(len(data)), 0, 0)
	if c.err == nil {
		_, c.err = c.w.Write(data)
	}
	c.pad(int64(len(data)))
}

// HostFile adds a regular file copied from the host path src.
func (c *cpioWriter) HostFile(name string, perm uint32, src string) {
	if c.err != nil {
		return
	}
	f, err := os.Open(src)
	if err != nil {
		c.err = fmt.Errorf("cpio: %s: %w", name, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		c.err = fmt.Errorf("cpio: %s: %w", name, err)
		return
	}
	if st.Size() >= 1<<32 {
		c.err = fmt.Errorf("cpio: %s: %d bytes is too large for newc", name, st.Size())
		return
	}
	name = cleanName(name)
	c.parents(name)
	if !c.claim(name) {
		return
	}
	c.header(name, cpioModeReg|perm, st.Size(), 0, 0)
	if c.err != nil {
		return
	}
	n, err := io.Copy(c.w, f)
	if err != nil {
		c.err = fmt.Errorf("cpio: copy %s: %w", src, err)
		return
	}
	if n != st.Size() {
		c.err = fmt.Errorf("cpio: %s changed size while copying (%d != %d)", src, n, st.Size())
		return
	}
	c.pad(n)
}

// Symlink adds a symbolic link name -> target.
func (c *cpioWriter) Symlink(name, target string) {
	name = cleanName(name)
	c.parents(name)
	if !c.claim(name) {
		return
	}
	c.header(name, cpioModeLink|0o777, int64(len(target)), 0, 0)
	if c.err == nil {
		_, c.err = c.w.WriteString(target)
	}
	c.pad(int64(len(target)))
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) {
	name = cleanName(name)
	c.parents(name)
	if !c.claim(name) {
		return
	}
	c.header(name, cpioModeChr|perm, 0, major, minor)
}

// Close writes the trailer and flushes. It returns the first error met.
func (c *cpioWriter) Close() error {
	c.header("TRAILER!!!", 0, 0, 0, 0)
	if c.err == nil {
		c.err = c.w.Flush()
	}
	if c.err != nil {
		return fmt.Errorf("cpio: %w", c.err)
	}
	return nil
}
