"""Reading an AMD request (HAMi 2.10 ``pkg/device/amd`` ``GenerateResourceRequests`` and
``MutateAdmission``; ``docs/develop/amd-vgpu.md`` §5).

- ``amd.com/gpu`` > 0 distinct GPUs; memory or cores without it are refused naming both
  resources (HAMi's webhook takes such a pod and its ``GenerateResourceRequests`` reads
  no request, so it is scheduled with no GPU: ``amd/device_test.go``
  ``Test_MutateAdmission`` "gpu memory in limits", ``Test_GenerateResourceRequests``
  "no gpu limits -> empty");
- ``amd.com/gpumem`` MiB per GPU; unset: the whole GPU;
- ``amd.com/gpucores`` an integer percentage of the GPU's compute units, 1..100
  (0 and above 100 are refused, as HAMi's webhook does); unset: 100.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    MutateResult,
    VendorConfig,
    denies_invalid_input,
    read_quantity,
    resource_value,
    stated_quantities,
)

from . import VENDOR
from .names import resources


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's AMD request per GPU, or None when it names no AMD resource.

    Raises:
        InvalidInputError: a count of 0, a malformed or oversized quantity, cores
            outside 1..100, or memory or cores without ``amd.com/gpu``; the message
            names the container, resource and value.
    """
    names = resources(config)
    where = f"container {container.get('name', '?')!r}"
    if resource_value(container, names.count) is None:
        alone = [
            n for n in (names.memory, names.cores) if n and resource_value(container, n) is not None
        ]
        if alone:
            raise InvalidInputError(
                f"{where}: {' and '.join(alone)} without {names.count}: state the number of "
                f"AMD GPUs in {names.count} (memory and cores are per GPU)"
            )
        return None
    count = read_quantity(container, names.count)
    if not count:
        raise InvalidInputError(f"{where}: {names.count} must be greater than 0")
    memory = read_quantity(container, names.memory) or 0
    cores = read_quantity(container, names.cores)
    if cores is not None and not 1 <= cores <= 100:
        raise InvalidInputError(
            f"{where}: {names.cores} must be an integer percentage between 1 and 100, got {cores}"
        )
    cores_pct = 100 if cores is None else cores
    if memory:
        return DeviceRequest(vendor=VENDOR, count=count, memory_mib=memory, cores_pct=cores_pct)
    return DeviceRequest(vendor=VENDOR, count=count, memory_pct=100, cores_pct=cores_pct)


@denies_invalid_input
def mutate(
    container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """Validate and copy the stated AMD quantities to requests (HAMi's webhook only
    validates); None without ``amd.com/gpu``, a denial for an invalid one."""
    if parse_request(container, config) is None:
        return None
    return MutateResult(resources=stated_quantities(container, resources(config).all()))
