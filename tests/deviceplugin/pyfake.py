"""A Python fake of ``hami_nvidia.nvml.Nvml`` for the pure tests (the C stand-in covers
the pynvml path), and a context manager that makes the hami-nvidia hooks use it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

import hami_nvidia.node as nvidia_node
from hami_nvidia.node import NvidiaNode
from hami_nvidia.nvml import NvmlError, NvmlGpu, XidEvent


class PyFakeNvml:
    def __init__(self, gpus: list[NvmlGpu]) -> None:
        self.list = gpus
        self.events: list[XidEvent] = []
        self.dead: set[str] = set()
        self.levels: dict[tuple[int, int], int] = {}
        self.links: dict[int, dict[str, int]] = {}
        self.no_events: list[str] = []
        self._cond = threading.Condition()

    def push(self, event: XidEvent) -> None:
        """Deliver ``event`` to a waiting (or the next) ``wait_event``."""
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def gpus(self) -> list[NvmlGpu]:
        return list(self.list)

    def probe(self, uuid: str) -> None:
        if uuid in self.dead:
            raise NvmlError("nvmlDeviceGetMemoryInfo", 15, "GPU is lost")

    def watch(self) -> list[str]:
        return list(self.no_events)

    def wait_event(self, timeout_ms: int) -> XidEvent | None:
        with self._cond:
            self._cond.wait_for(lambda: bool(self.events), timeout_ms / 1000)
            return self.events.pop(0) if self.events else None

    def common_ancestor(self, index_a: int, index_b: int) -> int:
        return self.levels.get((min(index_a, index_b), max(index_a, index_b)), 40)

    def nvlink_peers(self, index: int) -> Mapping[str, int]:
        return self.links.get(index, {})


@contextlib.contextmanager
def installed(node: NvidiaNode) -> Iterator[NvidiaNode]:
    """Make the hami-nvidia hooks of this process use ``node``."""
    previous = nvidia_node._HOLDER.node
    nvidia_node._HOLDER.node = node
    try:
        yield node
    finally:
        nvidia_node._HOLDER.node = previous
