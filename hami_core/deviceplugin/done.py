"""When is a pod's allocation done? When every vendor it asks for is (PROTOCOL.md §3).

A pod may ask devices of several vendors: containers asking different vendors
(HAMi#2335) or one container asking two (HAMi#2105). Each vendor's device plugin
answers kubelet's ``Allocate`` for its own resource and empties its own entries in its
``*-devices-to-allocate``; ``hami.io/bind-phase: success`` and the node lock's release
belong to whichever answer leaves nothing waiting, for any vendor.

"Waiting" counts only what kubelet will still ask for: an entry of vendor ``V`` at the
position of a container whose resources ask ``V`` (kubelet calls a device plugin only
for a resource the container requests). An entry nothing will consume (a key the pod's
author wrote on a container that asks nothing of that vendor, a list no device plugin
can decode) never holds the pod "allocating" and the node locked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.errors import HamiError
from hami_core.facts.podrequest import read_pod_request
from hami_core.model import DeviceTypeInfo
from hami_core.plugin import BackendManager
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.pods import pod_ref

log = logging.getLogger(__name__)


def vendors_waiting(
    pod: Mapping[str, Any], manager: BackendManager, *, besides: str = ""
) -> tuple[str, ...]:
    """Vendor keys (other than ``besides``), sorted, that still have a container of ``pod`` waiting
    for its devices: an entry left in the vendor's ``*-devices-to-allocate`` at the
    position (PROTOCOL.md §3 order: init containers first) of a container whose resources
    ask that vendor, as the backends parse them (``hami_parse_request``).

    Never raises: a pod whose requests no longer parse counts every entry left (the
    scheduler parsed them at bind; waiting is the safe side, the lock is then freed once
    the pod runs, PROTOCOL.md §4); an undecodable list counts nothing (no device plugin
    can serve it: ``pending`` skips it).

    Args:
        pod: the pod as last read (or as a write of its annotations returned it).
        manager: every installed backend (their ``DeviceTypeInfo`` name the keys).
        besides: the vendor key the caller decides for itself (its own entries).
    """
    ann: Mapping[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
    lists: dict[str, tuple[int, ...]] = {}
    for dtype in manager.device_types():
        if dtype.vendor == besides:
            continue
        left = _left(pod, ann, dtype)
        if left:
            lists[dtype.vendor] = left
    if not lists:
        return ()
    asked = _asked(pod, manager)
    return tuple(
        sorted(
            vendor
            for vendor, positions in lists.items()
            if asked is None or any(vendor in asked[i] for i in positions if i < len(asked))
        )
    )


def _left(pod: Mapping[str, Any], ann: Mapping[str, str], dtype: DeviceTypeInfo) -> tuple[int, ...]:
    """Positions with an entry left in ``dtype``'s to-allocate list."""
    value = ann.get(dtype.to_allocate_annotation)
    if not value:
        return ()
    try:
        entries = decode_pod_devices(value)
    except HamiError as exc:
        log.warning(
            "pod %s: %s is unreadable, no device plugin can serve it: %s",
            pod_ref(pod),
            dtype.to_allocate_annotation,
            exc,
        )
        return ()
    return tuple(i for i, entry in enumerate(entries) if entry)


def _asked(pod: Mapping[str, Any], manager: BackendManager) -> Sequence[frozenset[str]] | None:
    """Per container (wire order), the vendor keys it asks; None when unreadable."""
    try:
        request = read_pod_request(pod, manager)
    except HamiError as exc:
        log.warning("pod %s: cannot read its requests, counting every entry: %s", pod_ref(pod), exc)
        return None
    return [frozenset(d.vendor for d in c.devices) for c in request.containers]
