"""Enflame DRS profiles: parsing the node's capacity and choosing a profile for a request
(HAMi 2.10 ``pkg/device/enflame/device.go`` ``parseProfile``, ``collectDRSProfiles``,
``selectProfileByRequest``, ``normalizeMemoryRequestToGB``).

A profile is named ``<slices>g.<GiB>gb`` (``3g.20gb``: 3 of the GCU's slices, 20 GiB);
its compute is ``ceil(slices x 100 / largest slices)`` percent. A request names a slice
count (``enflame.com/drs-gcu``: the profile of exactly that size) or memory and compute
(the smallest profile, by size then memory, with at least that much of each; memory above
twice the largest profile's GiB is read as MiB).

Sizes are int32 as in HAMi: a profile above 2^31-1 slices or 2^31-1 MiB is not
readable (HAMi's Fit: ``ModeNotFit``, ``TestFit_OversizedProfileRejected``), and a
device capacity above 2^31-1 slices is taken as 2^31-1 (``parseDRSCapacity``).
"""

from __future__ import annotations

import json
import math
import re

import attrs

from hami_core.backend import AnnotationError

INT32_MAX = 2**31 - 1


@attrs.frozen(kw_only=True, order=True)
class Profile:
    """One DRS profile (ordered by size, then memory).

    Attributes:
        size: the GCU slices it takes (``3`` of ``3g.20gb``).
        memory_gib: its memory, GiB (``20`` of ``3g.20gb``).
        name: the profile name, ``<slices>g.<GiB>gb``.
        id: the profile id the DRS device plugin states for it.
        cores_pct: its compute, percent of the GCU (``ceil(size x 100 / largest size)``).
        memory_mib: ``memory_gib`` in MiB (derived).
    """

    size: int
    memory_gib: int
    name: str
    id: str
    cores_pct: int = 0
    memory_mib: int = attrs.field(init=False, eq=False, order=False)

    @memory_mib.default
    def _memory_mib(self) -> int:
        return self.memory_gib * 1024


def parse_name(name: str) -> tuple[int, int]:
    """``"3g.20gb"`` -> ``(3, 20)``; zeros for what cannot be read, and for sizes out of
    int32 (slices above 2^31-1, GiB above (2^31-1) / 1024)."""
    m = re.fullmatch(r"\s*(\d+)g?\s*\.\s*(\d+)?(?:gb)?\s*", name.lower())
    if not m:
        return 0, 0
    size, gib = int(m.group(1)), int(m.group(2) or 0)
    if size > INT32_MAX or gib > INT32_MAX // 1024:
        return 0, 0
    return size, gib


def profiles_of(raw: dict[str, str]) -> list[Profile]:
    """Every readable profile with its compute share, ordered."""
    sizes = {name: parse_name(name) for name in raw}
    largest = max((s for s, _ in sizes.values()), default=0)
    if largest <= 0:
        return []
    return sorted(
        Profile(
            size=s, memory_gib=m, name=n, id=str(raw[n]), cores_pct=math.ceil(s * 100 / largest)
        )
        for n, (s, m) in sizes.items()
        if s > 0 and m > 0
    )


def parse_capacity(value: str, *, node: str) -> tuple[list[tuple[int, str, int]], dict[str, str]]:
    """``enflame.com/gcu-drs-capacity`` -> ``([(index, minor, slices)], profiles)``.

    Raises:
        AnnotationError: not JSON, no readable profile, or a device without a positive
            capacity.
    """
    try:
        spec = json.loads(value)
    except json.JSONDecodeError as exc:
        raise AnnotationError(
            f"node {node}: enflame.com/gcu-drs-capacity is not JSON: {exc}"
        ) from None
    if not isinstance(spec, dict):
        raise AnnotationError(f"node {node}: enflame.com/gcu-drs-capacity must be an object")
    raw = spec.get("profiles") or {}
    if not isinstance(raw, dict) or not profiles_of({str(k): str(v) for k, v in raw.items()}):
        raise AnnotationError(f"node {node}: no valid DRS profiles in enflame.com/gcu-drs-capacity")
    devices = []
    for pos, d in enumerate(spec.get("devices") or []):
        if not isinstance(d, dict):
            raise AnnotationError(f"node {node}: DRS device #{pos} is not an object")
        index = str(d.get("index", pos)).strip()
        try:
            capacity = int(str(d.get("capacity", "")).strip().split(".")[0])
        except ValueError:
            capacity = 0
        if capacity <= 0:
            raise AnnotationError(f"node {node}: DRS device #{pos} has no positive capacity")
        capacity = min(capacity, INT32_MAX)
        idx = int(index) if index.isdigit() else pos
        minor = str(d.get("minor", "")).strip() or str(idx)
        devices.append((idx, minor, capacity))
    return devices, {str(k): str(v) for k, v in raw.items()}


def choose(profiles: list[Profile], *, slices: int, memory: int, cores_pct: int) -> Profile | None:
    """The profile for a request (see the module docstring), or None."""
    if not profiles:
        return None
    if slices:
        return next((p for p in profiles if p.size == slices), None)
    largest_gib = profiles[-1].memory_gib
    gib = math.ceil(memory / 1024) if memory > 2 * largest_gib else memory
    for p in profiles:
        if gib and p.memory_gib < gib:
            continue
        if cores_pct and p.cores_pct < cores_pct:
            continue
        return p
    return None
