#!/bin/sh
# /init of the cgdelegate integration VM (busybox sh, PID 1).
#
# Stage one runs on the initramfs (rootfs), which runc cannot pivot_root away
# from: copy everything into a tmpfs and switch_root there. Stage two sets up
# a pure cgroup v2 host (nsdelegate unless integration/internal/variant put
# cgd.nsdelegate=0 on the kernel command line), then runs the guest test
# binary, which starts containerd and the plugin itself. The guest prints CGD-RESULT lines; we print CGD-DONE and
# power off (qemu runs with -no-reboot, so reboot ends the VM).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root

if [ ! -e /.cgd-stage2 ]; then
	mkdir -p /proc /newroot
	mount -t proc proc /proc
	mount -t tmpfs -o mode=0755,size=90% rootfs /newroot
	for f in /* /.[!.]*; do
		case "$f" in
		/newroot | /proc | /sys | /dev | '/.[!.]*') ;;
		*) cp -a "$f" /newroot/ ;;
		esac
	done
	mkdir -p /newroot/proc /newroot/sys /newroot/dev
	: >/newroot/.cgd-stage2
	umount /proc
	exec switch_root /newroot /init
	echo "CGD-FATAL switch_root failed"
	reboot -f
fi

fatal() {
	echo "CGD-FATAL $*"
	sync
	reboot -f
}

mount -t proc proc /proc || fatal "mount proc"
mount -t sysfs sysfs /sys || fatal "mount sysfs"
mount -t devtmpfs devtmpfs /dev || fatal "mount devtmpfs"
mkdir -p /dev/pts /dev/shm /run /tmp /var/log /var/lib
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts || fatal "mount devpts"
mount -t tmpfs -o mode=1777,nosuid,nodev shm /dev/shm || fatal "mount /dev/shm"
mount -t tmpfs -o mode=0755,nosuid,nodev run /run || fatal "mount /run"
chmod 1777 /tmp
echo 1 >/proc/sys/kernel/printk

if grep -qw 'cgd.nsdelegate=0' /proc/cmdline; then
	mount -t cgroup2 cgroup2 /sys/fs/cgroup || fatal "mount cgroup2"
else
	mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup || fatal "mount cgroup2 nsdelegate"
fi
mount --make-rshared / || fatal "make-rshared"
hostname cgd-vm
ip link set lo up || fatal "lo up"
insmod /lib/modules/overlay.ko || fatal "insmod overlay"

# Leave the root cgroup to kernel threads and enable every controller below it.
mkdir -p /sys/fs/cgroup/init
for p in $(cat /sys/fs/cgroup/cgroup.procs); do
	echo "$p" >/sys/fs/cgroup/init/cgroup.procs 2>/dev/null
done
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
	echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control || fatal "enable controller $c"
done

# A cluster boot (cgd.cluster=1) is a node of the pod network
# (integration/internal/podnet): its NIC is on the host's bridge, with the
# address cgdnet.ip, and the host (the API server) at cgdnet.host.
if grep -qw 'cgd.cluster=1' /proc/cmdline; then
	for m in failover net_failover virtio_net; do
		insmod /cgd/net/$m.ko || fatal "insmod $m"
	done
	n=0
	while [ ! -e /sys/class/net/eth0 ]; do
		n=$((n + 1))
		[ $n -le 100 ] || fatal "no eth0 10 s after loading virtio_net"
		sleep 0.1
	done
	addr=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^cgdnet\.ip=//p')
	gw=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^cgdnet\.host=//p')
	[ -n "$addr" ] && [ -n "$gw" ] || fatal "no cgdnet.ip or cgdnet.host on the kernel command line"
	ip addr add "$addr" dev eth0 || fatal "eth0 address $addr"
	ip link set eth0 up || fatal "eth0 up"
	ip route add default via "$gw" || fatal "default route via $gw"
fi

echo "CGD-BOOT kernel=$(uname -r) cpus=$(nproc) cgroup=$(grep ' /sys/fs/cgroup ' /proc/self/mountinfo | sed 's/.* - //')"

# A real kubelet starts a pod several times slower than the CRI scenarios
# do (its sync loop, the sandbox, under TCG): kubelet variants get longer.
timeout=10m
if grep -qw -e 'cgd.kubelet=1' -e 'cgd.cluster=1' /proc/cmdline; then
	timeout=20m
fi
# The cluster boot's scenarios took past 20 minutes on 2026-11-27, and
# about 33 with the pod network, the registry and the second node.
if grep -qw 'cgd.cluster=1' /proc/cmdline; then
	timeout=45m
fi
# The scale boot churns 50 pods and restarts the plugin beside a fleet:
# 4 to 10 minutes under TCG.
if grep -q 'ScaleChurn' /proc/cmdline; then
	timeout=20m
fi
# The pinning oracle runs ten pods twice, one after the other.
if grep -q 'KubeletPinningOracle' /proc/cmdline; then
	timeout=45m
fi
# critest runs three times, about 11 minutes each under TCG.
if grep -q 'CRIConformance' /proc/cmdline; then
	timeout=60m
fi
# make bench-node grows a fleet of 100 containers and times pinned pods
# beside it (integration/guest/bench_test.go stops after 85 minutes).
if grep -q 'cgd.scenarios=BenchNode' /proc/cmdline; then
	timeout=90m
fi
/cgd/guest.test -test.v -test.timeout=$timeout
rc=$?
echo "CGD-DONE {\"exit\":$rc}"
sync
reboot -f
