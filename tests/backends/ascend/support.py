"""Test support for the Ascend backend: a fake ``npu-smi`` answering from recorded samples."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SAMPLES = Path(__file__).parent / "samples"


class FakeNpuSmi:
    """``CommandRunner`` that answers ``npu-smi`` from ``samples/`` for one node layout
    (``910b3``, ``310p3`` or ``a3``); records the calls."""

    def __init__(self, layout: str | None) -> None:
        self.layout = layout
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> str | None:
        self.calls.append(tuple(argv))
        if self.layout is None:
            return None  # npu-smi is not installed
        args = list(argv[1:])
        if args == ["info"]:
            name = f"npu-smi-info-{self.layout}.txt"
        elif args == ["info", "-m"]:
            name = f"npu-smi-info-m-{self.layout}.txt"
        elif args[:3] == ["info", "-t", "board"]:
            npu, chip = args[args.index("-i") + 1], args[args.index("-c") + 1]
            name = f"npu-smi-board-{self.layout}-npu{npu}-chip{chip}.txt"
        else:
            return None
        path = SAMPLES / name
        return path.read_text() if path.exists() else None
