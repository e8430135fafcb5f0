#!/usr/bin/env bash
# Build (once) and cache real Kubernetes v1.20.2 control-plane binaries for the e2e tier.
#
# Recipe: shared/REAL-KUBE.md. Everything comes from Debian's package registry:
#   - etcd 3.4 (etcd-server), Go 1.19 (golang-go)
#   - the kubernetes 1.20.2 source package (full source with vendor/), built with `make`
#     after swapping the vendored reflect2 1.0.1 (SIGSEGV under Go >= 1.18) for Debian's 1.0.2.
#
# Result: kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, kubectl and etcd in
#   ${XDG_CACHE_HOME:-$HOME/.cache}/hami/kube-1.20.2/bin/
# A run that finds them (and a matching stamp) builds nothing and returns at once.
# The last line of stdout is the bin directory; everything else goes to stderr.
#
# Usage: scripts/kube-build.sh [--force]
#   --force   rebuild even if cached binaries are present
# Env:
#   HAMI_KUBE_CACHE   override the cache directory (default as above)
set -euo pipefail

KUBE_VERSION=1.20.2
DEB_SUITE=bookworm
# Bump when the recipe changes, so cached binaries built the old way are rebuilt.
RECIPE_REV=1
WHAT_BINARIES=(kube-apiserver kube-scheduler kubelet kubectl kube-controller-manager)

CACHE_DIR="${HAMI_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami/kube-${KUBE_VERSION}}"
BIN_DIR="$CACHE_DIR/bin"
STAMP="$BIN_DIR/.stamp"
STAMP_LINE="kube=${KUBE_VERSION} recipe=${RECIPE_REV}"

log() { printf '[kube-build] %s\n' "$*" >&2; }
die() { printf '[kube-build] ERROR: %s\n' "$*" >&2; exit 1; }

force=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
        *) die "unknown argument: $arg" ;;
    esac
done

cached_ok() {
    [[ -f "$STAMP" ]] || return 1
    [[ "$(head -n1 "$STAMP")" == "$STAMP_LINE" ]] || return 1
    local b
    for b in "${WHAT_BINARIES[@]}" etcd; do
        [[ -x "$BIN_DIR/$b" ]] || return 1
    done
    return 0
}

# Fast path: nothing to do.
if [[ $force == 0 ]] && cached_ok; then
    log "cached binaries present in $BIN_DIR (stamp: $STAMP_LINE); nothing to build"
    echo "$BIN_DIR"
    exit 0
fi

mkdir -p "$CACHE_DIR"
# Serialise concurrent builds (e.g. parallel test sessions) on one cache dir.
exec 9>"$CACHE_DIR/.lock"
if ! flock -n 9; then
    log "another kube-build holds $CACHE_DIR/.lock; waiting for it"
    flock 9
fi
if [[ $force == 0 ]] && cached_ok; then
    log "binaries were built by a concurrent run; nothing to build"
    echo "$BIN_DIR"
    exit 0
fi

SUDO=()
if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || die "not root and no sudo: cannot apt-get install"
    SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

t_start=$SECONDS

# --- 1. deb-src entry -------------------------------------------------------------------
SRC_FILE=/etc/apt/sources.list.d/hami-kube-deb-src.sources
if [[ ! -f $SRC_FILE ]]; then
    uris="" signed_by=""
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        # First stanza whose URIs line points at the main Debian archive (not -security).
        IFS=$'\t' read -r uris signed_by < <(awk '
            BEGIN { RS=""; FS="\n" }
            {
                u=""; s=""; t=""
                for (i=1; i<=NF; i++) {
                    if ($i ~ /^URIs:/)      { u=$i; sub(/^URIs:[ \t]*/, "", u) }
                    if ($i ~ /^Signed-By:/) { s=$i; sub(/^Signed-By:[ \t]*/, "", s) }
                    if ($i ~ /^Types:/)     { t=$i }
                }
                if (t ~ /deb/ && u != "" && u !~ /security/) { print u "\t" s; exit }
            }' /etc/apt/sources.list.d/debian.sources) || true
    elif [[ -f /etc/apt/sources.list ]]; then
        uris=$(awk '$1=="deb" && $0 !~ /security/ { for (i=2;i<=NF;i++) if ($i ~ /^(http|https|file):/) { print $i; exit } }' /etc/apt/sources.list)
    fi
    [[ -n $uris ]] || uris=http://deb.debian.org/debian
    [[ -n $signed_by ]] || signed_by=/usr/share/keyrings/debian-archive-keyring.gpg
    log "adding deb-src entry $SRC_FILE ($uris $DEB_SUITE main)"
    printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
        "$uris" "$DEB_SUITE" "$signed_by" | "${SUDO[@]}" tee "$SRC_FILE" >/dev/null
fi

# --- 2. packages ------------------------------------------------------------------------
PKGS=(golang-go etcd-server golang-github-modern-go-reflect2-dev rsync jq make tar gzip)
log "apt-get update"
"${SUDO[@]}" apt-get update -q >&2
log "apt-get install ${PKGS[*]}"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PKGS[@]}" >&2

