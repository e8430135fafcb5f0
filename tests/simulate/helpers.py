"""Small builders for the simulate tests: files on disk, managers, runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config
from hami_core.simulate.loader import WorkloadPod, Workloads, parse_cluster
from hami_core.simulate.runner import simulate

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def manager(config: dict[str, Any] | None = None) -> BackendManager:
    base = BackendManager.from_entry_points(disabled=[])
    if config is None:
        return base
    return base.with_config(parse_config({"version": "v1", **config}, backends=base.infos))


def write(path: Path, *docs: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return path


def gpu_pod(
    name: str, namespace: str = "default", annotations: dict[str, str] | None = None, **limits: Any
) -> dict[str, Any]:
    """``gpu_pod("p", gpu=1, gpumem=4000)``; keys map to ``nvidia.com/<key>``."""
    res = {f"nvidia.com/{k.replace('_', '-')}": v for k, v in limits.items()}
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if res:
        container["resources"] = {"limits": res}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
    }


def simple_cluster(*nodes: tuple[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"nodes": [{"name": n, "gpus": g} for n, g in nodes]}


def run(
    cluster_doc: Any, pods: list[dict[str, Any]], *, mgr: BackendManager | None = None, **kw: Any
):
    mgr = mgr or manager()
    docs = cluster_doc if isinstance(cluster_doc, list) else [cluster_doc]
    cluster = parse_cluster(docs, source="test", manager=mgr)
    workloads = Workloads(pods=tuple(WorkloadPod(pod=p, source="test") for p in pods))
    return simulate(cluster, workloads, mgr, **kw)
