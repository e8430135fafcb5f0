"""Resource names and annotation keys of the EXAMPLE vendor."""

from __future__ import annotations

from hami_core.backend import DeviceTypeInfo, ResourceNames, hami_annotation_keys

from . import VENDOR

#: ``example.com/vdevice``: devices per container; ``example.com/vdevice-memory``: MiB each.
DEFAULT_RESOURCES = ResourceNames(
    count="example.com/vdevice",
    memory="example.com/vdevice-memory",
)

#: The annotation keys (PROTOCOL.md §2-3), in HAMi's naming pattern: the node inventory
#: the vendor's device plugin writes (``hami.io/node-register-example``), its handshake
#: (``hami.io/node-handshake-example``), and the pod's device lists written at bind
#: (``hami.io/example-devices-to-allocate`` / ``-allocated``).
DEVICE_TYPE = DeviceTypeInfo(
    vendor=VENDOR,
    resources=DEFAULT_RESOURCES,
    **hami_annotation_keys("example", register_word_last=True),
    # what hami_allocate sets: the webhook denies a tenant's own values of them
    allocate_env=("EXAMPLE_VISIBLE_DEVICES", "EXAMPLE_DEVICE_MEMORY_LIMIT"),
)

#: Pod annotations restricting the devices a pod may use (comma lists of UUIDs).
USE_UUID = ("hami.io/use-example-uuid",)
NOUSE_UUID = ("hami.io/no-use-example-uuid",)
