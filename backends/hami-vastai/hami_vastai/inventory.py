"""Vastai's inventory with its die facts (HAMi 2.10 ``pkg/device/vastai/device.go``
``GetNodeDevices``).

``hami.io/node-va-register`` is the JSON inventory of PROTOCOL.md §2; Vastai's device
plugin adds ``customInfo`` per device: ``DeviceStrategy`` (``die`` when each device is a
die of an AI card) and ``AIC`` (the card's id). The core's decoder reads the common
fields; this module keeps those two on each device (``DeviceInfo.custom``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.backend import DeviceInfo, annotations_of, decode_inventory

from . import VENDOR
from .names import AIC, DEVICE_TYPE, STRATEGY


def node_devices(node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    """The node's Vastai devices with their die facts; None without a JSON inventory
    (the core then reads the annotation, legacy form included).

    Raises:
        AnnotationError: a malformed inventory (the core's decoder's message).
    """
    name = str((node.get("metadata") or {}).get("name", ""))
    value = annotations_of(node).get(DEVICE_TYPE.register_annotation)
    if value is None or not value.strip().startswith("["):
        return None
    devices = decode_inventory(value, node=name, vendor=VENDOR)
    items = json.loads(value)
    out = []
    for device, item in zip(devices, items, strict=True):
        info = item.get("customInfo") if isinstance(item, dict) else None
        custom = tuple(
            (k, str(info[k])) for k in (STRATEGY, AIC) if isinstance(info, dict) and k in info
        )
        out.append(attrs.evolve(device, custom=custom))
    return out
