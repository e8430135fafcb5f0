"""Reading an EXAMPLE request from a container, and defaulting it at admission."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    MutateResult,
    VendorConfig,
    parse_quantity_int,
)

from . import VENDOR
from .names import resources


def _quantity(container: Mapping[str, Any], name: str) -> int | None:
    """A resource's whole-number quantity from ``limits``, else ``requests``."""
    res = container.get("resources") or {}
    for section in ("limits", "requests"):
        values = res.get(section) or {}
        if name in values:
            try:
                return parse_quantity_int(values[name], resource=name)
            except InvalidInputError as exc:
                raise InvalidInputError(f"container {container.get('name')!r}: {exc}") from None
    return None


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's EXAMPLE request with defaults, or None when it asks none.

    A count without memory takes whole devices (``defaultMemory`` when configured);
    memory without a count takes ``defaultGPUNum`` devices.

    Raises:
        InvalidInputError: a malformed quantity, or memory with a count of 0.
    """
    names = resources(config)
    count = _quantity(container, names.count)
    memory = _quantity(container, names.memory)
    if count is None and memory is None:
        return None  # not ours: never claim another vendor's container
    if count == 0:
        if memory:
            raise InvalidInputError(
                f"container {container.get('name')!r}: {names.count} is 0 "
                f"but {names.memory} is {memory}"
            )
        return None
    n = count if count is not None else config.default_count
    memory = memory or config.default_memory_mib
    if memory:
        return DeviceRequest(
            vendor=VENDOR, count=n, memory_mib=memory, cores_pct=config.default_cores_pct
        )
    return DeviceRequest(vendor=VENDOR, count=n, memory_pct=100, cores_pct=100)


def mutate_container(
    container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """Write the defaulted count into ``limits`` and copy ``limits`` to ``requests``,
    so that ``kubectl get pod`` shows what is scheduled; idempotent."""
    try:
        req = parse_request(container, config)
    except InvalidInputError as exc:
        return MutateResult(denial=str(exc))
    if req is None:
        return None
    names = resources(config)
    limits = dict((container.get("resources") or {}).get("limits") or {})
    limits.setdefault(names.count, str(req.count))
    patch: list[dict[str, Any]] = []
    if container.get("resources") is None:
        patch.append({"op": "add", "path": f"{container_path}/resources", "value": {}})
    for section in ("limits", "requests"):
        current = (container.get("resources") or {}).get(section) or {}
        wanted = {**current, **limits}
        if wanted != current:
            patch.append(
                {"op": "add", "path": f"{container_path}/resources/{section}", "value": wanted}
            )
    return MutateResult(patch=tuple(patch))
