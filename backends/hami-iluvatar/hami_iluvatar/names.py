"""Iluvatar resource names and annotation keys, per chip (HAMi 2.10
``pkg/device/iluvatar/device.go`` ``InitIluvatarDevice``, chart ``device-configmap.yaml``).

For chip ``<c>``: resources ``iluvatar.ai/<c>-vgpu``, ``iluvatar.ai/<c>.vMem`` (``MemoryFactor``
256 MiB per unit), ``iluvatar.ai/<c>.vCore`` (percent); node ``hami.io/node-<c>-register``
and ``hami.io/node-handshake-<c>``; pod ``hami.io/<c>-devices-to-allocate`` /
``-allocated``; UUID filters ``hami.io/use-<c>-uuid`` / ``hami.io/no-use-<c>-uuid``.
"""

from __future__ import annotations

from typing import Final

from hami_core.backend import DeviceTypeInfo, ResourceNames, hami_annotation_keys

from . import CHIPS

MEMORY_UNIT_MIB: Final = 256
#: The env var HAMi's webhook adds (its misspelling kept: Iluvatar's runtime reads it).
CONTAINER_NAME_ENV: Final = "SOL_CONTINER_NAME"


def chip_resources(chip: str) -> ResourceNames:
    """The resource names of one chip."""
    return ResourceNames(
        count=f"iluvatar.ai/{chip}-vgpu",
        memory=f"iluvatar.ai/{chip}.vMem",
        cores=f"iluvatar.ai/{chip}.vCore",
        memory_unit_mib=MEMORY_UNIT_MIB,
    )


def device_type(chip: str) -> DeviceTypeInfo:
    """The vendor key of one chip with HAMi's annotation keys."""
    return DeviceTypeInfo(
        vendor=chip,
        resources=chip_resources(chip),
        **hami_annotation_keys(chip),
    )


DEVICE_TYPES: Final = tuple(device_type(c) for c in CHIPS)


def use_uuid(chip: str) -> str:
    return f"hami.io/use-{chip}-uuid"


def nouse_uuid(chip: str) -> str:
    return f"hami.io/no-use-{chip}-uuid"
