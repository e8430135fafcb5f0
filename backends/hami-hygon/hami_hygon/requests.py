"""Reading a Hygon DCU request from a container spec, defaults applied (PROTOCOL.md §1).

Rules, after HAMi 2.10 ``pkg/device/hygon/device.go`` (``GenerateResourceRequests``), the
HAMi DCU guide ("enable Hygon DCU sharing", Project-HAMi/HAMi ``docs``) and the NVIDIA
defaulting of PROTOCOL.md §1:

- quantities come from ``limits``, else ``requests``; malformed, fractional, negative or
  oversized ones (``16Gi`` as MiB) are refused;
- ``hygon.com/dcumem`` is MiB per DCU, multiplied by the option ``memoryFactor``; unset (or
  0): ``defaultMemory`` if configured, else the whole DCU;
- ``hygon.com/dcucores`` is percent of a DCU; unset: ``defaultCores``, and when that is 0
  (the core's default) HAMi's 100 - a DCU request without cores takes the DCU's compute
  exclusively;
- memory or cores without a count: ``defaultGPUNum`` DCUs;
- a virtual DCU is one DCU: with a count above 1 neither a memory slice nor cores below
  100 may be stated ("每个容器最多只能使用一个虚拟DCU设备" - HAMi's DCU guide; HAMi's
  dcu-vgpu-device-plugin only writes a vDCU configuration for a single-DCU container).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    VendorConfig,
    read_stated,
    resource_names,
)

from . import VENDOR
from .names import DEFAULT_RESOURCES, HAMI_DEFAULT_CORES


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's DCU request with HAMi's defaults, or None when it asks none.

    Raises:
        InvalidInputError: malformed quantities (see ``read_stated``), a count of 0 with
            memory or cores, a memory above int32 after ``memoryFactor``, or several DCUs
            with a slice.
    """
    names = resource_names(DEFAULT_RESOURCES, config)
    raw = read_stated(container, names)
    if raw.empty:
        return None
    cname = container.get("name", "?")
    if raw.count == 0:
        if raw.memory_mib or raw.cores_pct:
            raise InvalidInputError(
                f"container {cname!r}: {names.count} is 0 but memory or cores are requested"
            )
        return None
    count = raw.count if raw.count is not None else config.default_count
    factor = int(config.options["memoryFactor"])
    memory = (raw.memory_mib or 0) * max(1, factor)
    if memory > 2**31 - 1:
        raise InvalidInputError(
            f"container {cname!r}: {names.memory}: {raw.memory_mib} x memoryFactor {factor} "
            "is above the largest accepted value"
        )
    if not memory:
        memory = config.default_memory_mib
    default_cores = config.default_cores_pct or HAMI_DEFAULT_CORES
    cores = raw.cores_pct if raw.cores_pct is not None else default_cores
    if count > 1 and (memory or cores < 100):
        stated = f"{names.memory}: {memory}" if memory else f"{names.cores}: {cores}"
        raise InvalidInputError(
            f"container {cname!r}: a virtual DCU ({stated}) is one DCU, but {names.count} "
            f"is {count}; ask 1 DCU, or whole DCUs without {names.memory} / {names.cores}"
        )
    if memory:
        return DeviceRequest(vendor=VENDOR, count=count, memory_mib=memory, cores_pct=cores)
    return DeviceRequest(vendor=VENDOR, count=count, memory_pct=100, cores_pct=cores)
