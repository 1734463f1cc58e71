#!/bin/sh
# ExecStart of cgd-guest.service in the systemd variants: the counterpart of
# stage two of integration/vm/init.sh. systemd has mounted the API file
# systems and cgroup2, made / shared, set the hostname and brought lo up;
# this loads overlayfs, prints CGD-BOOT, runs the guest test binary (which
# starts containerd and cgdelegate itself, and remounts cgroup2 without
# nsdelegate when the variant says so), prints CGD-DONE and powers the VM
# off at once, as init.sh's reboot -f does: a clean stop would wait for the
# containerd shims left in this unit's cgroup. (qemu runs with -no-reboot.)
export HOME=/root

insmod /cgd/overlay.ko || echo "CGD-FATAL insmod overlay"
echo "CGD-TIMING systemd-unit uptime=$(cut -d' ' -f1 /proc/uptime)"
echo "CGD-BOOT kernel=$(uname -r) cpus=$(nproc) init=$(cat /proc/1/comm) cgroup=$(grep ' /sys/fs/cgroup ' /proc/self/mountinfo | sed 's/.* - //')"

# A cluster boot (cgd.cluster=1) is a node of the pod network
# (integration/internal/podnet): its NIC is on the host's bridge, with the
# address cgdnet.ip, and the host (the API server) at cgdnet.host.
if grep -qw 'cgd.cluster=1' /proc/cmdline; then
	for m in failover net_failover virtio_net; do
		insmod /cgd/net/$m.ko || echo "CGD-FATAL insmod $m"
	done
	n=0
	while [ ! -e /sys/class/net/eth0 ] && [ $n -le 100 ]; do
		n=$((n + 1))
		sleep 0.1
	done
	addr=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^cgdnet\.ip=//p')
	gw=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^cgdnet\.host=//p')
	[ -n "$addr" ] && [ -n "$gw" ] || echo "CGD-FATAL no cgdnet.ip or cgdnet.host on the kernel command line"
	ip addr add "$addr" dev eth0 || echo "CGD-FATAL eth0 address $addr"
	ip link set eth0 up || echo "CGD-FATAL eth0 up"
	ip route add default via "$gw" || echo "CGD-FATAL default route via $gw"
fi

# Kubelet and cluster variants get longer, as in init.sh.
timeout=10m
if grep -qw -e 'cgd.kubelet=1' -e 'cgd.cluster=1' /proc/cmdline; then
	timeout=20m
fi
# The cluster boot's scenarios took past 20 minutes on 2026-11-27, and
# about 33 with the pod network, the registry and the second node.
if grep -qw 'cgd.cluster=1' /proc/cmdline; then
	timeout=45m
fi
# The pinning oracle runs ten pods twice, one after the other.
if grep -q 'KubeletPinningOracle' /proc/cmdline; then
	timeout=45m
fi
/cgd/guest.test -test.v -test.timeout=$timeout
rc=$?
# Where systemd spent the boot (the unit is Type=exec, so the boot has
# finished by now).
systemd-analyze time 2>&1 | sed 's/^/CGD-TIMING /'
systemd-analyze blame 2>&1 | head -n 8 | sed 's/^/CGD-TIMING /'
# Where the guest's CPU went: the cgroups that used the most (cpu.stat
# counts the processes that have exited too), then the live processes.
for f in /sys/fs/cgroup/cpu.stat /sys/fs/cgroup/*/cpu.stat /sys/fs/cgroup/*/*/cpu.stat /sys/fs/cgroup/*/*/*/cpu.stat; do
	[ -r "$f" ] && echo "$(sed -n 's/^usage_usec //p' "$f") ${f%/cpu.stat}"
done | sort -rn | head -n 25 | sed 's/^/CGD-TIMING cgroup-cpu-usec /'
for d in /proc/[0-9]*; do
	[ -r "$d/stat" ] && awk '{ s = $0; sub(/^[^)]*\) /, "", s); split(s, f, " "); print f[12] + f[13], $1, $2 }' "$d/stat" 2>/dev/null
done | sort -rn | head -n 15 | sed 's/^/CGD-TIMING proc-cpu-ticks /'
echo "CGD-DONE {\"exit\":$rc}"
sync
systemctl --force --force poweroff
echo "CGD-FATAL systemctl poweroff failed"
exit $rc
