"""hami-nvidia's build backend: setuptools' own, with every wheel repaired by auditwheel.

setuptools (setup.py) builds a wheel tagged ``py3-none-linux_<machine>``, the machine
read from libvgpu.so's ELF header. That tag is for the build machine only: an index
needs a ``manylinux`` (PEP 600) or ``musllinux`` (PEP 656) one, which says which C
library versions the wheel works with. ``auditwheel repair`` (PyPA's tool) reads the
versioned symbols libvgpu.so really uses (``GLIBC_2.34`` on Debian 12) and the libraries
it needs, and retags the wheel for the oldest policy they allow, e.g.
``py3-none-manylinux_2_34_x86_64``. It may not graft anything (``--patcher none``):
libvgpu.so must need only what every policy allows (the C library), and a library
that needs more stops the build with auditwheel's reason.

``HAMI_NVIDIA_REPAIR=0`` keeps the plain ``linux_<machine>`` tag: a wheel for the
machine that built it, e.g. where auditwheel knows no policy for the C library.
Editable installs and sdists are setuptools' own (nothing to repair).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every other hook, unchanged)

#: auditwheel 6.8 has ``--patcher none`` (repair without patchelf).
REQUIRES = ["auditwheel>=6.8"]


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    """setuptools' build requirements plus auditwheel (unless the repair is turned off)."""
    base = _setuptools.get_requires_for_build_wheel(config_settings)
    return base if os.environ.get("HAMI_NVIDIA_REPAIR") == "0" else [*base, *REQUIRES]


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """PEP 517 ``build_wheel``: setuptools' wheel, repaired into ``wheel_directory``.

    Returns the repaired wheel's file name. Raises SystemExit with one ``error:`` line
    when auditwheel refuses it (too-recent symbol versions, a library beyond the
    policy, an unknown machine)."""
    with tempfile.TemporaryDirectory(prefix="hami-nvidia-wheel-") as tmp:
        name = _setuptools.build_wheel(tmp, config_settings, metadata_directory)
        if os.environ.get("HAMI_NVIDIA_REPAIR") == "0":
            shutil.move(os.path.join(tmp, name), os.path.join(wheel_directory, name))
            return name
        return repair(Path(tmp) / name, Path(wheel_directory))


def repair(wheel: Path, out: Path) -> str:
    """``auditwheel repair`` of ``wheel`` into ``out``, grafting nothing; the new name."""
    fixed = Path(tempfile.mkdtemp(prefix="hami-nvidia-repaired-", dir=wheel.parent))
    argv = ["repair", "--patcher", "none", "-w", str(fixed), str(wheel)]
    proc = subprocess.run(
        [sys.executable, "-m", "auditwheel", *argv],
        capture_output=True,
        text=True,
    )
    made = list(fixed.glob("*.whl"))
    if proc.returncode != 0 or len(made) != 1:
        said = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        reason = next((ln for ln in said if "error" in ln.lower()), said[-1] if said else "")
        raise SystemExit(
            f"error: hami-nvidia: auditwheel cannot retag {wheel.name} manylinux: {reason} "
            "(HAMI_NVIDIA_REPAIR=0 builds a linux_<machine> wheel for this machine only)"
        )
    (result,) = made
    with zipfile.ZipFile(result) as zf:
        grafted = [n for n in zf.namelist() if n.startswith("hami_nvidia.libs/")]
    if grafted:  # --patcher none should have refused; never ship a grafted library
        raise SystemExit(f"error: hami-nvidia: auditwheel grafted {grafted} into the wheel")
    shutil.move(str(result), out / result.name)
    return result.name
