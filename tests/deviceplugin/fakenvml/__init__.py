"""The stand-in ``libnvidia-ml.so.1`` (``fake_nvml.c``) and how to build it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "fake_nvml.c"


class BuildError(RuntimeError):
    """The stand-in could not be compiled; the message has the compiler's output."""


def build(out_dir: Path) -> Path:
    """Compile ``fake_nvml.c`` to ``out_dir/libnvidia-ml.so.1`` (soname
    ``libnvidia-ml.so.1``, as the driver's) and return ``out_dir``; put it first on
    ``LD_LIBRARY_PATH`` of a process to make pynvml load it.

    Raises:
        BuildError: no C compiler, or it failed.
    """
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise BuildError(f"building the stand-in NVML needs a C compiler ({cc!r} not on PATH)")
    out_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wl,-soname,libnvidia-ml.so.1",
            "-o",
            str(out_dir / "libnvidia-ml.so.1"),
            str(SOURCE),
            "-lpthread",
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise BuildError(f"{cc} {SOURCE} failed:\n{proc.stderr}")
    return out_dir
