"""Cambricon resource names, annotation keys and their aliases (PROTOCOL.md §1-3, §5).

Sources:
    - PROTOCOL.md §1: vendor key ``MLU``; ``cambricon.com/vmlu`` (count),
      ``cambricon.com/mlu.smlu.vmemory`` (memory, unit 256 MiB),
      ``cambricon.com/mlu.smlu.vcore`` (cores, percent).
    - HAMi 2.10 ``pkg/device/cambricon/device.go``: the pod keys
      ``hami.io/cambricon-mlu-devices-to-allocate`` / ``-allocated``, the filter
      annotations ``cambricon.com/use-mlutype``, ``cambricon.com/nouse-mlutype``,
      ``cambricon.com/use-gpuuuid``, ``cambricon.com/nouse-gpuuuid``, and the 256 MiB unit
      (``memnum = memnums * 256``).
    - HAMi's device-plugin protocol document (its registration example) and HAMi's
      earlier ``pkg/device/cambricon`` (``RegisterAnnos``, ``HandshakeAnnos``): the node keys
      ``hami.io/node-mlu-register`` and ``hami.io/node-handshake-mlu``.
    - HAMi's Cambricon guide ("specify device type"): with ``--enable-device-type`` the
      Cambricon device plugin names resources after the model, e.g.
      ``cambricon.com/mlu370.smlu.vmemory`` / ``cambricon.com/mlu370.smlu.vcore``; the
      handbook's seed example uses those names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DeviceTypeInfo,
    DeviceUsage,
    FitRules,
    ResourceNames,
    hami_annotation_keys,
)

from . import VENDOR

#: MiB per unit of the memory resource (HAMi: ``memnum = memnums * 256``; Cambricon's
#: dynamic-sMLU plugin ``min-dsmlu-unit=256``).
MEMORY_UNIT_MIB = 256

#: Cores booked when a request states no ``vcore`` and ``defaultCores`` is 0: HAMi 2.10
#: ``pkg/device/cambricon/device.go`` ``GenerateResourceRequests`` (``corenum := 100``).
HAMI_DEFAULT_CORES = 100

DEFAULT_RESOURCES = ResourceNames(
    count="cambricon.com/vmlu",
    memory="cambricon.com/mlu.smlu.vmemory",
    cores="cambricon.com/mlu.smlu.vcore",
    memory_unit_mib=MEMORY_UNIT_MIB,
)


def cores_capacity(usage: DeviceUsage) -> int | None:
    """An MLU's compute in percent; None (not accounted) where the inventory says 0:
    HAMi's documented ``hami.io/node-mlu-register`` example registers MLU370-X4 cards
    with ``devcore`` 0, so cores are not checked on such a card."""
    return usage.device.cores_pct or None


DEVICE_TYPE = DeviceTypeInfo(
    vendor=VENDOR,
    resources=DEFAULT_RESOURCES,
    **hami_annotation_keys("mlu", "cambricon-mlu"),
    fit_rules=FitRules(cores_capacity=cores_capacity),
    # model-qualified names (model_qualified below) are read too, not typos of the domain
    other_resources=("cambricon.com/*.smlu.vmemory", "cambricon.com/*.smlu.vcore"),
    # what allocate.py sets: the cards Cambricon's container runtime exposes
    allocate_env=("CAMBRICON_VISIBLE_DEVICES",),
)

# Pod annotations: HAMi's Cambricon names first, then the handbook's aliases (PROTOCOL.md §5).
USE_TYPE = ("cambricon.com/use-mlutype", "hami.io/gpu-type")
NOUSE_TYPE = ("cambricon.com/nouse-mlutype",)
USE_UUID = ("cambricon.com/use-gpuuuid", "hami.io/gpu-uuid-include", "hami.io/gpu-uuid-white-list")
NOUSE_UUID = ("cambricon.com/nouse-gpuuuid", "hami.io/gpu-uuid-exclude")

#: Type-filter tokens that name the vendor rather than a model: the handbook selects MLUs
#: with ``hami.io/gpu-type: "cambricon"``.
VENDOR_TOKENS = frozenset({"cambricon", "mlu"})

#: The model part of the generic names (``cambricon.com/mlu.smlu.vmemory``): no model.
GENERIC_MODEL = "mlu"


def qualified_name_pattern(names: ResourceNames) -> re.Pattern[str]:
    """Pattern of the model-qualified names in the domain of the configured memory name.

    ``cambricon.com/mlu370.smlu.vmemory`` -> model ``mlu370``, kind ``vmemory``.
    """
    domain = names.memory.split("/", 1)[0] if "/" in names.memory else "cambricon.com"
    return re.compile(
        rf"^{re.escape(domain)}/(?P<model>[A-Za-z0-9][A-Za-z0-9-]*)\.smlu\.(?P<kind>vmemory|vcore)$"
    )


def qualified_name(names: ResourceNames, model: str, kind: str) -> str:
    """The model-qualified name of ``kind`` (``vmemory`` or ``vcore``) for ``model``."""
    domain = names.memory.split("/", 1)[0] if "/" in names.memory else "cambricon.com"
    return f"{domain}/{model}.smlu.{kind}"


def pod_annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    """The pod's annotations (empty when none)."""
    annotations: Mapping[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations
