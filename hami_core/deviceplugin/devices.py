"""What kubelet sees of a node's devices: fake IDs, health, NUMA (PROTOCOL.md §2).

Kubelet counts an extended resource by device IDs, so every physical device is
advertised ``split_count`` times as ``<UUID>-<i>`` (``i`` from 0): a GPU shared by ten
containers is ten kubelet devices. The ID kubelet picks carries no limit; the scheduler's
device list on the pod does (PROTOCOL.md §3). The physical UUID in an ID is still
useful: ``GetPreferredAllocation`` steers kubelet onto the IDs of the GPUs the scheduler
chose, so kubelet's own records (checkpoint, pod-resources API) name the right GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from hami_core.errors import InvalidInputError
from hami_core.model import DeviceInfo

#: Kubelet rejects device IDs longer than this (v1beta1 ``Device.ID``).
MAX_DEVICE_ID_LEN = 63
#: ``Device.health`` values (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go).
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@attrs.frozen(kw_only=True)
class KubeletDevice:
    """One entry of a ``ListAndWatch`` answer.

    Attributes:
        id: ``<UUID>-<i>``.
        healthy: the physical device's health.
        numa: the NUMA node for kubelet's topology manager, or None to send no topology.
    """

    id: str
    healthy: bool
    numa: int | None

    @property
    def health(self) -> str:
        """``Healthy`` / ``Unhealthy``, as kubelet spells it."""
        return HEALTHY if self.healthy else UNHEALTHY


def fake_ids(device: DeviceInfo) -> tuple[str, ...]:
    """``<UUID>-0`` .. ``<UUID>-<split_count - 1>``.

    Raises:
        InvalidInputError: an ID would exceed kubelet's 63 characters.
    """
    ids = tuple(f"{device.uuid}-{i}" for i in range(device.split_count))
    if ids and len(ids[-1]) > MAX_DEVICE_ID_LEN:
        raise InvalidInputError(
            f"device {device.uuid}: kubelet device ID {ids[-1]!r} is longer than "
            f"{MAX_DEVICE_ID_LEN} characters"
        )
    return ids


def physical_uuid(device_id: str) -> str:
    """The physical UUID inside a fake ID: ``GPU-a-3`` -> ``GPU-a``.

    Raises:
        InvalidInputError: the ID has no ``-<number>`` suffix.
    """
    uuid, sep, index = device_id.rpartition("-")
    if not sep or not uuid or not index.isdigit():
        raise InvalidInputError(f"device ID {device_id!r} is not <UUID>-<index>")
    return uuid


def kubelet_devices(devices: Iterable[DeviceInfo]) -> tuple[KubeletDevice, ...]:
    """Every fake ID of every device, in device order, with the device's health and
    NUMA node (devices with ``numa < 0`` are sent without topology)."""
    return tuple(
        KubeletDevice(id=i, healthy=d.healthy, numa=d.numa if d.numa >= 0 else None)
        for d in devices
        for i in fake_ids(d)
    )


def preferred_allocation(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    *,
    wanted_uuids: Sequence[str] = (),
) -> list[str]:
    """Choose ``size`` IDs for one container (``GetPreferredAllocation``).

    Order of preference: every ID of ``must_include``; then, for each UUID of
    ``wanted_uuids`` (the physical devices the scheduler assigned) not yet covered, the
    first available ID on that device; then IDs on physical devices not yet used, so a
    container asking N devices gets N distinct GPUs where possible; then the rest in
    the order given.

    Args:
        available: IDs kubelet may hand out (kubelet's order).
        must_include: IDs kubelet has already decided on (init-container reuse).
        size: how many IDs to return.
        wanted_uuids: physical UUIDs to steer onto, in container order.

    Returns:
        At most ``size`` distinct IDs, all from ``available`` or ``must_include``.
    """
    chosen: list[str] = []
    seen_uuids: set[str] = set()

    def take(device_id: str) -> None:
        if device_id in chosen or len(chosen) >= size:
            return
        chosen.append(device_id)
        seen_uuids.add(_uuid_or_id(device_id))

    for device_id in must_include:
        take(device_id)
    for uuid in wanted_uuids:
        if uuid in seen_uuids:
            continue
        match = next((i for i in available if _uuid_or_id(i) == uuid and i not in chosen), None)
        if match is not None:
            take(match)
    for device_id in available:
        if _uuid_or_id(device_id) not in seen_uuids:
            take(device_id)
    for device_id in available:
        take(device_id)
    return chosen


def _uuid_or_id(device_id: str) -> str:
    try:
        return physical_uuid(device_id)
    except InvalidInputError:
        return device_id
