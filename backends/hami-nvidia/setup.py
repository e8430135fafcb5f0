"""Builds libvgpu.so (the shim, ``<repo>/shim``) and ships it as package data.

All metadata lives in pyproject.toml; this file only adds the build step. The shim is
built with ``make -C <repo>/shim`` into a scratch directory and copied to
``hami_nvidia/lib/libvgpu.so`` (into the wheel, or into the source tree for an
editable install). A build failure stops the install with what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIM_DIR = Path(os.environ.get("HAMI_SHIM_SRC", HERE.parent.parent / "shim"))


def build_shim() -> Path:
    """Run make in a scratch build dir; return the built library's path."""
    if not (SHIM_DIR / "Makefile").is_file():
        raise SystemExit(
            f"hami-nvidia: the libvgpu.so sources are not at {SHIM_DIR} "
            "(install from a repository checkout, or set HAMI_SHIM_SRC to the shim/ directory)"
        )
    for tool in (os.environ.get("MAKE", "make"), os.environ.get("CC", "cc")):
        if shutil.which(tool) is None:
            raise SystemExit(
                f"hami-nvidia: building libvgpu.so needs '{tool}', which is not on PATH "
                "(Debian: apt-get install build-essential)"
            )
    out = Path(tempfile.mkdtemp(prefix="hami-shim-"))
    proc = subprocess.run(
        [os.environ.get("MAKE", "make"), "-C", str(SHIM_DIR), f"BUILD={out}", "all"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"hami-nvidia: building libvgpu.so failed:\n{proc.stdout}\n{proc.stderr}")
    return out / "libvgpu.so"


class BuildPyWithShim(build_py):
    def run(self) -> None:
        super().run()
        lib = build_shim()
        if getattr(self, "editable_mode", False):
            target = HERE / "hami_nvidia" / "lib"
        else:
            target = Path(self.build_lib) / "hami_nvidia" / "lib"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, target / "libvgpu.so")
        shutil.rmtree(lib.parent, ignore_errors=True)


setup(cmdclass={"build_py": BuildPyWithShim})
