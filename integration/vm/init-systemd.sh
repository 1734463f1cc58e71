#!/bin/sh
# /init of the systemd variants of the cgdelegate integration VM (dash from
# the Debian root filesystem, PID 1 on the initramfs).
#
# runc cannot pivot_root away from the initramfs (rootfs), so, as
# integration/vm/init.sh does for the busybox variants: copy everything into
# a tmpfs and switch_root there, this time to systemd, which mounts the API
# file systems and cgroup2 (with nsdelegate) itself and starts
# cgd-guest.service (integration/vm/systemd.go).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

mkdir -p /proc /newroot
mount -t proc proc /proc
echo "CGD-TIMING stage1-start uptime=$(cut -d' ' -f1 /proc/uptime)"
mount -t tmpfs -o mode=0755,size=90% rootfs /newroot
for f in /* /.[!.]*; do
	case "$f" in
	/newroot | /proc | /sys | /dev | /init | '/.[!.]*') ;;
	*) cp -a "$f" /newroot/ ;;
	esac
done
mkdir -p /newroot/proc /newroot/sys /newroot/dev /newroot/run
echo "CGD-TIMING stage1-copied uptime=$(cut -d' ' -f1 /proc/uptime)"
umount /proc
exec switch_root /newroot /sbin/init
echo "CGD-FATAL switch_root to systemd failed"
