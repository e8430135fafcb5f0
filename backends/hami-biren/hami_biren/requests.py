"""Reading a Biren request (HAMi 2.10 ``pkg/device/biren/device.go``
``GenerateResourceRequests``): ``birentech.com/gpu`` = N devices, each whole in memory
(``MemPercentagereq`` 100) with no compute accounted; N must be a whole number above 0
(HAMi would place a request of 0 nowhere; we deny it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import DeviceRequest, MutateResult, VendorConfig, countshared

from . import VENDOR
from .names import RESOURCES


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's request, or None when it names no ``birentech.com/gpu``.

    Raises:
        InvalidInputError: a count of 0, negative, fractional or above int32.
    """
    return countshared.parse_request(container, config, vendor=VENDOR, resources=RESOURCES)


def mutate(
    container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """Validate and copy the count to limits and requests; None when not this vendor's."""
    return countshared.mutate(container, config, vendor=VENDOR, resources=RESOURCES)
