package host

// The mount check without the mount table. /proc/<pid>/mountinfo is
// written out whole on every read, and every container a runtime starts
// adds lines to it, so reading it for each writable container costs more
// the fuller the node is. A mountProbe asks the kernel about the one mount
// that matters instead: it walks to the cgroup root inside the root of the
// process the table belongs to (openat2(2) with RESOLVE_IN_ROOT), takes the
// unique ID of the mount there (statx(2), STATX_MNT_ID_UNIQUE, Linux 6.8)
// and asks statmount(2) for that mount's file system type and super-block
// options (STATMOUNT_MNT_OPTS, Linux 6.11; from another mount namespace
// with its ID, Linux 6.11). A handful of system calls, whatever the size of
// the table.
//
// The probe only ever answers "safe"; anything else (an older kernel, a
// seccomp filter, a symlink on the way, not a cgroup2 mount, no
// nsdelegate) sends the caller to the whole table, which also explains a
// refusal in full.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The statmount(2) ABI (include/uapi/linux/mount.h); golang.org/x/sys has
// the system call's number but not these.
const (
	statmountSBBasic  = 0x01
	statmountMntBasic = 0x02
	statmountFSType   = 0x20
	statmountMntOpts  = 0x80
	// statmountHeader is sizeof(struct statmount): its string fields are
	// offsets into the bytes after it.
	statmountHeader = 512
	// Offsets of the fields used in struct statmount.
	smMntOpts = 4
	smMask    = 8
	smSBFlags = 32
	smFSType  = 36
	smMntID   = 40
	// The super-block flags mountinfo shows among the super options.
	sbRdonly      = 1 << 0
	sbSynchronous = 1 << 4
	sbDirsync     = 1 << 7
	sbLazytime    = 1 << 25
)

// mntIDReq is struct mnt_id_req (MNT_ID_REQ_SIZE_VER1).
type mntIDReq struct {
	size    uint32
	spare   uint32
	mntID   uint64
	param   uint64
	mntNsID uint64
}

// mountFacts is what the kernel says about the mount at a path.
type mountFacts struct {
	// mountRoot is set when a mount's root is at the path itself, not
	// only somewhere above it.
	mountRoot bool
	// fsType and superOptions are as mountinfo shows them.
	fsType, superOptions string
	// optsKnown is set when the kernel gave the file system's own
	// options. It gives none for a mount that has none, and none at all
	// before Linux 6.11: superOptions then holds only the flags.
	optsKnown bool
}

// mountProbe answers the mount check for one path in one process's view
// (see the top of the file). It is not safe for concurrent use.
type mountProbe struct {
	// root is <procDir>/root, opened O_PATH: the process's root directory.
	root *os.File
	// rel is the cgroup root relative to it.
	rel string
	// nsID is the ID of the process's mount namespace for statmount(2), 0
	// when it is the caller's own.
	nsID uint64
	buf  []byte
}

// openProbe returns a probe for cgroupRoot as the process that
// mountinfoPath (/proc/<pid>/mountinfo) belongs to sees it, or an error
// that says why there can be none; the caller then reads the table.
func openProbe(mountinfoPath, cgroupRoot string) (*mountProbe, error) {
	if filepath.Base(mountinfoPath) != "mountinfo" {
		return nil, fmt.Errorf("%q is not a /proc/<pid>/mountinfo", mountinfoPath)
	}
	procDir := filepath.Dir(mountinfoPath)
	root, err := os.OpenFile(filepath.Join(procDir, "root"), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	p := &mountProbe{root: root, rel: strings.TrimPrefix(filepath.Clean(cgroupRoot), "/"), buf: make([]byte, 4096)}
	if p.rel == "" {
		p.rel = "."
	}
	if p.nsID, err = foreignMountNS(filepath.Join(procDir, "ns", "mnt")); err != nil {
		_ = root.Close()
		return nil, err
	}
	return p, nil
}

// foreignMountNS returns the ID of the mount namespace at nsPath, or 0 when
// it is the caller's own.
func foreignMountNS(nsPath string) (uint64, error) {
	var theirs, ours unix.Stat_t
	if err := unix.Stat(nsPath, &theirs); err != nil {
		return 0, fmt.Errorf("mount namespace: %w", err)
	}
	if err := unix.Stat("/proc/thread-self/ns/mnt", &ours); err != nil {
		return 0, fmt.Errorf("own mount namespace: %w", err)
	}
	if theirs.Dev == ours.Dev && theirs.Ino == ours.Ino {
		return 0, nil
	}
	f, err := os.Open(nsPath)
	if err != nil {
		return 0, fmt.Errorf("mount namespace: %w", err)
	}
	defer f.Close()
	var id uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.NS_GET_MNTNS_ID, uintptr(unsafe.Pointer(&id))); errno != 0 {
		return 0, fmt.Errorf("NS_GET_MNTNS_ID %s: %w", nsPath, errno)
	}
	return id, nil
}

// Close releases the probe.
func (p *mountProbe) Close() error { return p.root.Close() }

