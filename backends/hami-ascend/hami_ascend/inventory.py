"""Reading a node's Ascend chips with the vNPU mode the node runs (HAMi 2.10
``pkg/device/ascend/device.go`` ``Fit``: ``hami-vnpu-core``).

The chips are the register annotation ``hami.io/node-register-<x>`` as the core decodes
it (PROTOCOL.md §2). The node's ``hami-vnpu-core`` annotation says whether its chips run
HAMi's soft slicing (``hami-core`` mode): ``"true"`` yes, any other value no; without the
annotation the configuration decides (``hamiVnpuCore``, or ``vnpuMode: hami-core``), as
HAMi's ``vnpus.hamiVnpuCore`` does. Each chip carries the answer as ``custom`` fact
``HAMI_CORE_NODE`` for fit. The annotation is the node's (its device plugin's or its
operator's), never a pod author's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from hami_core.backend import DeviceInfo, annotations_of, registered_devices

from .models import AscendSettings

#: Node annotation: ``"true"`` when the node's chips run hami-core (soft slicing).
NODE_HAMI_CORE_ANNOTATION: Final = "hami-vnpu-core"
#: ``DeviceInfo.custom`` key: ``"true"`` / ``"false"``, the node's answer.
HAMI_CORE_NODE: Final = "hamiVnpuCore"


def runs_hami_core(node: Mapping[str, Any], cfg: AscendSettings) -> bool:
    """Whether ``node``'s chips run hami-core mode (see the module docstring)."""
    value = annotations_of(node).get(NODE_HAMI_CORE_ANNOTATION)
    if value is None:
        return cfg.hami_core_nodes
    return value == "true"


def node_devices(
    node: Mapping[str, Any], register_annotation: str, vendor: str, cfg: AscendSettings
) -> list[DeviceInfo] | None:
    """The node's chips of ``vendor`` with ``HAMI_CORE_NODE``; None without the register
    annotation, or with one too large to read (the core then reports it).

    Raises:
        AnnotationError: a malformed inventory (the core's decoder's message).
    """
    devices = registered_devices(node, register_annotation, vendor=vendor)
    if devices is None:
        return None
    flag = (HAMI_CORE_NODE, "true" if runs_hami_core(node, cfg) else "false")
    return [
        attrs.evolve(d, custom=(*(kv for kv in d.custom if kv[0] != HAMI_CORE_NODE), flag))
        for d in devices
    ]
