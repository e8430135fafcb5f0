#!/usr/bin/env bash
# Install (once) headless Chromium for the web view's tests and bench: Debian's
# `chromium` package, from the distribution's package registry.
#
# Used by `make install`; the tests skip (saying so) only where it is absent, and fail
# the run under HAMI_TEST_NO_SKIPS=1 (.ci/run: tests/skips.py).
# A run that finds it installs nothing and returns at once. The last line of stdout is
# the browser's path.
#
# Env:
#   HAMI_CHROMIUM   a Chromium binary to use instead
set -euo pipefail

log() { printf '[chromium-install] %s\n' "$*" >&2; }
die() { printf '[chromium-install] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ -n "${HAMI_CHROMIUM:-}" ]]; then
    [[ -x "$HAMI_CHROMIUM" ]] || die "HAMI_CHROMIUM=$HAMI_CHROMIUM is not executable"
    echo "$HAMI_CHROMIUM"
    exit 0
fi
if command -v chromium >/dev/null; then
    command -v chromium
    exit 0
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "not root and no sudo: cannot apt-get install chromium"
    SUDO=(sudo)
fi
command -v apt-get >/dev/null || die "no apt-get: install Chromium and set HAMI_CHROMIUM"
# One installer at a time (parallel sessions on one machine).
LOCK_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/hami"
mkdir -p "$LOCK_DIR"
exec 9>"$LOCK_DIR/chromium-install.lock"
flock 9
if ! command -v chromium >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    log "apt-get install chromium"
    if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium >&2; then
        log "apt-get update, then retry"
        "${SUDO[@]}" apt-get update -q >&2
        "${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium >&2
    fi
fi
command -v chromium || die "chromium still missing after apt-get install"
