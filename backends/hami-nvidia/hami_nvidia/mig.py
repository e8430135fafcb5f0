"""MIG on the scheduler side: which profile and placement a request gets on a GPU in
``mig`` mode (HAMi 2.10 ``pkg/device/nvidia/device.go`` ``selectMigCandidate`` and
``mig_topology.go``).

A GPU in ``mig`` mode offers ``migProfiles`` (inventory, PROTOCOL.md §2), each with the
placements an instance of it may take; live pods hold instances (``mig_in_use``, from
``hami.io/vgpu-mig-allocations``). A request takes the profile with the least memory
that still holds the request's memory (then the fewest slices), on the first placement
that overlaps no held instance; placements of ``1g`` and ``3g`` profiles are tried from
the highest start down, the others from the lowest up (HAMi's order: the small and the
half profiles fill from the top, so ``2g``/``4g``/``7g`` keep their low starts free).
No such profile and placement: ``CardMigTopologyInfeasible``.

A request's compute (``nvidia.com/gpucores``) is a floor on the profile's SM share, as
its memory is on the profile's memory: ``gpucores: 50`` takes the smallest profile with at
least 50 % of the SMs (a ``4g`` on an A100), never a smaller one silently (HAMi 2.10 reads
memory only and hands out a ``1g`` at 15 %). A GPU none of whose profiles has that much
compute: ``CardInsufficientCore``. The core's percent check is not applied to a GPU in
``mig`` mode (``cores_capacity``: None): the profiles' rounded-up shares add up past 100
(seven ``1g`` book 105 %) and the placements are the real limit. A request that names a
profile (the NVIDIA device plugin's ``nvidia.com/mig-<profile>`` resources) takes
exactly that profile, N of them for ``nvidia.com/mig-<profile>: N`` (several on one GPU
allowed: ``fit.named_instances`` books each with ``holding`` before choosing the next).

A GPU in ``mig`` mode never gets a shim share: a holder without an instance (a share
from before the GPU's mode changed) makes it infeasible until that pod ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from hami_core.backend import (
    MIG_PROFILE_INFO,
    ContainerDevice,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    MigPlacement,
    MigProfile,
    MigSlot,
    ReasonCode,
)

MIG_MODE = "mig"
#: ``DeviceRequest.custom`` key of a profile the request names (``nvidia.com/mig-1g.10gb``).
PROFILE_KEY = MIG_PROFILE_INFO
#: HAMi ``preferHighMigPlacement``: profiles placed from the highest start down.
_HIGH_FIRST = ("1g.", "3g.")


def ordered_placements(profile: MigProfile) -> list[MigPlacement]:
    """The profile's placements in the order they are tried."""
    high = profile.name.startswith(_HIGH_FIRST)
    return sorted(profile.placements, key=lambda p: -p.start if high else p.start)


def free_placement(profile: MigProfile, occupied: Sequence[MigPlacement]) -> MigPlacement | None:
    """The first placement of ``profile`` that overlaps none of ``occupied``, or None."""
    for candidate in ordered_placements(profile):
        if not any(candidate.overlaps(o) for o in occupied):
            return candidate
    return None


def choose_instance(
    device: DeviceInfo,
    in_use: Sequence[MigSlot],
    memory_mib: int,
    *,
    profile: str = "",
    cores_pct: int = 0,
) -> tuple[MigProfile, MigSlot] | None:
    """The profile and instance a request of ``memory_mib`` MiB and ``cores_pct`` percent
    of the SMs gets on ``device``.

    Args:
        device: a GPU in ``mig`` mode (its ``mig_profiles``).
        in_use: the instances held on it.
        memory_mib: the request's memory per device, MiB.
        profile: the profile the request names, or "" for any.
        cores_pct: the request's compute per device, percent: the profile's share of the
            SMs (``MigProfile.cores_pct``) must be at least this.

    Returns:
        ``(profile, slot)``, or None when no profile with a free placement holds it.
    """
    occupied = [s.placement for s in in_use]
    for p in _candidates(device, memory_mib, profile, cores_pct):
        placement = free_placement(p, occupied)
        if placement is not None:
            return p, MigSlot(profile=p.name, placement=placement)
    return None


def _candidates(
    device: DeviceInfo, memory_mib: int, profile: str, cores_pct: int
) -> list[MigProfile]:
    """The profiles that hold the request, least memory, then fewest slices first."""
    return sorted(
        (
            p
            for p in device.mig_profiles
            if (not profile or p.name == profile)
            and p.memory_mib >= memory_mib
            and p.cores_pct >= cores_pct
        ),
        key=lambda p: (p.memory_mib, p.slice_count, p.cores_pct, p.name),
    )


