"""Kunlunxin resource names, annotation keys and their aliases (PROTOCOL.md §1-3, §5).

Sources:
    - PROTOCOL.md §1: vendor key ``XPU``; ``kunlunxin.com/vxpu`` (count),
      ``kunlunxin.com/vxpu-memory`` (MiB, trimmed up to 24576 / 49152 / 98304), cores
      derived from memory; whole-card mode ``kunlunxin.com/xpu``.
    - HAMi 2.10 ``pkg/device/kunlun/vdevice.go``: ``RegisterAnnos =
      "hami.io/node-register-xpu"``, ``HandshakeAnnos = "hami.io/node-handshake-xpu"``,
      ``hami.io/xpu-devices-to-allocate`` / ``hami.io/xpu-devices-allocated``, the UUID
      filters ``hami.io/use-xpu-uuid`` / ``hami.io/no-use-xpu-uuid``.
    - HAMi 2.10 ``pkg/device/kunlun/device.go``: ``KunlunUseUUID =
      "baidu.com/use-gpuuuid"``, ``KunlunNoUseUUID = "baidu.com/nouse-gpuuuid"``, read by
      both the whole-XPU and the vXPU fit (``device_test.go``
      ``TestKunlunDevices_Fit_UseUUID``, ``TestKunlunVDevices_Fit_UUIDAnnotations``).
    - HAMi 2.10 ``pkg/device/kunlun/config.go``: the default names ``kunlunxin.com/xpu``,
      ``kunlunxin.com/vxpu``, ``kunlunxin.com/vxpu-memory``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import DeviceTypeInfo, ResourceNames, VendorConfig, hami_annotation_keys

from . import VENDOR, options

DEFAULT_RESOURCES = ResourceNames(
    count="kunlunxin.com/vxpu",
    memory="kunlunxin.com/vxpu-memory",
)

DEVICE_TYPE = DeviceTypeInfo(
    vendor=VENDOR,
    resources=DEFAULT_RESOURCES,
    **hami_annotation_keys("xpu", register_word_last=True),
    # whole cards (options.WHOLE_CARD_RESOURCE's default): read, not a typo of the domain
    other_resources=("kunlunxin.com/xpu",),
    # what allocate.py sets: the XPUs xpu-container-runtime exposes, a vXPU's memory limit
    allocate_env=("CXPU_VISIBLE_DEVICES", "CXPU_CONTAINER_MEMORY_LIMIT"),
)

# Pod annotations: HAMi's Kunlunxin names first, then the handbook's aliases (PROTOCOL.md §5).
USE_TYPE = ("hami.io/gpu-type",)
USE_UUID = (
    "hami.io/use-xpu-uuid",
    "baidu.com/use-gpuuuid",
    "hami.io/gpu-uuid-include",
    "hami.io/gpu-uuid-white-list",
)
NOUSE_UUID = ("hami.io/no-use-xpu-uuid", "baidu.com/nouse-gpuuuid", "hami.io/gpu-uuid-exclude")

#: Type-filter tokens that name the vendor rather than a model (``hami.io/gpu-type: kunlunxin``).
VENDOR_TOKENS = frozenset({"kunlunxin", "kunlun", "xpu"})


def whole_card_resource(config: VendorConfig) -> str:
    """The whole-card count resource (``kunlunxin.com/xpu`` unless configured)."""
    return str(config.options[options.WHOLE_CARD_RESOURCE])


def pod_annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    """The pod's annotations (empty when none)."""
    annotations: Mapping[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations
