"""Reading a Kunlunxin request from a container spec, defaults applied (PROTOCOL.md §1).

Two forms, one vendor key ``XPU`` (so a card cut into vXPUs is never also handed out
whole):

- vXPU: ``kunlunxin.com/vxpu`` (count) with ``kunlunxin.com/vxpu-memory`` (MiB). The
  memory is trimmed **up** to the next partition size: <= 24576 -> 24576 (1/4 card),
  <= 49152 -> 49152 (1/2 card), above -> the whole card. Cores are derived, not asked:
  ``memory x 100 / 98304`` (25, 50, 100). Sources: HAMi 2.10
  ``pkg/device/kunlun/vdevice.go`` (``trimMemory``, ``cores := memnum * 100 /
  KunlunMaxMemory``) and HAMi's Kunlunxin vXPU guide ("device granularity partitioning").
- whole cards: ``kunlunxin.com/xpu`` (count); each card is taken entirely (HAMi
  ``pkg/device/kunlun/device.go``).

Where Kunlunxin has no reason to differ, NVIDIA's rules apply: quantities from
``limits`` then ``requests``; memory unset (absent or 0) -> ``defaultMemory`` (then
trimmed) or the whole card; memory without a count -> ``defaultGPUNum`` vXPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    VendorConfig,
    read_quantity,
    resource_names,
)

from . import VENDOR, options
from .names import DEFAULT_RESOURCES, whole_card_resource


@attrs.frozen(kw_only=True)
class RawRequest:
    """The Kunlunxin quantities a container states (None = not stated).

    Attributes:
        vxpu: vXPUs (``kunlunxin.com/vxpu``).
        memory_mib: memory per vXPU, MiB, as written (before trimming).
        whole: whole cards (``kunlunxin.com/xpu``).
    """

    vxpu: int | None
    memory_mib: int | None
    whole: int | None

    @property
    def empty(self) -> bool:
        return self.vxpu is None and self.memory_mib is None and self.whole is None


def read_raw(container: Mapping[str, Any], config: VendorConfig) -> RawRequest:
    """Read the stated quantities of one container.

    Raises:
        InvalidInputError: a quantity is malformed, fractional, negative or above int32
            (``16Gi`` as MiB); the message names the container, the resource and the value.
    """
    names = resource_names(DEFAULT_RESOURCES, config)

    return RawRequest(
        vxpu=read_quantity(container, names.count),
        memory_mib=read_quantity(container, names.memory),
        whole=read_quantity(container, whole_card_resource(config)),
    )


def trim_memory(memory_mib: int, tiers: Sequence[int]) -> int:
    """The partition size a request of ``memory_mib`` gets: the smallest tier that holds
    it, or the last (the whole card) when none does. ``24576 -> 24576``,
    ``24577 -> 49152``, ``49153 -> 98304`` with the P800 tiers."""
    for tier in tiers[:-1]:
        if memory_mib <= tier:
            return tier
    return tiers[-1]


def derived_cores(tier_mib: int, tiers: Sequence[int]) -> int:
    """Cores (percent) of a partition: ``tier x 100 / whole card`` (25, 50, 100)."""
    return tier_mib * 100 // tiers[-1]


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's Kunlunxin request with defaults, or None when it asks none.

    Returns:
        ``DeviceRequest`` for vendor ``XPU``: a vXPU slice is ``memory_mib`` = the trimmed
        size with ``cores_pct`` derived from it; a whole card (``kunlunxin.com/xpu``, a
        vXPU without memory, or memory above the second-largest size) is ``memory_pct``
        100 with ``cores_pct`` 100.

    Raises:
        InvalidInputError: malformed quantities; both ``kunlunxin.com/xpu`` and the vXPU
            resources in one container; a count of 0 with memory.
        ConfigError: ``memoryTiersMiB`` is not an ascending list of sizes.
    """
    raw = read_raw(container, config)
    if raw.empty:
        return None
    names = resource_names(DEFAULT_RESOURCES, config)
    whole_name = whole_card_resource(config)
    cname = container.get("name", "?")
    if raw.whole is not None:
        if raw.vxpu is not None or raw.memory_mib is not None:
            stated = names.count if raw.vxpu is not None else names.memory
            raise InvalidInputError(
                f"container {cname!r}: {whole_name} asks for whole cards and {stated} for "
                f"vXPU slices; use {whole_name} alone, or {names.count} with {names.memory}"
            )
        if raw.whole == 0:
            return None
        return DeviceRequest(vendor=VENDOR, count=raw.whole, memory_pct=100, cores_pct=100)
    if raw.vxpu == 0:
        if raw.memory_mib:
            raise InvalidInputError(
                f"container {cname!r}: {names.count} is 0 but {names.memory} is requested"
            )
        return None
    tiers = options.memory_tiers(config)
    count = raw.vxpu if raw.vxpu is not None else config.default_count
    memory = raw.memory_mib or config.default_memory_mib
    if memory:
        tier = trim_memory(memory, tiers)
        if tier < tiers[-1]:
            return DeviceRequest(
                vendor=VENDOR, count=count, memory_mib=tier, cores_pct=derived_cores(tier, tiers)
            )
    return DeviceRequest(vendor=VENDOR, count=count, memory_pct=100, cores_pct=100)


def is_whole_card(request: DeviceRequest) -> bool:
    """True for a request that takes whole cards (memory 100 percent, cores 100)."""
    return request.memory_pct == 100 and request.cores_pct == 100
