"""What a GPU in ``mig`` mode has left, as people read it (``hami simulate``, ``hami top``,
the scheduler's metrics).

The device list books each MIG instance its profile's memory and cores (HAMi's wire:
``core`` is the instance's share of the SMs rounded up), so the booked sums misread a
MIG GPU: seven ``1g.10gb`` instances of an A100 book 7 x 15 = 105 % of its compute, and
the 12928 MiB their memory leaves of the GPU's 81920 MiB is memory no instance can use.
Here instead:

- ``held_cores_pct``: the compute slices the instances hold, of the GPU's compute
  slices (seven ``1g`` of seven slices: 100 %);
- ``usable_free_memory_mib``: the most memory further instances could still hold at the
  placements no instance overlaps (a full GPU: 0; an empty A100: 81152, one
  ``7g.80gb``).

Other devices read as booked (``DeviceUsage.used_cores_pct`` / ``free_memory_mib``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from .device import DeviceInfo, DeviceUsage
from .mig import MigPlacement, MigProfile

MIG_MODE = "mig"


def is_mig_gpu(device: DeviceInfo) -> bool:
    """True for a GPU in ``mig`` mode with its profiles (the inventory's ``migProfiles``)."""
    return device.mode == MIG_MODE and bool(device.mig_profiles)


def compute_slices(device: DeviceInfo) -> int:
    """The GPU's compute slices (7 on an A100 or H100, 4 on an A30), read from its
    profiles: ``slice_count x 100 / cores_pct`` of the profile with the most slices
    (its cores are rounded up, so that profile reads it best); 0 when the profiles
    carry no slice count or cores."""
    known = [p for p in device.mig_profiles if p.slice_count > 0 and p.cores_pct > 0]
    if not known:
        return 0
    widest = max(known, key=lambda p: (p.slice_count, p.cores_pct))
    return max(widest.slice_count, round(widest.slice_count * 100 / widest.cores_pct))


def held_cores_pct(usage: DeviceUsage) -> int:
    """Compute held on the device, percent: on a MIG GPU the compute slices of the
    instances held (``mig_in_use``) of ``compute_slices``, at most 100; elsewhere (and on
    a MIG GPU whose profiles carry no slice counts) the booked ``used_cores_pct``, on a
    MIG GPU at most 100."""
    device = usage.device
    if not is_mig_gpu(device):
        return usage.used_cores_pct
    total = compute_slices(device)
    by_name = {p.name: p for p in device.mig_profiles}
    held = [by_name.get(s.profile) for s in usage.mig_in_use]
    if not total or any(p is None or p.slice_count <= 0 for p in held):
        return min(100, usage.used_cores_pct)
    slices = sum(p.slice_count for p in held if p is not None)
    return min(100, round(100 * slices / total))


def instance_cores_pct(device: DeviceInfo, booked: int) -> float:
    """The compute of one MIG instance of ``device`` that the device list books at
    ``booked`` percent (its profile's rounded-up ``core``), percent of the GPU: the
    profile's compute slices of ``compute_slices`` (a ``1g`` of an A100: 14.29, not 15),
    so a full GPU's instances sum to 100. ``booked`` itself where the profiles of that
    ``core`` differ in slices or carry none, and on other devices."""
    total = compute_slices(device) if is_mig_gpu(device) else 0
    slices = {p.slice_count for p in device.mig_profiles if p.cores_pct == booked}
    if not total or len(slices) != 1 or min(slices) <= 0:
        return float(booked)
    return 100 * slices.pop() / total


def usable_free_memory_mib(usage: DeviceUsage) -> int:
    """Free memory, MiB, that pods can still be given on the device: on a MIG GPU the
    most memory a set of non-overlapping instances at placements no held instance
    overlaps could hold (never more than the booked free memory); elsewhere
    ``free_memory_mib``."""
    device = usage.device
    if not is_mig_gpu(device):
        return usage.free_memory_mib
    occupied = tuple(s.placement for s in usage.mig_in_use)
    best = _best_fill(device.mig_profiles, occupied)
    return min(best, usage.free_memory_mib)


def largest_instance_mib(usage: DeviceUsage) -> int:
    """The memory of the largest instance one more pod could get on a MIG GPU now (a
    profile with a placement no held instance overlaps), MiB; 0 when none."""
    occupied = [s.placement for s in usage.mig_in_use]
    return max(
        (
            p.memory_mib
            for p in usage.device.mig_profiles
            if any(not any(c.overlaps(o) for o in occupied) for c in p.placements)
        ),
        default=0,
    )


def _best_fill(profiles: Sequence[MigProfile], occupied: tuple[MigPlacement, ...]) -> int:
    """The most memory non-overlapping instances of ``profiles`` fit beside ``occupied``
    (a search over the free slices: a GPU has at most a few dozen placements)."""
    free = [
        (c.start, c.size, p.memory_mib)
        for p in profiles
        for c in p.placements
        if not any(c.overlaps(o) for o in occupied)
    ]
    free.sort()

    @functools.cache
    def best(i: int, taken_until: int) -> int:
        # placements sorted by start: take placement i (if it starts past what is
        # taken) or skip it
        if i == len(free):
            return 0
        start, size, memory = free[i]
        skip = best(i + 1, taken_until)
        if start < taken_until:
            return skip
        return max(skip, memory + best(i + 1, start + size))

    return best(0, 0)