GO=$(command -v go || true)
[[ -n $GO ]] || GO=/usr/lib/go/bin/go
[[ -x $GO ]] || die "go not found after installing golang-go"
ETCD=$(command -v etcd || true)
[[ -n $ETCD ]] || die "etcd not found after installing etcd-server"
REFLECT2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
[[ -d $REFLECT2_SRC ]] || die "$REFLECT2_SRC missing (golang-github-modern-go-reflect2-dev)"
log "using $("$GO" version), etcd at $ETCD"

# --- 3. source --------------------------------------------------------------------------
SCRATCH="$CACHE_DIR/build"
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH/dl" "$SCRATCH/home" "$SCRATCH/gopath/src/k8s.io"
log "fetching kubernetes source package into $SCRATCH/dl"
( cd "$SCRATCH/dl" && apt-get source --download-only -q kubernetes >&2 )
orig=$(ls "$SCRATCH"/dl/kubernetes_*"${KUBE_VERSION}".orig.tar.gz 2>/dev/null | head -n1 || true)
[[ -n $orig ]] || die "no kubernetes_*${KUBE_VERSION}.orig.tar.gz in $SCRATCH/dl: $(ls "$SCRATCH/dl")"
SRC="$SCRATCH/gopath/src/k8s.io/kubernetes"
mkdir -p "$SRC"
log "unpacking $(basename "$orig")"
tar -xzf "$orig" -C "$SRC" --strip-components=1
[[ -f $SRC/Makefile && -d $SRC/vendor ]] || die "unexpected source layout in $orig"
rm -rf "$SCRATCH/dl"

# --- 4. reflect2 1.0.1 -> Debian's 1.0.2 --------------------------------------------------
log "replacing vendor/github.com/modern-go/reflect2 with $REFLECT2_SRC"
rm -rf "$SRC/vendor/github.com/modern-go/reflect2"
mkdir -p "$SRC/vendor/github.com/modern-go/reflect2"
cp -rL "$REFLECT2_SRC/." "$SRC/vendor/github.com/modern-go/reflect2/"
rm -f "$SRC/vendor/github.com/modern-go/reflect2/go.mod" "$SRC/vendor/github.com/modern-go/reflect2/go.sum"

# --- 5. build ---------------------------------------------------------------------------
# With a matching stamp, build only what is missing (e.g. a binary added to the list).
to_build=()
for b in "${WHAT_BINARIES[@]}"; do
    if [[ $force == 1 || ! -f "$STAMP" || "$(head -n1 "$STAMP")" != "$STAMP_LINE" || ! -x "$BIN_DIR/$b" ]]; then
        to_build+=("$b")
    fi
done
what=""
for b in "${to_build[@]}"; do what+="cmd/$b "; done
log "make WHAT=\"${what% }\" (this takes several minutes)"
t_make=$SECONDS
(
    cd "$SRC"
    export GOPATH="$SCRATCH/gopath" HOME="$SCRATCH/home" CGO_ENABLED=0 \
           GOCACHE="$SCRATCH/gocache" GOFLAGS="" GOTOOLCHAIN=local \
           PATH="$(dirname "$GO"):$PATH"
    make WHAT="${what% }" >&2
)
log "make finished in $((SECONDS - t_make)) s"

out=""
for d in "$SRC"/_output/local/bin/*/*; do
    [[ -x $d/${to_build[0]} ]] && out=$d && break
done
[[ -n $out ]] || die "no binaries under $SRC/_output/local/bin"

# --- 6. install into the cache ------------------------------------------------------------
tmp_bin="$CACHE_DIR/bin.tmp"
rm -rf "$tmp_bin"
mkdir -p "$tmp_bin"
for b in "${WHAT_BINARIES[@]}"; do
    if [[ " ${to_build[*]} " == *" $b "* ]]; then
        [[ -x $out/$b ]] || die "$b was not built"
        cp "$out/$b" "$tmp_bin/$b"
    else
        cp "$BIN_DIR/$b" "$tmp_bin/$b"  # unchanged, kept from the cache
    fi
done
cp "$ETCD" "$tmp_bin/etcd"
"$tmp_bin/kube-apiserver" --version >&2
"$tmp_bin/etcd" --version >&2
{
    echo "$STAMP_LINE"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) go=$("$GO" env GOVERSION) etcd=$("$ETCD" --version 2>/dev/null | awk 'NR==1{print $NF}')"
} >"$tmp_bin/.stamp"
rm -rf "$BIN_DIR"
mv "$tmp_bin" "$BIN_DIR"

log "removing build scratch $SCRATCH"
chmod -R u+w "$SCRATCH" 2>/dev/null || true   # Go's module cache is read-only
rm -rf "$SCRATCH"
log "done in $((SECONDS - t_start)) s: $(ls "$BIN_DIR" | tr '\n' ' ')"
echo "$BIN_DIR"
