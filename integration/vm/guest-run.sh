#!/bin/sh
# ExecStart of cgd-guest.service in the systemd variants: the counterpart of
# stage two of integration/vm/init.sh. systemd has mounted the API file
# systems and cgroup2, made / shared, set the hostname and brought lo up;
# this loads overlayfs, prints CGD-BOOT, runs the guest test binary (which
# starts containerd and cgdelegate itself, and remounts cgroup2 without
# nsdelegate when the variant says so) and prints CGD-DONE. The unit powers
# the VM off when this script ends.
export HOME=/root

insmod /cgd/overlay.ko || echo "CGD-FATAL insmod overlay"
echo "CGD-BOOT kernel=$(uname -r) cpus=$(nproc) init=$(cat /proc/1/comm) cgroup=$(grep ' /sys/fs/cgroup ' /proc/self/mountinfo | sed 's/.* - //')"

/cgd/guest.test -test.v -test.timeout=10m
rc=$?
echo "CGD-DONE {\"exit\":$rc}"
sync
exit $rc
