#!/bin/sh
# capture.sh packs the sysfs files that internal/cpumanager/topology discovery reads
# into one .tar.gz, for use as a real-machine test fixture.
#
#   capture.sh [SYSFS_ROOT] OUT.tar.gz
#
# SYSFS_ROOT defaults to /sys; OUT "-" writes the archive to stdout (for a
# VM whose only way out is the console: capture.sh /sys - | base64).
# Member paths are relative to SYSFS_ROOT ("devices/system/cpu/online").
#
# It copies exactly what discovery opens, when present:
#   devices/system/cpu/{online,offline,isolated}
#   devices/system/cpu/cpuN/{online,cpu_capacity}
#   devices/system/cpu/cpuN/topology/{physical_package_id,core_id,die_id,
#       cluster_id,core_cpus_list,thread_siblings_list}
#   devices/system/node/online
#   devices/system/node/nodeN/{cpulist,distance,meminfo}
# Keep this list in step with internal/cpumanager/topology/discover.go.
#
# qemu-smp4-2node.tar.gz came from a qemu boot with the arguments of the
# integration/vm harness (-smp 4, two -numa nodes, -m 2048), the cached
# Debian kernel and an initramfs of busybox-static, this script and an
# /init that mounts sysfs and runs
#   echo CAPTURE-BEGIN; sh /capture.sh /sys - | base64; echo CAPTURE-END
# then powers off; the archive is the base64 between the markers.
#
# POSIX sh; needs only cat, mkdir, mktemp, rm and a tar that knows -z
# (GNU tar or busybox). Files go through cat into a staging directory
# first: sysfs reports every file as 4096 bytes, which tar would pad.
set -eu

case $# in
1) root=/sys out=$1 ;;
2) root=$1 out=$2 ;;
*)
	echo "usage: $0 [sysfs-root] out.tar.gz" >&2
	exit 2
	;;
esac
if [ ! -d "$root/devices/system/cpu" ]; then
	echo "$0: $root/devices/system/cpu: not a directory" >&2
	exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# copy REL copies $root/REL to $stage/REL if it is a regular file.
copy() {
	[ -f "$root/$1" ] || return 0
	[ -d "$stage/${1%/*}" ] || mkdir -p "$stage/${1%/*}"
	cat "$root/$1" >"$stage/$1"
}

cpu=devices/system/cpu
node=devices/system/node
for f in online offline isolated; do
	copy "$cpu/$f"
done
for d in "$root/$cpu"/cpu[0-9]*; do
	[ -d "$d" ] || continue
	c=$cpu/${d##*/}
	copy "$c/online"
	copy "$c/cpu_capacity"
	for f in physical_package_id core_id die_id cluster_id core_cpus_list thread_siblings_list; do
		copy "$c/topology/$f"
	done
done
copy "$node/online"
for d in "$root/$node"/node[0-9]*; do
	[ -d "$d" ] || continue
	n=$node/${d##*/}
	for f in cpulist distance meminfo; do
		copy "$n/$f"
	done
done

if [ ! -d "$stage/devices" ]; then
	echo "$0: nothing to capture under $root" >&2
	exit 1
fi
tar -czf "$out" -C "$stage" devices
