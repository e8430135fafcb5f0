"""Where ``hami top`` reads from: the API server (one list of nodes, pods and quotas,
no watch), a file (a ``kubectl get nodes,pods -A -o yaml`` snapshot or the simple
cluster form of ``hami simulate``), and a Prometheus for the monitors' figures."""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import IO

from hami_core.cluster.memory import MemoryCluster
from hami_core.errors import HamiError, InvalidInputError
from hami_core.plugin import BackendManager
from hami_core.protocol import documents
from hami_core.simulate.loader import load_cluster

from .view import DeviceUse

MIB = 1024 * 1024


def cluster_from_file(
    path: str | Path, manager: BackendManager, *, warnings: list[str] | None = None
) -> MemoryCluster:
    """A store holding the file's nodes and device-holding pods; what the loader left
    out (an object its API server could not have stored), one line each, is appended
    to ``warnings`` when given, for the caller to say.

    Raises:
        InvalidInputError: unreadable or malformed file (the message names it).
    """
    loaded = load_cluster(path, manager)
    if warnings is not None:
        warnings.extend(loaded.warnings)
    return loaded.to_memory()


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

    A sample that no GPU can have (``NaN``, ``±Inf``, which Prometheus writes for an
    empty or overflowing expression, or a negative value) is left out: that device
    then shows no figure, and ``-o json`` stays JSON.

    Raises:
        HamiError: Prometheus cannot be reached, answers an error, or does not answer
            whole within ``timeout_s`` (seconds, for each query in all).
    """
    memory = _query(url, "max by (device_uuid) (hami_host_gpu_memory_used_bytes)", timeout_s)
    util = _query(url, "max by (device_uuid) (hami_host_gpu_utilization_ratio)", timeout_s)
    return {
        uuid: DeviceUse(memory_used_mib=used / MIB, utilization_pct=util.get(uuid, 0.0))
        for uuid, used in memory.items()
    }


#: Bytes of one Prometheus answer read at most (an instant vector of 10 000 GPUs is ~3 MiB).
ANSWER_LIMIT_BYTES = 32 * 1024 * 1024


def _query(url: str, expr: str, timeout_s: float) -> dict[str, float]:
    """``device_uuid`` -> value of an instant-vector query (``query_by``)."""
    return {key[0]: v for key, v in query_by(url, expr, ("device_uuid",), timeout_s).items()}


def query_by(
    url: str, expr: str, labels: tuple[str, ...], timeout_s: float
) -> dict[tuple[str, ...], float]:
    """The values of ``labels`` -> value of an instant-vector query (a sample missing one
    of them, or of a value no quantity has, is left out).

    The answer is someone else's: read up to ``ANSWER_LIMIT_BYTES``, parsed with
    ``documents``' bounds, and any shape other than Prometheus' documented one
    (``{"status": "success", "data": {"resultType": "vector", "result": [{"metric":
    {...}, "value": [<time>, "<number>"]}]}}``, HTTP API ``/api/v1/query``) refused.

    Raises:
        HamiError: unreachable, an error answer, or a malformed one (the message bounded
            and printable).
    """
    full = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    where = f"Prometheus at {documents.shown_text(url, 120)}"
    if not url.startswith(("http://", "https://")):  # urllib: a ValueError, or a local file
        raise HamiError(f"{where}: not an http:// or https:// URL")
    try:
        deadline = time.monotonic() + timeout_s
        with urllib.request.urlopen(full, timeout=timeout_s) as resp:
            raw = read_by(resp, deadline, timeout_s)
    except urllib.error.HTTPError as exc:  # Prometheus answers errors as JSON with 4xx/5xx
        raw = _error_body(exc)
        if not raw:
            raise HamiError(
                f"{where}: HTTP {exc.code} {documents.shown_text(str(exc.reason))}"
            ) from None
    except OSError as exc:
        raise HamiError(f"{where}: {documents.shown_text(str(exc))}") from None
    except InvalidInputError as exc:
        raise HamiError(f"{where}: answer {exc}") from None
    try:
        body = documents.load_json(raw)
    except InvalidInputError as exc:
        raise HamiError(f"{where}: the answer is not Prometheus' JSON: {exc}") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else None
        shown = documents.shown_text(str(error)) if error else documents.shown(body)
        raise HamiError(f"{where}: {shown}")
    try:
        out = {}
        for r in body["data"]["result"]:
            key = tuple(str(r["metric"].get(label) or "") for label in labels)
            value = float(r["value"][1])
            if all(key) and math.isfinite(value) and value >= 0:
                out[key] = value
        return out
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
        raise HamiError(
            f"{where}: malformed answer to {expr!r} ({type(exc).__name__}: "
            f"{documents.shown_text(str(exc), 80)})"
        ) from None


def read_by(stream: IO[bytes], deadline: float, timeout_s: float) -> bytes:
    """The whole answer, at most ``ANSWER_LIMIT_BYTES``, by ``deadline`` (monotonic):
    urllib's timeout bounds each socket read only, so an answer trickled a byte at a
    time would otherwise hold ``hami top`` for as long as the sender likes.

    Raises:
        InvalidInputError: longer than the bound, or not whole by the deadline.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise InvalidInputError(f"not whole within {timeout_s:g}s; gave up")
        chunk = stream.read1(65536)  # type: ignore[attr-defined]
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > ANSWER_LIMIT_BYTES:
            raise InvalidInputError(f"larger than {ANSWER_LIMIT_BYTES} bytes; refused")
        chunks.append(chunk)


def _error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return documents.read_limited(exc, limit_bytes=ANSWER_LIMIT_BYTES)
    except (OSError, InvalidInputError):
        return b""
