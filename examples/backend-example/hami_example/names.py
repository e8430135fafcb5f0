"""Resource names and annotation keys of the EXAMPLE vendor."""

from __future__ import annotations

from hami_core.backend import DeviceTypeInfo, ResourceNames

from . import VENDOR

#: ``example.com/vdevice``: devices per container; ``example.com/vdevice-memory``: MiB each.
DEFAULT_RESOURCES = ResourceNames(
    count="example.com/vdevice",
    memory="example.com/vdevice-memory",
)

#: The annotation keys (PROTOCOL.md §2-3): the node inventory the vendor's device plugin
#: writes, its handshake, and the pod's device lists written at bind.
DEVICE_TYPE = DeviceTypeInfo(
    vendor=VENDOR,
    resources=DEFAULT_RESOURCES,
    register_annotation="hami.io/node-register-example",
    handshake_annotation="hami.io/node-handshake-example",
    to_allocate_annotation="hami.io/example-devices-to-allocate",
    allocated_annotation="hami.io/example-devices-allocated",
)

#: Pod annotations restricting the devices a pod may use (comma lists of UUIDs).
USE_UUID = ("hami.io/use-example-uuid",)
NOUSE_UUID = ("hami.io/no-use-example-uuid",)
