#!/usr/bin/env bash
# Generate the Python modules of the kubelet device plugin API (v1beta1) with grpcio-tools.
#
#   hami_core/servers/kubelet/api.proto  ->  api_pb2.py, api_pb2.pyi, api_pb2_grpc.py
#
# The generated files are committed, so installing hami needs no code generator. Run this
# after editing api.proto or when moving to another grpcio-tools; commit the result.
# protoc runs from the repository root, so the generated imports are absolute
# (`from hami_core.servers.kubelet import api_pb2`), while the proto package stays
# `v1beta1`: the gRPC method paths (/v1beta1.DevicePlugin/Allocate) are kubelet's.
#
# Usage: scripts/gen-proto.sh [--check]
#   --check   generate into a scratch dir and fail if the committed files differ
# Env:
#   PYTHON    interpreter with grpcio-tools (default: .venv/bin/python, else python3)
#
# The generated code pins runtime floors: grpcio >= the grpcio-tools version used and
# protobuf >= the protoc version it embeds (both are printed below).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REL="hami_core/servers/kubelet"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi
if ! "$PY" -c 'import grpc_tools.protoc' 2>/dev/null; then
    echo "gen-proto: $PY has no grpcio-tools (pip install 'grpcio-tools>=1.60,<2')" >&2
    exit 1
fi

check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

out="$ROOT"
if [[ $check == 1 ]]; then
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
    mkdir -p "$out/$REL"
fi

cd "$ROOT"
"$PY" -m grpc_tools.protoc \
    --proto_path=. \
    --python_out="$out" \
    --pyi_out="$out" \
    --grpc_python_out="$out" \
    "$REL/api.proto"

tools="$("$PY" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))')"
gencode="$(sed -n 's/^# Protobuf Python Version: //p' "$out/$REL/api_pb2.py")"
echo "gen-proto: grpcio-tools $tools (needs grpcio >= $tools), protobuf gencode $gencode (needs protobuf >= $gencode)" >&2

if [[ $check == 1 ]]; then
    status=0
    for f in api_pb2.py api_pb2.pyi api_pb2_grpc.py; do
        if ! diff -u "$ROOT/$REL/$f" "$out/$REL/$f" >&2; then
            echo "gen-proto: $REL/$f is not what api.proto generates; run scripts/gen-proto.sh" >&2
            status=1
        fi
    done
    exit $status
fi
echo "gen-proto: wrote $REL/api_pb2.py, api_pb2.pyi, api_pb2_grpc.py" >&2
