"""Reading what a container asks for: quantities, resource names, pod annotations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