// facts asks the kernel about the mount at the probe's path. An error
// wrapping fs.ErrNotExist or ELOOP is about the path (nothing there, a
// symlink on the way); any other means the kernel can not answer.
func (p *mountProbe) facts() (mountFacts, error) {
	fd, err := unix.Openat2(int(p.root.Fd()), p.rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return mountFacts{}, fmt.Errorf("openat2 %s: %w", p.rel, err)
	}
	var stx unix.Statx_t
	err = unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID_UNIQUE, &stx)
	_ = unix.Close(fd)
	if err != nil {
		return mountFacts{}, fmt.Errorf("statx %s: %w", p.rel, err)
	}
	if stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 || stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return mountFacts{}, fmt.Errorf("statx %s: %w: no unique mount ID (Linux 6.8+)", p.rel, unix.EOPNOTSUPP)
	}
	f := mountFacts{mountRoot: stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0}
	req := mntIDReq{
		size: uint32(unsafe.Sizeof(mntIDReq{})), mntID: stx.Mnt_id, mntNsID: p.nsID,
		param: statmountSBBasic | statmountMntBasic | statmountFSType | statmountMntOpts,
	}
	if _, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req)), uintptr(unsafe.Pointer(&p.buf[0])), uintptr(len(p.buf)), 0, 0, 0); errno != 0 {
		return mountFacts{}, fmt.Errorf("statmount %s: %w", p.rel, errno)
	}
	b := p.buf
	size := binary.NativeEndian.Uint32(b[0:])
	if size < statmountHeader || int(size) > len(b) {
		return mountFacts{}, fmt.Errorf("statmount %s: %w: answer of %d bytes", p.rel, unix.EOPNOTSUPP, size)
	}
	need := uint64(statmountSBBasic | statmountMntBasic | statmountFSType)
	mask := binary.NativeEndian.Uint64(b[smMask:])
	if mask&need != need {
		return mountFacts{}, fmt.Errorf("statmount %s: %w: mask %#x lacks %#x", p.rel, unix.EOPNOTSUPP, mask, need)
	}
	if id := binary.NativeEndian.Uint64(b[smMntID:]); id != stx.Mnt_id {
		return mountFacts{}, fmt.Errorf("statmount %s: %w: mount %d answered for %d", p.rel, unix.EOPNOTSUPP, id, stx.Mnt_id)
	}
	str := b[statmountHeader:size]
	f.fsType = cString(str, binary.NativeEndian.Uint32(b[smFSType:]))
	var fsOpts string
	if f.optsKnown = mask&statmountMntOpts != 0; f.optsKnown {
		fsOpts = cString(str, binary.NativeEndian.Uint32(b[smMntOpts:]))
	}
	f.superOptions = superOptions(binary.NativeEndian.Uint32(b[smSBFlags:]), fsOpts)
	return f, nil
}

// superOptions builds mountinfo's super options: the super-block flags it
// shows, then the file system's own options.
func superOptions(flags uint32, fsOpts string) string {
	opts := "rw"
	if flags&sbRdonly != 0 {
		opts = "ro"
	}
	for _, f := range []struct {
		bit  uint32
		name string
	}{{sbSynchronous, "sync"}, {sbDirsync, "dirsync"}, {sbLazytime, "lazytime"}} {
		if flags&f.bit != 0 {
			opts += "," + f.name
		}
	}
	if fsOpts != "" {
		opts += "," + fsOpts
	}
	return opts
}

// cString is the NUL-terminated string at off in str ("" past its end).
func cString(str []byte, off uint32) string {
	if int(off) >= len(str) {
		return ""
	}
	s := str[off:]
	if i := slices.Index(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

// safe returns the status of the probe's path when the kernel says it is
// safe for writable cgroups (a cgroup2 mount's root with nsdelegate), and
// false for anything else: the caller reads the table, which explains a
// refusal in full. err is set when the kernel could not answer at all.
func (p *mountProbe) safe(cgroupRoot string) (Status, bool, error) {
	f, err := p.facts()
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			// About the path, not the kernel: the table says what is wrong.
			err = nil
		}
		return Status{}, false, err
	}
	if !f.mountRoot || !f.optsKnown {
		return Status{}, false, nil
	}
	st := Status{CgroupRoot: filepath.Clean(cgroupRoot)}
	st.setMount(f.fsType, f.superOptions)
	return st, st.Err() == nil, nil
}

// CheckMounts is the one-off mount check of the createRuntime hook: the
// kernel's answer about cgroupRoot (see mountProbe) when it says safe, else
// the whole table at mountinfoPath, parsed.
func CheckMounts(mountinfoPath, cgroupRoot string) (Status, error) {
	if p, err := openProbe(mountinfoPath, cgroupRoot); err == nil {
		st, ok, _ := p.safe(cgroupRoot)
		_ = p.Close()
		if ok {
			return st, nil
		}
	}
	f, err := os.Open(mountinfoPath)
	if err != nil {
		return Status{CgroupRoot: filepath.Clean(cgroupRoot)}, err
	}
	defer f.Close()
	st, err := ParseMountinfo(f, cgroupRoot)
	if err != nil {
		return st, fmt.Errorf("mount table %q: %w", mountinfoPath, err)
	}
	return st, nil
}
