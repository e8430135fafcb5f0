"""A node's Enflame devices, from where HAMi 2.10 reads them.

- ``GCU`` (``gcu.go`` ``GetNodeDevices``): capacity ``enflame.com/gcu``; GCU ``i`` is
  ``<node>-GCU-<i>``, one container, 100 memory units, 100 cores (memory is not in MiB:
  a whole GCU is always asked as 100 %).
- ``Enflame`` DRS (``device.go`` ``GetNodeDevices``): ``enflame.com/gcu-drs-capacity``,
  ``{"devices": [{"index", "minor", "capacity"}], "profiles": {"<n>g.<m>gb": "<id>"}}``
  from Enflame's DRS device plugin; GCU ``i`` is ``<node>-enflame-drs-<i>`` with
  ``count`` = its slices, memory = the largest profile's GiB x 1024, 100 cores; the
  profiles and minor are kept for fit and bind (HAMi's test: capacity 6, profiles up to
  ``6g.40gb`` -> 40960 MiB).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hami_core.backend import DeviceInfo, annotations_of, capacity_quantities, numbered_devices

from . import DRS, GCU
from .names import DRS_CAPACITY, GCU_RESOURCES
from .profiles import parse_capacity, profiles_of


def whole_gcus(node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    """``GCU`` devices from capacity; None when the node states none."""
    stated = capacity_quantities(node, {GCU_RESOURCES.count: 2**16})
    if not stated or not stated[0]:
        return None
    return numbered_devices(node, GCU, stated[0], split_count=1, memory_mib=100, cores_pct=100)


def drs_gcus(node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    """``Enflame`` DRS devices from ``enflame.com/gcu-drs-capacity``; None without it.

    Raises:
        AnnotationError: see ``profiles.parse_capacity``.
    """
    name = str((node.get("metadata") or {}).get("name", ""))
    value = annotations_of(node).get(DRS_CAPACITY)
    if value is None:
        return None
    devices, raw = parse_capacity(value, node=name)
    largest = profiles_of(raw)
    memory_gib = max(p.memory_gib for p in largest)
    profiles = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    return [
        DeviceInfo(
            uuid=f"{name}-enflame-drs-{idx}",
            vendor=DRS,
            model=DRS,
            index=idx,
            split_count=capacity,
            memory_mib=memory_gib * 1024,
            cores_pct=100,
            custom=(("minor", minor), ("index", str(idx)), ("profiles", profiles)),
        )
        for idx, minor, capacity in devices
    ]


def node_devices(node: Mapping[str, Any], vendor: str) -> list[DeviceInfo] | None:
    """The node's devices of ``vendor`` as HAMi reads them, or None."""
    if vendor == GCU:
        return whole_gcus(node)
    if vendor == DRS:
        return drs_gcus(node)
    return None
