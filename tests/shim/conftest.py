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

from tests.skips import NOT_APPLICABLE

from .support import BUILD, READER, ROOT, SHIM, TARGET, Build, Shim

#: What a cross build (HAMI_SHIM_ARCH) cannot run, by test module or test: this host's
#: Python, pip and compiler with the other machine's library, the build's own checks
#: (run natively), and the timing tests (an emulated CPU's speed says nothing about the
#: throttle; the throttle's arithmetic is the same C on every machine).
NATIVE_ONLY = {
    "test_build_and_bench.py": "builds and benchmarks natively",
    "test_gpu_scripts.py": "runs this host's Python",
    "test_packaging.py": "pip-builds the wheel natively",
    "test_throttle.py": "timing under emulation means nothing",
    "test_priority.py": "timing under emulation means nothing",
    "test_safety.py::test_no_effect_on_a_process_that_never_touches_cuda": (
        "preloads the library into this host's Python"
    ),
    # QEMU user-mode runs one image: an execve() of another is the host's to run,
    # which needs binfmt_misc (not used here).
    "test_shared_region.py::test_exec_takes_over_the_slot_of_its_previous_image": (
        "exec needs binfmt_misc"
    ),
    # QEMU user-mode does not implement set_robust_list (its own source says why), so
    # the kernel never releases a robust mutex of a process that died holding it.
    "test_shared_region.py::test_lock_waits_are_bounded_and_a_dead_holder_releases_it": (
        "QEMU has no robust futexes"
    ),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if TARGET is None:
        return
    for item in items:
        if "tests/shim/" not in item.nodeid:
            continue
        name = item.nodeid.split("tests/shim/", 1)[1]
        module, _, test = name.partition("::")
        reason = NATIVE_ONLY.get(module) or NATIVE_ONLY.get(f"{module}::{test.split('[')[0]}")
        if reason:
            item.add_marker(
                pytest.mark.skip(reason=f"{NOT_APPLICABLE}native only under QEMU: {reason}")
            )


@pytest.fixture(scope="session")
def build() -> Build:
    """Builds libvgpu.so, the stand-in drivers and the test programs (once), for this
    machine or, with HAMI_SHIM_ARCH, with that machine's cross compiler; HAMI_SHIM_LIB
    names a libvgpu.so to test instead of the one built (a wheel's)."""
    make = ["make", "-C", str(SHIM), f"BUILD={BUILD}", f"-j{os.cpu_count() or 2}"]
    if TARGET:
        tools = subprocess.run([ROOT / "scripts" / "cross-install.sh"], capture_output=True)
        if tools.returncode != 0:
            pytest.fail(tools.stderr.decode(errors="replace"), pytrace=False)
        make.append(f"CC={TARGET.cc}")
    proc = subprocess.run(
        [*make, "all", "test-bins"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"make -C shim failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    lib = Path(os.environ.get("HAMI_SHIM_LIB") or BUILD / "libvgpu.so")
    runner = (TARGET.qemu, "-L", TARGET.sysroot) if TARGET else ()
    return Build(lib=lib, stubs=BUILD / "stubs", programs=BUILD / "programs", runner=runner)


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
