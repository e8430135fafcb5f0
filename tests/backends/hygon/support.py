"""Test support for the Hygon backend: a fake ``hy-smi`` and a fake sysfs tree."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SAMPLES = Path(__file__).parent / "samples"


class FakeHySmi:
    """``CommandRunner`` answering ``hy-smi`` from ``samples/`` for one node
    (``k100``: JSON works; ``z100l`` and ``bw150``: only the text form); ``None``: not
    installed."""

    def __init__(self, layout: str | None) -> None:
        self.layout = layout
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> str | None:
        self.calls.append(tuple(argv))
        if self.layout is None:
            return None
        args = list(argv[1:])
        if args[:2] == ["virtual", "-show-device-info"]:
            name = f"hy-smi-virtual-{self.layout}.txt"
        elif "--json" in args:
            name = f"hy-smi-query-{self.layout}.json"
        elif "--showbus" in args:
            name = f"hy-smi-query-{self.layout}.txt"
        else:
            return None
        path = SAMPLES / name
        return path.read_text() if path.exists() else None


def make_sysfs(root: Path, devices: dict[str, tuple[int, int]]) -> Path:
    """A sysfs tree where PCI device ``<bus>`` has ``drm/card<N>``, ``drm/renderD<128+N>``
    and ``numa_node`` (``devices``: bus -> (card number, numa node))."""
    for bus, (card, numa) in devices.items():
        dev = root / "bus" / "pci" / "devices" / bus.lower()
        (dev / "drm" / f"card{card}").mkdir(parents=True)
        (dev / "drm" / f"renderD{128 + card}").mkdir()
        (dev / "numa_node").write_text(f"{numa}\n")
    return root
