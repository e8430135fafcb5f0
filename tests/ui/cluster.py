"""A small cluster for the web view's tests, as a snapshot file: two nodes of two 80 GiB
GPUs; tenants' pods holding slices; a pod named with markup (a snapshot takes any name);
a pending pod too large for any GPU; a quota."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.defrag.world import MIB, gpu_node, pending, running

#: What an attacker names a pod, a namespace or an annotation: script if it ran.
XSS = '<img src=x onerror="window.__xss=(window.__xss||0)+1">'

#: (pod, node, GPU index, MiB, cores %): what the page must draw.
SLICES = [
    ("team-a/train-0", "node-0", 0, 40960, 50),
    ("team-a/train-1", "node-0", 0, 20480, 25),
    ("team-b/infer-0", "node-0", 1, 10240, 10),
    ("team-b/" + XSS, "node-1", 0, 8192, 20),
]
PENDING = "team-a/too-big"


def quota(namespace: str, hard_mib: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-quota", "namespace": namespace},
        "spec": {"hard": {"limits.nvidia.com/gpumem": str(hard_mib)}},
    }


def items() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [gpu_node("node-0"), gpu_node("node-1")]
    for ref, node, index, mib, cores in SLICES:
        ns, name = ref.split("/", 1)
        out.append(running(name, node, (index,), mem=mib, cores=cores, namespace=ns))
    ns, name = PENDING.split("/")
    out.append(pending(name, mem=MIB + 1, cores=10, namespace=ns))
    out.append(quota("team-a", 200000))
    return out


def write_snapshot(path: Path, extra: list[dict[str, Any]] | None = None) -> Path:
    """The cluster as a ``kubectl get ... -o json`` List at ``path``."""
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": items() + (extra or [])})
    )
    return path
