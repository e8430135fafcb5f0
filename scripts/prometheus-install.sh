#!/usr/bin/env bash
# Install (once) a real Prometheus server and promtool for the tests: Debian's
# `prometheus` package (2.42 in bookworm), from the distribution's package registry.
#
# Used by `make prometheus` and the test fixtures (tests/prometheus.py) when either
# binary is missing: `promtool test rules` checks the alert rules, and the e2e tier runs
# a Prometheus that scrapes the scheduler and the monitor of a test cluster.
# A run that finds both binaries installs nothing and returns at once.
# The last line of stdout is the directory holding both binaries.
#
# Env:
#   HAMI_PROMETHEUS_BIN   a directory with prometheus and promtool to use instead
set -euo pipefail

log() { printf '[prometheus-install] %s\n' "$*" >&2; }
die() { printf '[prometheus-install] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ -n "${HAMI_PROMETHEUS_BIN:-}" ]]; then
    [[ -x "$HAMI_PROMETHEUS_BIN/prometheus" && -x "$HAMI_PROMETHEUS_BIN/promtool" ]] \
        || die "HAMI_PROMETHEUS_BIN=$HAMI_PROMETHEUS_BIN lacks prometheus or promtool"
    echo "$HAMI_PROMETHEUS_BIN"
    exit 0
fi

have() { command -v prometheus >/dev/null && command -v promtool >/dev/null; }
if have; then
    dirname "$(command -v prometheus)"
    exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "not root and no sudo: cannot apt-get install prometheus"
    SUDO=(sudo)
fi
# One installer at a time (parallel test sessions on one machine).
LOCK_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/hami"
mkdir -p "$LOCK_DIR"
exec 9>"$LOCK_DIR/prometheus-install.lock"
flock 9
if ! have; then
    export DEBIAN_FRONTEND=noninteractive
    log "apt-get install prometheus (server and promtool)"
    if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends prometheus >&2; then
        log "apt-get update, then retry"
        "${SUDO[@]}" apt-get update -q >&2
        "${SUDO[@]}" apt-get install -y -q --no-install-recommends prometheus >&2
    fi
    # The package starts a system service where an init system runs; tests run their own.
    if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
        "${SUDO[@]}" systemctl disable --now prometheus >&2 || true
    fi
fi
have || die "prometheus or promtool still missing after apt-get install"
dirname "$(command -v prometheus)"
