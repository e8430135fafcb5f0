"""The device list the plugin advertises, shared by discovery and ``ListAndWatch``.

Discovery replaces the list; every ``ListAndWatch`` stream waits for a newer version
and then sends the whole list again (kubelet replaces its view with each message; the
NVIDIA k8s-device-plugin does the same).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import attrs

from hami_core.model import DeviceInfo

from .devices import KubeletDevice, fake_ids, kubelet_devices


class DeviceState:
    """Thread-safe, versioned device list. Version 0 means "not discovered yet"."""

    def __init__(self, *, numa_topology: bool = True) -> None:
        """Args:
        numa_topology: send each device's NUMA node to kubelet (HAMi's per-node
            ``enablenumatopology``; off sends no topology, as HAMi does by default).
        """
        self.numa_topology = numa_topology
        self._cond = threading.Condition()
        self._devices: tuple[DeviceInfo, ...] = ()
        self._version = 0
        self._closed = False

    def update(self, devices: Iterable[DeviceInfo]) -> bool:
        """Replace the list; returns True (and wakes the streams) when it changed."""
        new = tuple(devices)
        with self._cond:
            if self._version and new == self._devices:
                return False
            self._devices = new
            self._version += 1
            self._cond.notify_all()
            return True

    def mark_unhealthy(self) -> bool:
        """Mark every device unhealthy (discovery itself failed); True when it changed."""
        with self._cond:
            current = self._devices
        return self.update(attrs.evolve(d, healthy=False) for d in current)

    @property
    def devices(self) -> tuple[DeviceInfo, ...]:
        with self._cond:
            return self._devices

    @property
    def version(self) -> int:
        with self._cond:
            return self._version

    def known_ids(self) -> frozenset[str]:
        """Every fake ID currently advertised."""
        with self._cond:
            devices = self._devices
        return frozenset(i for d in devices for i in fake_ids(d))

    def wait_newer(
        self, version: int, timeout_s: float
    ) -> tuple[int, tuple[KubeletDevice, ...]] | None:
        """Wait up to ``timeout_s`` for a version newer than ``version``.

        Returns: ``(version, kubelet devices)``, or None on timeout or after ``close``.
        """
        with self._cond:
            self._cond.wait_for(lambda: self._version > version or self._closed, timeout_s)
            if self._closed or self._version <= version:
                return None
            listed = kubelet_devices(self._devices)
            if not self.numa_topology:
                listed = tuple(attrs.evolve(d, numa=None) for d in listed)
            return self._version, listed

    def close(self) -> None:
        """Wake every waiter for good (shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed
