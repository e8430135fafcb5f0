"""Pod device-list codec (PROTOCOL.md §3).

One entry per container, all init containers first, then app containers, in spec
order; every entry ends with ``;``; a container without devices is an empty entry.
Inside an entry each device is ``<uuid>,<vendor>,<MiB>,<cores>`` followed by ``:``.
Example: ``;GPU-aaa,NVIDIA,8000,30:GPU-bbb,NVIDIA,8000,30:;;`` is three containers,
the first and the last without devices.
"""

from __future__ import annotations

import functools

from hami_core.errors import AnnotationError
from hami_core.model import ContainerDevice, ContainerDevices, PodDevices


def encode_pod_devices(devices: PodDevices) -> str:
    """Encode one entry per container; empty containers stay as empty entries."""
    return "".join(encode_container_devices(c) + ";" for c in devices)


def encode_container_devices(devices: ContainerDevices) -> str:
    """Encode one container's devices: ``uuid,vendor,MiB,cores:`` per device."""
    for d in devices:
        for part in (d.uuid, d.vendor):
            if any(sep in part for sep in ",:;"):
                raise AnnotationError(f"device field {part!r} contains a separator")
    return "".join(f"{d.uuid},{d.vendor},{d.memory_mib},{d.cores_pct}:" for d in devices)


#: Device lists whose decoding ``decode_pod_devices`` keeps (least recently used first
#: out): the scheduler's state reads each bound pod's list for its node and its quota.
DECODED_LISTS = 4096


@functools.lru_cache(maxsize=DECODED_LISTS)
def decode_pod_devices(value: str) -> PodDevices:
    """Decode a device list, keeping empty entries (never shifting containers).

    The answer (immutable: tuples of frozen ``ContainerDevice``) is kept per distinct
    string, at most ``DECODED_LISTS`` of them; a malformed list is decoded again each time.

    Returns:
        One tuple per container, in wire order (init containers first).

    Raises:
        AnnotationError: a malformed entry; the message names its position.
    """
    if value == "":
        return ()
    entries = value.split(";")
    if entries[-1] == "":
        entries.pop()  # the terminator of the last entry, not a container
    return tuple(decode_container_devices(entry, position=pos) for pos, entry in enumerate(entries))


def decode_container_devices(value: str, *, position: int = 0) -> ContainerDevices:
    """Decode one container's entry (without its ``;``)."""
    items = value.split(":")
    if items[-1] == "":
        items.pop()
    out = []
    for item in items:
        fields = item.split(",")
        where = f"device list entry #{position}"
        if len(fields) != 4:
            raise AnnotationError(
                f"{where}: device {item!r} has {len(fields)} fields, expected 4 "
                "(uuid,vendor,MiB,cores)"
            )
        uuid, vendor, mem, cores = fields
        if not (mem.isdigit() and cores.isdigit()):
            raise AnnotationError(
                f"{where}: device {item!r}: MiB ({mem!r}) and cores ({cores!r}) must be "
                "non-negative integers"
            )
        try:
            out.append(
                ContainerDevice(uuid=uuid, vendor=vendor, memory_mib=int(mem), cores_pct=int(cores))
            )
        except ValueError as exc:
            raise AnnotationError(f"{where}: device {item!r}: {exc}") from exc
    return tuple(out)