def cores_capacity(usage: DeviceUsage) -> int | None:
    """The NVIDIA ``FitRules.cores_capacity``: None for a GPU in ``mig`` mode (its
    compute is checked per profile by ``check``), else the inventory's ``devcore``."""
    return None if usage.device.mode == MIG_MODE else usage.device.cores_pct


def check(usage: DeviceUsage, request: DeviceRequest) -> ReasonCode | None:
    """The NVIDIA fit's last per-device step (``FitRules.extra_check``): a request that
    names a profile fits only GPUs in mig mode; on a GPU in mig mode the request needs an
    instance (``choose_instance``, its memory and compute) and the GPU no share outside
    its instances. No profile of the GPU has the compute asked: ``CardInsufficientCore``;
    none with a free placement holds the request: ``CardMigTopologyInfeasible``."""
    dev = usage.device
    named = request.info(PROFILE_KEY)
    if dev.mode != MIG_MODE:
        return ReasonCode.CARD_TYPE_MISMATCH if named else None
    if usage.used_count > len(usage.mig_in_use):
        return ReasonCode.CARD_MIG_TOPOLOGY_INFEASIBLE
    memory = 0 if named else request.memory_on(dev)
    cores = request.cores_pct
    if choose_instance(dev, usage.mig_in_use, memory, profile=named, cores_pct=cores) is None:
        if (
            cores
            and not _candidates(dev, memory, named, cores)
            and _candidates(dev, memory, named, 0)
        ):
            return ReasonCode.CARD_INSUFFICIENT_CORE
        return ReasonCode.CARD_MIG_TOPOLOGY_INFEASIBLE
    return None


def quota_charge(
    request: DeviceRequest, devices: Callable[[], Sequence[DeviceInfo]]
) -> tuple[int, int] | None:
    """What a request that names a profile charges per device against the namespace's
    quotas at admission (``DeviceTypeInfo.quota_request_charge``): the profile's memory
    (MiB) and cores (percent), as ``with_instances`` books them once placed; the least
    of each over the cluster's GPUs that offer the profile (a profile's memory differs
    a little between GPU models). None for other requests, and when no GPU of the
    cluster offers the profile (nothing can place it yet; fit checks the quota again
    with the instance it chooses)."""
    named = request.info(PROFILE_KEY)
    if not named:
        return None
    offered = [
        p for d in devices() if d.mode == MIG_MODE for p in d.mig_profiles if p.name == named
    ]
    if not offered:
        return None
    return min(p.memory_mib for p in offered), min(p.cores_pct for p in offered)


def holding(usage: DeviceUsage, device: ContainerDevice) -> DeviceUsage:
    """``usage`` with ``device`` (an instance just chosen for the same request) held too:
    its memory, cores and MIG slot, so the next instance of the request avoids it."""
    return attrs.evolve(
        usage,
        used_count=usage.used_count + 1,
        used_memory_mib=usage.used_memory_mib + device.memory_mib,
        used_cores_pct=usage.used_cores_pct + device.cores_pct,
        mig_in_use=(*usage.mig_in_use, device.mig) if device.mig else usage.mig_in_use,
    )


def with_instances(
    result: FitResult, usage: Sequence[DeviceUsage], request: DeviceRequest
) -> FitResult:
    """``result`` with each slice on a GPU in mig mode given its instance: the profile's
    memory and cores (what the instance is, as HAMi books it) and the ``mig`` slot."""
    if not result.fits:
        return result
    by_uuid = {u.device.uuid: u for u in usage}
    named = request.info(PROFILE_KEY)
    out = []
    for d in result.devices:
        u = by_uuid.get(d.uuid)
        if u is None or u.device.mode != MIG_MODE:
            out.append(d)
            continue
        memory = 0 if named else request.memory_on(u.device)
        chosen = choose_instance(
            u.device, u.mig_in_use, memory, profile=named, cores_pct=request.cores_pct
        )
        if chosen is None:  # check() said it fits: cannot happen
            return FitResult(device_reasons={d.uuid: ReasonCode.CARD_MIG_TOPOLOGY_INFEASIBLE})
        profile, slot = chosen
        out.append(
            ContainerDevice(
                uuid=d.uuid,
                vendor=d.vendor,
                memory_mib=profile.memory_mib,
                cores_pct=profile.cores_pct,
                mig=slot,
            )
        )
    return attrs.evolve(result, devices=tuple(out))
