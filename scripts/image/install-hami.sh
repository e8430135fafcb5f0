#!/bin/sh
# Installs hami into the image being built: a virtual environment /opt/hami with
# hami-core (its server extra) and every backend wheel found in WHEELS, from those wheels
# only (no index). Run inside the image's root filesystem: by the Dockerfile's runtime
# stage, and in a chroot by scripts/build-image.py, so both images hold the same content.
#
# Usage: install-hami.sh [WHEELS]   (default /tmp/wheels)
# HAMI_EXTRAS: hami-core's extras, comma-separated (default server); server,defrag adds
# HiGHS for consolidation's integer program (docs/consolidation.md, *The image*), whose
# wheels WHEELS must then hold.
set -eu
WHEELS=${1:-/tmp/wheels}
EXTRAS=${HAMI_EXTRAS:-server}
[ -d "$WHEELS" ] || { echo "install-hami: no wheel directory $WHEELS" >&2; exit 1; }
case "$EXTRAS" in
    *[!a-z,]* | "" | ,* | *, | *,,*) echo "install-hami: HAMI_EXTRAS '$EXTRAS' is not a list of extras" >&2; exit 1 ;;
esac

python3 -m venv /opt/hami
backends=$(ls "$WHEELS"/hami_*.whl | grep -v '/hami_core-' || true)
[ -n "$backends" ] || { echo "install-hami: no backend wheels in $WHEELS" >&2; exit 1; }
# hami-core[server]: the servers' dependencies (flask, grpcio, ...) where the
# distribution splits them into that extra; plain hami-core otherwise.
/opt/hami/bin/pip install --quiet --no-cache-dir --no-index --find-links "$WHEELS" \
    --disable-pip-version-check "hami-core[$EXTRAS]" $backends
# The runtime needs no installer.
/opt/hami/bin/pip uninstall --quiet --yes pip
# Every backend must load, and the shim must be there.
/opt/hami/bin/hami backends
/opt/hami/bin/python -c "from hami_nvidia.shim import library_path; assert library_path().is_file(), library_path()"
