"""Fit and bind annotations for Enflame devices (HAMi 2.10 ``pkg/device/enflame``).

Whole GCUs: the core's checks, one container per GCU; a GCU in use is
``ExclusiveDeviceAllocateConflict`` as in HAMi's ``gcu.go`` (the core would name the
GCU's one sharer slot ``CardTimeSlicingExhausted``).

DRS: the request is first resolved to a profile of the node (``profiles.choose``; none:
``ModeNotFit`` on every GCU, as HAMi); the slice then takes the
profile's memory (GiB x 1024) and compute share, checked by the core on each GCU with the
UUID filters ``enflame.com/use-gpuuuid`` / ``nouse-gpuuuid``. A GCU's sharer slots are
its slices (HAMi counts a container as its slice count; here each container takes one
slot and the compute share bounds the slices).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from hami_core.backend import (
    DeviceInfo,
    DeviceRequest,
    FilterKeys,
    FitCall,
    FitResult,
    NodeInfo,
    PodDevices,
    ReasonCode,
    VendorFit,
)

from . import DRS
from .names import (
    ASSIGNED,
    ASSIGNED_CONTAINERS,
    ASSIGNED_ID,
    ASSIGNED_INDEX,
    ASSIGNED_MINOR,
    ASSIGNED_TIME,
    NOUSE_UUID,
    REQUEST_MEMORY,
    REQUEST_SIZE,
    SLICE,
    USE_UUID,
)
from .profiles import Profile, choose, profiles_of


def node_profiles(devices: Sequence[DeviceInfo]) -> list[Profile]:
    """The DRS profiles the node's GCUs publish (the first GCU's; HAMi merges them)."""
    merged: dict[str, str] = {}
    for d in devices:
        raw = d.info("profiles")
        if raw:
            merged.update(json.loads(raw))
    return profiles_of(merged)


def drs_sized(call: FitCall[None]) -> FitResult:
    """Whole GCUs: the core's fit, a taken GCU ``ExclusiveDeviceAllocateConflict``. DRS:
    the request resized to the node's profile first (``profiles.choose``; none: every GCU
    ``ModeNotFit``, as HAMi)."""
    request = call.request
    if request.vendor != DRS:
        return _gcu_in_use_is_exclusive(call.fit())
    profile = choose(
        node_profiles([u.device for u in call.usage]),
        slices=int(request.info(SLICE, "0")),
        memory=int(request.info(REQUEST_MEMORY, "0")),
        cores_pct=request.cores_pct,
    )
    if profile is None:
        return FitResult(
            device_reasons={u.device.uuid: ReasonCode.MODE_NOT_FIT for u in call.usage}
        )
    sized = DeviceRequest(
        vendor=DRS,
        count=request.count,
        memory_mib=profile.memory_mib,
        cores_pct=min(100, profile.cores_pct),
    )
    return call.fit(request=sized)


#: ``fit(request, node, usage, pod, policy)``: one container's Enflame request on the node,
#: or why not.
fit: VendorFit[None] = VendorFit(
    filters=FilterKeys(use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID), place=drs_sized
)


def _gcu_in_use_is_exclusive(result: FitResult) -> FitResult:
    """A whole GCU holds one container: taken, it is HAMi's ``ExclusiveDeviceAllocateConflict``."""
    reasons = {
        uuid: ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        if code is ReasonCode.CARD_TIME_SLICING_EXHAUSTED
        else code
        for uuid, code in result.device_reasons.items()
    }
    return attrs.evolve(result, device_reasons=reasons)


def containers_in_wire_order(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Init containers, then app containers, in spec order (PROTOCOL.md §3)."""
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def bind_annotations(
    pod: Mapping[str, Any],
    node: NodeInfo,
    devices: PodDevices,
    *,
    clock_ns: Callable[[], int] = time.time_ns,
) -> dict[str, str]:
    """What Enflame's DRS plugin reads (HAMi ``PatchAnnotations``): ``enflame.com/gcu-assigned``
    ``false``, ``enflame.com/gcu-assigned-time`` (ns), the first slice's GCU index (also
    as ``-assigned-id``), minor and slice count, and ``assigned-containers`` (JSON:
    container name -> ``{"allocated": false, "request": <slices>, "profileID",
    "profileName"}``). Empty without DRS slices."""
    by_uuid = {d.uuid: d for d in node.devices}
    profiles = node_profiles([d for d in node.devices if d.vendor == DRS])
    containers = containers_in_wire_order(pod)
    out: dict[str, str] = {}
    assigned: dict[str, dict[str, Any]] = {}
    for pos, slices in enumerate(devices):
        if not slices:
            continue
        first = slices[0]
        info = by_uuid.get(first.uuid)
        profile = next(
            (
                p
                for p in profiles
                if p.memory_mib == first.memory_mib and min(100, p.cores_pct) == first.cores_pct
            ),
            None,
        )
        size = profile.size if profile is not None else 1
        name = str(containers[pos].get("name", "")) if pos < len(containers) else f"container-{pos}"
        entry: dict[str, Any] = {"allocated": False, "request": size}
        if profile is not None:
            entry.update(profileID=profile.id, profileName=profile.name)
        assigned[name] = entry
        if info is not None:
            out.setdefault(ASSIGNED_INDEX, info.info("index", str(info.index)))
            out.setdefault(ASSIGNED_ID, info.info("index", str(info.index)))
            out.setdefault(ASSIGNED_MINOR, info.info("minor", str(info.index)))
        out.setdefault(REQUEST_SIZE, str(size))
    if not assigned:
        return {}
    out[ASSIGNED] = "false"
    out[ASSIGNED_TIME] = str(clock_ns())
    out[ASSIGNED_CONTAINERS] = json.dumps(assigned, separators=(",", ":"))
    return out
