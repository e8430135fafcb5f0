#!/usr/bin/env bash
# Install (once) what a real kubelet node needs for the device-plugin e2e tier
# (recipe: shared/REAL-KUBE.md, "A real node"): containerd 1.6, runc 1.1, the CNI plugins
# (in /usr/lib/cni) and a static busybox (the test images are built from it), all from
# Debian's package registry. The kubelet binary itself comes from scripts/kube-build.sh.
#
# Idempotent: when every package is installed it changes nothing and returns at once.
# Installing needs root (or sudo) and Debian's registry. Nothing is started or enabled:
# the tests run their own containerd with its own config and state directories, and
# this script stops a containerd service the package may have started.
#
# Usage: scripts/node-setup.sh [--check]
#   --check   only report what is missing (exit 1 if anything is)
# The last stdout line is "ok" when everything is in place.
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins busybox-static iproute2)
BINARIES=(/usr/bin/containerd /usr/bin/ctr /usr/bin/containerd-shim-runc-v2 /usr/sbin/runc
          /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /bin/busybox /usr/sbin/ip)

log() { printf '[node-setup] %s\n' "$*" >&2; }
die() { printf '[node-setup] ERROR: %s\n' "$*" >&2; exit 1; }

missing_packages() {
    local p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

missing_binaries() {
    local b
    for b in "${BINARIES[@]}"; do
        [[ -x "$b" ]] || echo "$b"
    done
}

check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac

command -v dpkg-query >/dev/null || die "not a Debian system (no dpkg-query); install ${PACKAGES[*]} by hand"
mapfile -t todo < <(missing_packages)
if [[ ${#todo[@]} -eq 0 ]]; then
    mapfile -t gone < <(missing_binaries)
    [[ ${#gone[@]} -eq 0 ]] || die "packages are installed but these are missing: ${gone[*]}"
    log "containerd, runc, CNI plugins and busybox are installed"
    echo ok
    exit 0
fi
if [[ $check == 1 ]]; then
    log "missing packages: ${todo[*]}"
    exit 1
fi

SUDO=()
if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null || die "installing ${todo[*]} needs root or sudo"
    SUDO=(sudo -n)
fi
log "installing ${todo[*]} from Debian's registry"
# No service may start during the install (there may be no init system at all).
policy="/usr/sbin/policy-rc.d"
created_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
    "${SUDO[@]}" chmod +x "$policy"
    created_policy=1
fi
cleanup() { if [[ $created_policy == 1 ]]; then "${SUDO[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq >&2 || log "apt-get update failed; trying the cached lists"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${todo[@]}" >&2

mapfile -t gone < <(missing_binaries)
[[ ${#gone[@]} -eq 0 ]] || die "installed, but these are still missing: ${gone[*]}"
log "done"
echo ok
