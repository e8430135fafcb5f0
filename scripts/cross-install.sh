#!/usr/bin/env bash
# Install (once) what the aarch64 build and its tests need, from Debian's packages:
# the cross compiler and C library (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross: they
# build libvgpu.so and the shim's test programs for aarch64, binutils-aarch64-linux-gnu
# strips it) and QEMU user-mode (qemu-user-static: runs those programs here, invoked
# directly with -L /usr/aarch64-linux-gnu, so no binfmt_misc registration is needed).
#
# Used by the packaging tier (the aarch64 hami-nvidia wheel) and the shim tests under
# HAMI_SHIM_ARCH=aarch64. A run that finds every tool installs nothing and returns at
# once.
set -euo pipefail

log() { printf '[cross-install] %s\n' "$*" >&2; }
die() { printf '[cross-install] ERROR: %s\n' "$*" >&2; exit 1; }

PACKAGES=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static)
have() {
    command -v aarch64-linux-gnu-gcc >/dev/null && command -v aarch64-linux-gnu-strip >/dev/null \
        && command -v qemu-aarch64-static >/dev/null && [[ -f /usr/aarch64-linux-gnu/lib/libc.so.6 ]]
}
have && exit 0

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "not root and no sudo: cannot apt-get install ${PACKAGES[*]}"
    SUDO=(sudo)
fi
# One installer at a time (parallel test sessions on one machine).
LOCK_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/hami"
mkdir -p "$LOCK_DIR"
exec 9>"$LOCK_DIR/cross-install.lock"
flock 9
if ! have; then
    export DEBIAN_FRONTEND=noninteractive
    log "apt-get install ${PACKAGES[*]}"
    if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >&2; then
        log "apt-get update, then retry"
        "${SUDO[@]}" apt-get update -q >&2
        "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >&2
    fi
fi
have || die "the aarch64 cross compiler or qemu-aarch64-static still missing after apt-get install"
