#!/usr/bin/env bash
# install-deps.sh: idempotently install the host packages the VM integration
# harness needs (qemu for the VM, busybox-static for the guest userland,
# libseccomp-dev + a C toolchain for a static runc, cpio/xz/zstd for the
# initramfs and the Debian kernel modules, mmdebstrap for the Debian root
# filesystem of the systemd variants, podman for TestPodmanLoad: `podman load`
# of `make image`'s archive, docker-registry (the CNCF distribution registry)
# for the cluster boot's registry, which the harness starts itself, iproute2
# for the cluster boot's bridge and taps).
set -euo pipefail

pkgs=(qemu-system-x86 busybox-static libseccomp-dev gcc libc6-dev pkg-config cpio zstd xz-utils mmdebstrap podman docker-registry iproute2)

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

if [ "${#missing[@]}" -eq 0 ]; then
	echo "install-deps: all host packages present"
	exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

# The harness runs its own registry (docker-registry serve <config>, on a
# loopback port, for one boot); the Debian package's service would serve
# one on :5000 for good.
if [[ " ${missing[*]} " == *" docker-registry "* ]] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
	$SUDO systemctl disable --now docker-registry.service || true
fi
