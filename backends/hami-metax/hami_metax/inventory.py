"""A node's MetaX devices, from where HAMi 2.10 reads them.

- ``Metax-GPU`` (``device.go`` ``GetNodeDevices``): the node's capacity
  ``metax-tech.com/gpu`` (MetaX's gpu-device plugin): GPU ``i`` is ``<node>-metax-<i>``,
  one container at a time, 65536 MiB, 100 cores. The node's
  ``metax-tech.com/gpu.topology.losses`` / ``.scores`` (JSON ``{"<n GPUs>": value}``,
  written by MetaX's plugin) are kept on each device for scoring; an unreadable one
  is left out with a warning (the node is then scored as without it).
- ``Metax-SGPU`` (``sdevice.go`` ``getMetaxSDevices``, ``protocol.go``): the JSON array
  ``metax-tech.com/node-gpu-devices`` of MetaX's sgpu-device plugin; per GPU ``uuid``,
  ``model``, ``totalDevCount`` (sharers), ``totalCompute``, ``totalVRam`` (MiB), ``numa``,
  ``healthy``, ``qosPolicy`` (the policy its current sharers run) and ``linkZone``
  (GPUs of one zone > 0 are directly linked); the index is the position.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    AnnotationError,
    DeviceInfo,
    annotations_of,
    capacity_quantities,
    numbered_devices,
)

from . import GPU, SGPU
from .names import (
    GPU_RESOURCES,
    SDEVICES,
    TOPOLOGY_LOSSES,
    TOPOLOGY_SCORES,
    WHOLE_GPU_MEMORY_MIB,
)

log = logging.getLogger(__name__)


def whole_gpus(node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    """``Metax-GPU`` devices from capacity; None when the node states none."""
    stated = capacity_quantities(node, {GPU_RESOURCES.count: 2**16})
    if not stated or not stated[0]:
        return None
    ann = annotations_of(node)
    tables = []
    for key in (TOPOLOGY_LOSSES, TOPOLOGY_SCORES):
        if key not in ann:
            continue
        problem = table_problem(ann[key])
        if problem:
            # Optional: an unreadable table costs its topology score (the core's node
            # score is used instead), never the node's GPUs.
            _warn_once(
                f"node {(node.get('metadata') or {}).get('name', '')}: {key} ignored: {problem}"
            )
            continue
        tables.append((key, ann[key]))
    return numbered_devices(
        node,
        GPU,
        stated[0],
        word="metax",
        split_count=1,
        memory_mib=WHOLE_GPU_MEMORY_MIB,
        cores_pct=100,
        custom=tuple(tables),
    )


#: Largest topology table read (bytes): one entry per GPU count, a few dozen bytes.
MAX_TABLE_BYTES = 4096
_warned: set[str] = set()


def table_problem(value: object) -> str | None:
    """Why a topology table (JSON ``{"<n GPUs>": number}``) cannot be read, or None."""
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if len(value) > MAX_TABLE_BYTES:
        return f"{len(value)} bytes, more than the {MAX_TABLE_BYTES} read"
    try:
        table = json.loads(value)
    except (ValueError, RecursionError) as exc:
        return f"not JSON ({type(exc).__name__})"
    if not isinstance(table, dict):
        return "not a JSON object"
    for n, v in table.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            return f"the value for {n[:20]!r} is not a number"
        try:
            if not math.isfinite(float(v)):
                return f"the value for {n[:20]!r} is not finite"
        except OverflowError:
            return f"the value for {n[:20]!r} is too large"
    return None


def _warn_once(message: str) -> None:
    if message not in _warned:
        if len(_warned) > 1024:
            _warned.clear()
        _warned.add(message)
        log.warning("%s (the node's GPUs stay usable, scored without it)", message)


def _field(item: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = item.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise AnnotationError(f"{where}: {key} must be {kind.__name__}, got {value!r}")
    return value


def sgpus(node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    """``Metax-SGPU`` devices from ``metax-tech.com/node-gpu-devices``; None when the
    node has no such annotation.

    Raises:
        AnnotationError: the value is not a JSON array of device objects with a uuid.
    """
    name = str((node.get("metadata") or {}).get("name", ""))
    value = annotations_of(node).get(SDEVICES)
    if value is None:
        return None
    try:
        items = json.loads(value)
    except json.JSONDecodeError as exc:
        raise AnnotationError(f"node {name}: {SDEVICES} is not valid JSON: {exc}") from None
    if not isinstance(items, list):
        raise AnnotationError(f"node {name}: {SDEVICES} must be a JSON array")
    out = []
    for pos, item in enumerate(items):
        where = f"node {name}: {SDEVICES} device #{pos}"
        if not isinstance(item, dict):
            raise AnnotationError(f"{where}: expected an object")
        uuid = _field(item, "uuid", str, where)
        if not uuid or any(sep in uuid for sep in ",:;"):
            raise AnnotationError(f"{where}: bad uuid {uuid!r}")
        try:
            out.append(
                DeviceInfo(
                    uuid=uuid,
                    vendor=SGPU,
                    model=_field(item, "model", str, where) or SGPU,
                    index=pos,
                    split_count=_field(item, "totalDevCount", int, where),
                    memory_mib=_field(item, "totalVRam", int, where),
                    cores_pct=_field(item, "totalCompute", int, where),
                    numa=_field(item, "numa", int, where),
                    healthy=_field(item, "healthy", bool, where),
                    custom=(
                        ("qosPolicy", _field(item, "qosPolicy", str, where)),
                        ("linkZone", str(_field(item, "linkZone", int, where))),
                        ("bdf", _field(item, "bdf", str, where)),
                    ),
                )
            )
        except ValueError as exc:
            raise AnnotationError(f"{where}: {exc}") from None
    return out


def node_devices(node: Mapping[str, Any], vendor: str) -> list[DeviceInfo] | None:
    """The node's devices of ``vendor`` as HAMi reads them, or None (read the register
    annotation instead)."""
    if vendor == GPU:
        return whole_gpus(node)
    if vendor == SGPU:
        return sgpus(node)
    return None
