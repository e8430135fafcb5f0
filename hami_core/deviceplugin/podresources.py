"""What kubelet says it admitted: its PodResources ``List`` as plain values, behind an
interface (``PodResourcesSource``) the device plugin, the bench and the tests share.

Kubelet admits pods one at a time: it adds a pod to its pod manager, then runs the admit
handlers, where the device manager calls the device plugin's ``Allocate`` once per
container (init containers first) and records the device IDs of a container only once
that call has answered. ``List`` reports the pod manager's pods with those records, so
during an ``Allocate`` the pod being admitted is listed and the container being
allocated has no devices of the resource yet (``pending.identify``). The gRPC client is
``hami_core.servers.podresources``; this module imports no gRPC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from hami_core.errors import HamiError


class PodResourcesUnavailableError(HamiError):
    """Kubelet's PodResources API cannot be read (no socket, no answer, refused)."""

    grpc_code = "UNAVAILABLE"


@attrs.frozen(kw_only=True)
class KubeletContainer:
    """One container as kubelet lists it.

    Attributes:
        name: the container name.
        devices: resource name -> the device IDs kubelet gave it (those of a resource
            whose ``Allocate`` has not answered yet are absent).
    """

    name: str
    devices: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class KubeletPod:
    """One pod of kubelet's pod manager (PodResources carries no uid)."""

    namespace: str
    name: str
    containers: tuple[KubeletContainer, ...] = ()

    @property
    def ref(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def devices_of(self, container: str, resource: str) -> tuple[str, ...]:
        """The device IDs of ``resource`` kubelet gave ``container`` (empty: none yet)."""
        for c in self.containers:
            if c.name == container:
                return c.devices.get(resource, ())
        return ()


class PodResourcesSource(Protocol):
    """Kubelet's PodResources ``List``: the real client, or a stand-in."""

    def list(self) -> Sequence[KubeletPod]:
        """Every pod kubelet's pod manager holds, with its containers' devices.

        Raises:
            PodResourcesUnavailableError: the answer cannot be had.
        """
        ...


__all__ = ["KubeletContainer", "KubeletPod", "PodResourcesSource", "PodResourcesUnavailableError"]
