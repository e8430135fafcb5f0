"""Where ``hami top`` reads from: the API server (one list of nodes, pods and quotas,
no watch), a file (a ``kubectl get nodes,pods -A -o yaml`` snapshot or the simple
cluster form of ``hami simulate``), and a Prometheus for the monitors' figures."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from hami_core.cluster.memory import MemoryCluster
from hami_core.errors import HamiError
from hami_core.plugin import BackendManager
from hami_core.simulate.loader import load_cluster

from .view import DeviceUse

MIB = 1024 * 1024


def cluster_from_file(path: str | Path, manager: BackendManager) -> MemoryCluster:
    """A store holding the file's nodes and device-holding pods.

    Raises:
        InvalidInputError: unreadable or malformed file (the message names it).
    """
    return load_cluster(path, manager).to_memory()


def cluster_from_api(kubeconfig: str | None) -> MemoryCluster:
    """A store holding what the API server lists now (nodes, pods, resource quotas).

    Raises:
        HamiError: the API server cannot be reached or refuses (the message says which).
    """
    from kubernetes import client as k8s

    from hami_core.cluster.kube import call, make_api_client

    core = k8s.CoreV1Api(make_api_client(kubeconfig))
    store = MemoryCluster()
    for node in call("list nodes", core.list_node).get("items") or []:
        store.add_node(node)
    for pod in call("list pods", core.list_pod_for_all_namespaces).get("items") or []:
        store.add_pod(pod)
    quotas = call("list resourcequotas", core.list_resource_quota_for_all_namespaces)
    for quota in quotas.get("items") or []:
        store.add_quota(quota)
    return store


def usage_from_prometheus(url: str, *, timeout_s: float = 10.0) -> dict[str, DeviceUse]:
    """Device UUID -> memory in use and utilization, from a Prometheus that scrapes the
    node monitors (``hami_host_gpu_memory_used_bytes``, ``hami_host_gpu_utilization_ratio``;
    HTTP API ``/api/v1/query``).

    Raises:
        HamiError: Prometheus cannot be reached or answers an error.
    """
    memory = _query(url, "max by (device_uuid) (hami_host_gpu_memory_used_bytes)", timeout_s)
    util = _query(url, "max by (device_uuid) (hami_host_gpu_utilization_ratio)", timeout_s)
    return {
        uuid: DeviceUse(memory_used_mib=used / MIB, utilization_pct=util.get(uuid, 0.0))
        for uuid, used in memory.items()
    }


def _query(url: str, expr: str, timeout_s: float) -> dict[str, float]:
    full = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(full, timeout=timeout_s) as resp:
            body = json.loads(resp.read())
    except (OSError, ValueError) as exc:
        raise HamiError(f"Prometheus at {url}: {exc}") from None
    if body.get("status") != "success":
        raise HamiError(f"Prometheus at {url}: {body.get('error') or body}")
    out = {}
    for r in body["data"]["result"]:
        uuid = r["metric"].get("device_uuid")
        if uuid:
            out[str(uuid)] = float(r["value"][1])
    return out
