"""Where ``hami explain`` reads: what ``hami defrag`` reads (nodes, bound and pending
pods, quotas, PodDisruptionBudgets, Jobs, namespaces: one listing), and a lookup for a
pod that reading leaves out (another scheduler's, a finished one)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hami_core.defrag import sources as defrag_sources
from hami_core.defrag.sources import DefragInput
from hami_core.errors import NotFoundError
from hami_core.plugin import BackendManager
from hami_core.simulate.loader import read_documents

from .engine import Lookup


def from_file(path: str | Path, manager: BackendManager) -> tuple[DefragInput, Lookup]:
    """The snapshot's cluster and a lookup over its Pod objects (a Pod the loader
    refused is in ``read.refused``, not in the lookup).

    Raises:
        InvalidInputError: unreadable or malformed file (the message names it).
    """
    read = defrag_sources.from_file(path, manager)
    pods: dict[tuple[str, str], Mapping[str, Any]] = {}
    for obj in _objects(read_documents(Path(path))):
        meta = obj.get("metadata")
        if obj.get("kind") == "Pod" and isinstance(meta, Mapping):
            ref = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
            if "/".join(ref) not in read.refused:  # never the file's object of a refused one
                pods[ref] = obj
    return read, lambda namespace, name: pods.get((namespace, name))


def from_api(kubeconfig: str | None, manager: BackendManager) -> tuple[DefragInput, Lookup]:
    """What the API server lists now, and a lookup that reads one pod.

    Raises:
        HamiError: the API server cannot be reached or refuses (the message says which).
    """
    from kubernetes import client as k8s

    from hami_core.cluster.kube import call, make_api_client

    read = defrag_sources.from_api(kubeconfig, manager)
    core = k8s.CoreV1Api(make_api_client(kubeconfig))

    def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            pod: Mapping[str, Any] = call("read pod", core.read_namespaced_pod, name, namespace)
        except NotFoundError:
            return None
        return pod

    return read, lookup


def _objects(docs: list[Any]) -> list[dict[str, Any]]:
    """Every object of ``docs``, ``List`` items flattened (their kind from the list's)."""
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            out += [
                {**item, "kind": item.get("kind") or kind.removesuffix("List")}
                for item in doc["items"]
                if isinstance(item, dict)
            ]
        else:
            out.append(doc)
    return out
