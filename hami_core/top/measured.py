"""What the GPUs and the pods on them use, as the node monitors measure it: read from each
``hami monitor``'s own /metrics (``--monitor URL``, repeatable) or from a Prometheus that
scrapes them (``--prometheus URL``). Names and labels: docs/monitoring.md ("Node monitor").

An endpoint that cannot be read does not stop ``hami top`` (nor a ``--watch``): its figures
are missing ("n/a") and ``Measured.unreachable`` says which endpoint and why.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import attrs

from hami_core.errors import HamiError, InvalidInputError
from hami_core.protocol import documents

from . import sources
from .exposition import samples
from .view import DeviceUse, PodUse

MIB = 1024 * 1024

#: Device figures (NVML, host-wide) and per-container figures (the shim's region) read.
HOST_MEMORY = "hami_host_gpu_memory_used_bytes"
HOST_UTIL = "hami_host_gpu_utilization_ratio"
POD_MEMORY = "hami_vgpu_memory_used_bytes"
POD_UTIL = "hami_container_device_utilization_ratio"


@attrs.frozen(kw_only=True)
class Measured:
    """Figures from the node monitors.

    Attributes:
        devices: device UUID -> what its driver reports.
        pods: ``("namespace/pod", device UUID)`` -> what the pod uses of it.
        source: ``monitor``, ``prometheus``, or None when none was given.
        unreachable: one line per endpoint that could not be read (``monitor URL:
            reason``), bounded and printable.
    """

    devices: Mapping[str, DeviceUse] = attrs.field(factory=dict)
    pods: Mapping[tuple[str, str], PodUse] = attrs.field(factory=dict)
    source: str | None = None
    unreachable: tuple[str, ...] = ()


#: Monitors read at once (one thread each): a --watch over many nodes is not the sum of
#: their answer times, nor of their timeouts.
PARALLEL_SCRAPES = 16


def from_monitors(urls: Iterable[str], *, timeout_s: float = 10.0) -> Measured:
    """Scrape each monitor's /metrics page (Prometheus' text format), ``PARALLEL_SCRAPES``
    at once, ``timeout_s`` seconds at most each; a device seen by several keeps the
    largest figure."""
    memory: dict[str, float] = {}
    util: dict[str, float] = {}
    pod_memory: dict[tuple[str, str], float] = {}
    pod_util: dict[tuple[str, str], float] = {}
    unreachable = []
    wanted = {HOST_MEMORY, HOST_UTIL, POD_MEMORY, POD_UTIL}
    urls = list(dict.fromkeys(urls))  # each page once, in the order given
    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_SCRAPES, len(urls)))) as pool:
        pages = list(pool.map(lambda url: _page(url, timeout_s), urls))
    for url, page in zip(urls, pages, strict=True):
        if isinstance(page, HamiError):
            unreachable.append(f"monitor {documents.shown_text(url, 120)}: {page}")
            continue
        for name, labels, value in samples(page, wanted):
            uuid = labels.get("device_uuid")
            if not uuid:
                continue
            if name in (HOST_MEMORY, HOST_UTIL):
                into = memory if name == HOST_MEMORY else util
                into[uuid] = max(into.get(uuid, 0.0), value)
                continue
            namespace, pod = labels.get("namespace"), labels.get("pod")
            if not namespace or not pod:
                continue
            key = (f"{namespace}/{pod}", uuid)
            into_pod = pod_memory if name == POD_MEMORY else pod_util
            into_pod[key] = into_pod.get(key, 0.0) + value  # its containers summed
    return Measured(
        devices={
            uuid: DeviceUse(memory_used_mib=used / MIB, utilization_pct=util.get(uuid, 0.0))
            for uuid, used in memory.items()
        },
        pods=_pods(pod_memory, pod_util),
        source="monitor",
        unreachable=tuple(unreachable),
    )


def from_prometheus(url: str, *, timeout_s: float = 10.0) -> Measured:
    """The same figures from a Prometheus that scrapes the monitors (HTTP API
    ``/api/v1/query``: the devices' as ``sources.usage_from_prometheus``, the pods' summed
    over containers ``by (namespace, pod, device_uuid)``)."""
    by = ("namespace", "pod", "device_uuid")
    try:
        devices = sources.usage_from_prometheus(url, timeout_s=timeout_s)
        memory = sources.query_by(url, f"sum by ({', '.join(by)}) ({POD_MEMORY})", by, timeout_s)
        util = sources.query_by(url, f"sum by ({', '.join(by)}) ({POD_UTIL})", by, timeout_s)
    except HamiError as exc:
        return Measured(source="prometheus", unreachable=(str(exc),))

    def keyed(values: Mapping[tuple[str, ...], float]) -> dict[tuple[str, str], float]:
        return {(f"{ns}/{pod}", uuid): v for (ns, pod, uuid), v in values.items()}

    return Measured(
        devices=devices,
        pods=_pods(keyed(memory), keyed(util)),
        source="prometheus",
    )


def _pods(
    memory: Mapping[tuple[str, str], float], util: Mapping[tuple[str, str], float]
) -> dict[tuple[str, str], PodUse]:
    return {
        key: PodUse(
            memory_used_mib=used / MIB,
            utilization_pct=min(100.0, util[key]) if key in util else None,
        )
        for key, used in memory.items()
    }


def _page(url: str, timeout_s: float) -> str | HamiError:
    """``_scrape``'s page, or the error it raised (for a thread pool's map)."""
    try:
        return _scrape(url, timeout_s)
    except HamiError as exc:
        return exc


def _scrape(url: str, timeout_s: float) -> str:
    """The page at ``url``, whole within ``timeout_s`` and at most
    ``sources.ANSWER_LIMIT_BYTES``.

    Raises:
        HamiError: unreachable, an HTTP error, too long, or too slow (bounded, printable).
    """
    if not url.startswith(("http://", "https://")):
        raise HamiError("not an http:// or https:// URL")
    try:
        deadline = time.monotonic() + timeout_s
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            raw = sources.read_by(resp, deadline, timeout_s)
    except OSError as exc:  # HTTPError, URLError, a timeout, a refused connection
        raise HamiError(documents.shown_text(str(exc), 200)) from None
    except InvalidInputError as exc:
        raise HamiError(f"answer {exc}") from None
    return raw.decode("utf-8", errors="replace")
