package vm

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// systemdPackages are what the systemd variants' root filesystem holds
// besides mmdebstrap's minbase: systemd as PID 1 (systemd-sysv's
// /sbin/init), the system bus runc's systemd cgroup driver talks to, and
// kmod's insmod for overlayfs. containerd, runc and cgdelegate are static
// binaries and need nothing else: no network tools (the pods use a null
// CNI result or the host network), no iptables, no certificates.
// iproute2 brings up a cluster boot's network (guest-run.sh); nftables'
// nft is what kube-proxy in nftables mode runs there (and kmod's modprobe
// and depmod load the netfilter modules it asks for). apparmor's
// apparmor_parser makes an AppArmor variant's node one where containerd
// applies its default profile (variant.Variant.AppArmor).
var systemdPackages = []string{"systemd", "systemd-sysv", "dbus", "kmod", "iproute2", "nftables", "apparmor"}

// systemdRootfs is the systemd variants' root filesystem. The apparmor
// package's two profiles are left out: its postinst loads them into the
// running kernel when AppArmor is on there, and mmdebstrap runs it on the
// build host.
var systemdRootfs = rootfsSpec{
	Name: "systemd", Packages: systemdPackages,
	Exclude: []string{"/etc/apparmor.d/lsb_release", "/etc/apparmor.d/nvidia_modprobe"},
}

// guestUnit is the unit that runs the guest scenarios and then powers the
// VM off, whatever their outcome (qemu runs with -no-reboot): its script
// does so at once; SuccessAction and FailureAction are the fallback when
// the script dies before. It wants
// dbus, which runc's systemd driver needs. A unit another service must
// precede (a kubelet.service, say) only needs to be added to
// systemdUnits with its own [Install]-style wants link.
const guestUnit = `[Unit]
Description=cgdelegate integration guest scenarios
Wants=dbus.service
After=dbus.service

[Service]
Type=exec
ExecStart=/cgd/guest-run.sh
StandardInput=null
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/console
TimeoutStartSec=infinity
TimeoutStopSec=10
LimitNOFILE=1048576
TasksMax=infinity
SuccessAction=poweroff-immediate
FailureAction=poweroff-immediate
`

// systemdUnit is a unit file written into /etc/systemd/system, and the
// targets that want it.
type systemdUnit struct {
	Name     string
	Content  string
	WantedBy []string
}

// systemdUnits are the suite's own units.
var systemdUnits = []systemdUnit{
	{Name: "cgd-guest.service", Content: guestUnit, WantedBy: []string{"multi-user.target"}},
}

// systemdMasked are units of the Debian root filesystem that must not run
// in the VM: no login prompt on the serial console (it is the test
// protocol's channel), no first-boot questions, no periodic maintenance,
// nothing for disks the VM does not have.
var systemdMasked = []string{
	"getty.target",
	"proc-sys-fs-binfmt_misc.automount",
	"systemd-firstboot.service",
	"apt-daily.timer",
	"apt-daily-upgrade.timer",
	"dpkg-db-backup.timer",
	"e2scrub_all.timer",
	"e2scrub_reap.service",
	"systemd-pstore.service",
	// The root filesystem has no kernel modules (overlayfs is loaded by
	// path), and nothing uses the debug file systems; under TCG each of
	// these costs seconds of a starting systemd.
	"modprobe@.service",
	"kmod-static-nodes.service",
	"systemd-modules-load.service",
	"dev-hugepages.mount",
	"sys-kernel-debug.mount",
	"sys-kernel-tracing.mount",
	"sys-kernel-config.mount",
	"sys-fs-fuse-connections.mount",
	"fstrim.timer",
	// It loads /etc/apparmor.d at boot (seconds of the parser under TCG),
	// where the suite needs nothing: containerd loads its own profile at
	// the first container, and the suite loads cgdelegate's.
	"apparmor.service",
}

// guestMachineID is the VM's fixed /etc/machine-id: a machine ID is
// present, so systemd does not treat the boot as a first boot.
const guestMachineID = "c9de1e9a7e5c4d6f8b0a1d2c3e4f5a6b\n"

// systemdFile is one file the systemd variants add over the root
// filesystem: content, or a symbolic link when Link is set.
type systemdFile struct {
	Name string // relative to /
	Mode uint32
	Data string
	Link string
}

// systemdFiles returns the configuration the systemd variants add over the
// Debian root filesystem: the units, their wants links, the masked units,
// the machine ID and the host name.
func systemdFiles(units []systemdUnit, masked []string) ([]systemdFile, error) {
	const dir = "etc/systemd/system"
	var files []systemdFile
	for _, u := range units {
		if !strings.Contains(u.Name, ".") || strings.Contains(u.Name, "/") {
			return nil, fmt.Errorf("systemd unit name %q: want <name>.<type>", u.Name)
		}
		files = append(files, systemdFile{Name: path.Join(dir, u.Name), Mode: 0o644, Data: u.Content})
		for _, target := range u.WantedBy {
			files = append(files, systemdFile{Name: path.Join(dir, target+".wants", u.Name), Link: "/" + path.Join(dir, u.Name)})
		}
	}
	for _, m := range masked {
		if slices.ContainsFunc(units, func(u systemdUnit) bool { return u.Name == m }) {
			return nil, fmt.Errorf("systemd unit %s is both the suite's and masked", m)
		}
		files = append(files, systemdFile{Name: path.Join(dir, m), Link: "/dev/null"})
	}
	files = append(files,
		systemdFile{Name: "etc/machine-id", Mode: 0o444, Data: guestMachineID},
		systemdFile{Name: "etc/hostname", Mode: 0o644, Data: "cgd-vm\n"},
	)
	return files, nil
}
