"""Pod annotations Cambricon's dynamic-sMLU device plugin reads, written at bind.

Source: HAMi 2.10 ``pkg/device/cambricon/device.go`` ``PatchAnnotations`` (asserted by
``device_test.go::Test_PatchAnnotations``): with MLUs placed, ``CAMBRICON_DSMLU_ASSIGNED``
is ``"false"`` (the vendor plugin sets it once it created the sMLU) and
``CAMBRICON_DSMLU_PROFILE`` is ``<card index>_<cores>_<memory units>`` of the first
container's first slice that holds one (leading containers without an MLU are
skipped); memory units are 256 MiB (``Usedmem/256``).
"""

from __future__ import annotations

from hami_core.backend import NodeInfo, PodDevices

from .names import MEMORY_UNIT_MIB

ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
PROFILE = "CAMBRICON_DSMLU_PROFILE"


def pod_annotations(node: NodeInfo, devices: PodDevices) -> dict[str, str] | None:
    """``{ASSIGNED: "false", PROFILE: "<index>_<cores>_<units>"}``, or None when no
    container holds an MLU. The card index is the node inventory's ``index`` of the
    slice's device (its position when the node does not list the device)."""
    first = next((c[0] for c in devices if c), None)
    if first is None:
        return None
    index = next((d.index for d in node.devices if d.uuid == first.uuid), 0)
    units = first.memory_mib // MEMORY_UNIT_MIB
    return {ASSIGNED: "false", PROFILE: f"{index}_{first.cores_pct}_{units}"}
