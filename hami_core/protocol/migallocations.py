"""``hami.io/vgpu-mig-allocations``: the MIG instances of a pod (HAMi 2.10
``pkg/device/nvidia/mig_allocations.go``, PROTOCOL.md §3).

A JSON array, one object per MIG device of the pod: ``containerIndex`` (the container's
entry in the device list: init containers first), ``deviceIndex`` (the device's position
in that entry), ``gpuUUID``, ``profile``, ``placement`` ``{"start", "size"}``; the device
plugin adds the runtime triple ``migUUID``, ``gpuInstanceID``, ``computeInstanceID`` once
the instance exists (all three or none). The scheduler writes it at bind, the device
plugin completes it at Allocate: a pod's author writes none of it (§6).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import attrs

from hami_core.errors import AnnotationError
from hami_core.model import MigPlacement, MigSlot, PodDevices


@attrs.frozen(kw_only=True)
class MigAllocation:
    """One MIG device of a pod (one object of the annotation).

    Attributes:
        container_index: the container's entry in the device list (init first).
        device_index: the device's position inside that entry.
        gpu_uuid: the parent GPU (``GPU-...``).
        slot: profile and placement.
        mig_uuid: ``MIG-...`` once the instance exists, else "".
        gpu_instance_id, compute_instance_id: NVML's GI / CI ids once it exists.
    """

    container_index: int
    device_index: int
    gpu_uuid: str
    slot: MigSlot
    mig_uuid: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    @property
    def realised(self) -> bool:
        """True when the device plugin filled the runtime triple."""
        return bool(self.mig_uuid)


def _int(item: dict[str, Any], key: str, where: str, *, required: bool = True) -> int | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AnnotationError(f"{where}: {key} must be a non-negative integer, got {value!r}")
    return value


def decode_mig_allocations(value: str) -> tuple[MigAllocation, ...]:
    """Decode the annotation; "" is no allocation.

    HAMi's rules (``DecodeMigAllocations``): every entry has its indices, GPU, profile
    and a placement of size > 0; the runtime triple is all there or all absent; no two
    entries for one container and device.

    Raises:
        AnnotationError: not JSON (nesting too deep included), not an array of objects,
            or any rule above broken (the message names the entry).
    """
    if not value:
        return ()
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise AnnotationError(f"not JSON: {exc}") from None
    except RecursionError:  # a pod's author can nest arrays deeper than the parser goes
        raise AnnotationError("not JSON: nested too deep") from None
    if not isinstance(data, list):
        raise AnnotationError("not a JSON array")
    out: list[MigAllocation] = []
    seen: set[tuple[int, int]] = set()
    for i, item in enumerate(data):
        where = f"MIG allocation {i}"
        if not isinstance(item, dict):
            raise AnnotationError(f"{where}: not an object")
        gpu, profile = item.get("gpuUUID"), item.get("profile")
        placement = item.get("placement")
        if not isinstance(gpu, str) or not gpu or not isinstance(profile, str) or not profile:
            raise AnnotationError(f"{where} is incomplete (gpuUUID and profile are required)")
        if not isinstance(placement, dict):
            raise AnnotationError(f"{where} is incomplete (no placement)")
        start = _int(placement, "start", where)
        size = _int(placement, "size", where)
        if not size:
            raise AnnotationError(f"{where}: placement size must be > 0")
        mig_uuid = item.get("migUUID") or ""
        if not isinstance(mig_uuid, str):
            raise AnnotationError(f"{where}: migUUID must be a string")
        gi = _int(item, "gpuInstanceID", where, required=False)
        ci = _int(item, "computeInstanceID", where, required=False)
        if len([v for v in (mig_uuid or None, gi, ci) if v is not None]) not in (0, 3):
            raise AnnotationError(f"{where} has a partial runtime identity")
        ctr = _int(item, "containerIndex", where)
        dev = _int(item, "deviceIndex", where)
        assert ctr is not None and dev is not None and start is not None
        if (ctr, dev) in seen:
            raise AnnotationError(f"duplicate MIG allocation for container {ctr} device {dev}")
        seen.add((ctr, dev))
        out.append(
            MigAllocation(
                container_index=ctr,
                device_index=dev,
                gpu_uuid=gpu,
                slot=MigSlot(profile=profile, placement=MigPlacement(start=start, size=size)),
                mig_uuid=mig_uuid,
                gpu_instance_id=gi,
                compute_instance_id=ci,
            )
        )
    return tuple(out)


def encode_mig_allocations(allocations: Iterable[MigAllocation]) -> str:
    """The annotation value (compact JSON; the runtime triple only when realised)."""
    out = []
    for a in allocations:
        item: dict[str, Any] = {
            "containerIndex": a.container_index,
            "deviceIndex": a.device_index,
            "gpuUUID": a.gpu_uuid,
            "profile": a.slot.profile,
            "placement": {"start": a.slot.placement.start, "size": a.slot.placement.size},
        }
        if a.realised:
            item["migUUID"] = a.mig_uuid
            item["gpuInstanceID"] = a.gpu_instance_id
            item["computeInstanceID"] = a.compute_instance_id
        out.append(item)
    return json.dumps(out, separators=(",", ":"))


def mig_allocations_of(devices: PodDevices) -> tuple[MigAllocation, ...]:
    """The MIG allocations of a placement: every slice that carries a ``mig`` slot, with
    its container and device positions (as HAMi's ``EncodeMigAllocations``)."""
    return tuple(
        MigAllocation(container_index=c, device_index=d, gpu_uuid=dev.uuid, slot=dev.mig)
        for c, ctr in enumerate(devices)
        for d, dev in enumerate(ctr)
        if dev.mig is not None
    )
