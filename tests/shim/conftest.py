"""Fixtures for the libvgpu.so tests.

The library and its test helpers are built once per session with make (shim/Makefile:
stand-in libcuda.so.1 / libnvidia-ml.so.1 and C programs). Every test then runs real
programs with the library in LD_PRELOAD and the stand-in drivers first on
LD_LIBRARY_PATH, exactly as a container would, and checks what they observed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from .support import BUILD, READER, SHIM, Build, Shim


@pytest.fixture(scope="session")
def build() -> Build:
    """Builds libvgpu.so, the stand-in drivers and the test programs (once)."""
    proc = subprocess.run(
        ["make", "-C", str(SHIM), f"-j{os.cpu_count() or 2}", "all", "test-bins"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"make -C shim failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return Build(lib=BUILD / "libvgpu.so", stubs=BUILD / "stubs", programs=BUILD / "programs")


@pytest.fixture(scope="session")
def region_reader() -> ModuleType:
    """backends/hami-nvidia/hami_nvidia/shared_region.py, imported from the tree (the
    package may not be installed where these tests run)."""
    spec = importlib.util.spec_from_file_location("hami_shared_region_under_test", READER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def shim(build: Build, tmp_path: Path) -> Shim:
    """A fresh container: its own region file and environment."""
    return Shim(build, tmp_path)
