"""Reading what a container asks for: quantities, resource names, pod annotations."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from hami_core.errors import InvalidInputError
from hami_core.model import ResourceNames
from hami_core.protocol.config import VendorConfig
from hami_core.protocol.quantity import INT32_MAX, parse_quantity_int

Container = Mapping[str, Any]


def resource_value(container: Container, name: str) -> object | None:
    """A resource's quantity as written: from ``limits``, else ``requests``; None when
    neither names it (PROTOCOL.md §1, HAMi reads extended resources the same way)."""
    res = container.get("resources") or {}
    for section in ("limits", "requests"):
        values = res.get(section) or {}
        if name in values:
            return values[name]  # type: ignore[no-any-return]
    return None


def stated_quantities(container: Container, names: Iterable[str]) -> dict[str, int | str]:
    """The quantities ``container`` states under ``names`` (limits, else requests), as
    written: an integer stays an integer, anything else (``"16Gi"``, ``"2"``) becomes its
    string; names it does not state are left out. What a vendor whose webhook only
    validates puts in ``MutateResult.resources`` (both ``limits`` and ``requests`` then
    state them, PROTOCOL.md §6); read them with ``read_quantity`` first, this does not
    check them."""
    stated = {n: resource_value(container, n) for n in names}
    return {n: q if isinstance(q, int) else str(q) for n, q in stated.items() if q is not None}


def read_quantity(
    container: Container, name: str, *, maximum: int = INT32_MAX, unit: str = ""
) -> int | None:
    """A resource's whole, non-negative quantity (limits, else requests), or None.

    Args:
        container: one ``v1.Container``.
        name: the resource name, e.g. ``nvidia.com/gpumem``.
        maximum: the largest accepted value (int32 by default, as HAMi stores it; 100 for
            a percentage).
        unit: what one counts (``"MiB"``, ``"%"``), for the message.

    Raises:
        InvalidInputError: a malformed, fractional, negative or too large value; the
            message names the container, the resource and the value
            (``container 'main': nvidia.com/gpumem: '16Gi' ... is more than ...``).
    """
    raw = resource_value(container, name)
    if raw is None:
        return None
    try:
        return parse_quantity_int(raw, resource=name, maximum=maximum, unit=unit)
    except InvalidInputError as exc:
        raise InvalidInputError(f"container {container.get('name', '?')!r}: {exc}") from None


def resource_names(defaults: ResourceNames, config: VendorConfig) -> ResourceNames:
    """The resource names in force: ``defaults`` with the section's overrides
    (``resourceCountName``, ``resourceMemoryName``, ``resourceMemoryPercentageName``,
    ``resourceCoreName``; HAMi's ``device-config.yaml`` keys). A name the vendor does
    not have ("" in ``defaults``) stays "" whatever the section says."""
    return ResourceNames(
        count=config.resource_count_name or defaults.count,
        memory=(config.resource_memory_name or defaults.memory) if defaults.memory else "",
        memory_pct=(
            (config.resource_memory_pct_name or defaults.memory_pct) if defaults.memory_pct else ""
        ),
        cores=(config.resource_cores_name or defaults.cores) if defaults.cores else "",
        memory_unit_mib=defaults.memory_unit_mib,
        cores_alias=defaults.cores_alias,
    )


@attrs.frozen(kw_only=True)
class StatedRequest:
    """The quantities a container states of one vendor's resources, before any default
    (None: not stated).

    Attributes:
        count: devices (``ResourceNames.count``).
        memory_mib: memory per device, in the memory resource's unit (MiB for most).
        memory_pct: memory per device, percent.
        cores_pct: compute per device, percent.
    """

    count: int | None
    memory_mib: int | None = None
    memory_pct: int | None = None
    cores_pct: int | None = None

    @property
    def empty(self) -> bool:
        """The container states none of them (the vendor's parse answers None)."""
        return all(
            v is None for v in (self.count, self.memory_mib, self.memory_pct, self.cores_pct)
        )


def read_stated(container: Container, names: ResourceNames) -> StatedRequest:
    """What ``container`` states under ``names`` (limits, else requests, each read by
    ``read_quantity``): the count, the memory, the memory and core percentages (at most
    100); the cores also under ``names.cores_alias`` when the main name is absent.

    Raises:
        InvalidInputError: a malformed, fractional, negative or too large quantity, or a
            percentage above 100; the message names the container, resource and value.
    """

    def pct(name: str) -> int | None:
        return read_quantity(container, name, maximum=100, unit="%") if name else None

    cores = pct(names.cores)
    if cores is None and names.cores_alias and names.cores_alias != names.cores:
        cores = pct(names.cores_alias)
    return StatedRequest(
        count=read_quantity(container, names.count),
        memory_mib=read_quantity(container, names.memory, unit="MiB") if names.memory else None,
        memory_pct=pct(names.memory_pct),
        cores_pct=cores,
    )


def annotations_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    """The pod's annotations; empty when it has none or they are not a mapping."""
    meta = pod.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return {}
    ann = meta.get("annotations") or {}
    return ann if isinstance(ann, Mapping) else {}


def first_annotation(annotations: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    """The value of the first of ``keys`` present in ``annotations`` (HAMi often accepts
    an annotation under a new and an old key)."""
    return next((annotations[k] for k in keys if k in annotations), None)
