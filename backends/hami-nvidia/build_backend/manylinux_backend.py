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

import json
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

#: auditwheel 6.8: ``show --json`` and ``repair --patcher none`` (no patchelf needed).
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


def _auditwheel(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "auditwheel", *args], capture_output=True, text=True
    )


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    """auditwheel's own last word: its error line, else its last line of output."""
    lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    return next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "")


def refusal(wheel: Path, reason: str) -> SystemExit:
    return SystemExit(
        f"error: hami-nvidia: auditwheel cannot retag {wheel.name} manylinux: {reason} "
        "(HAMI_NVIDIA_REPAIR=0 builds a linux_<machine> wheel for this machine only)"
    )


def repair(wheel: Path, out: Path) -> str:
    """Retag ``wheel`` for the oldest policy its libraries allow as they are, into
    ``out``; the new file name. ``auditwheel show --json`` gives the policy (its
    ``overall_tag``: still ``linux_*`` when a library would have to be grafted or a
    symbol version is newer than every policy), ``auditwheel repair`` writes it."""
    shown = _auditwheel("show", "--json", str(wheel))
    try:
        audit = json.loads(shown.stdout)
    except ValueError:
        raise refusal(wheel, _said(shown)) from None
    tag = str(audit["overall_tag"])
    if tag.startswith("linux_"):
        beyond = sorted(audit.get("external_libs") or {})
        raise refusal(
            wheel,
            f"it needs libraries beyond every policy: {', '.join(beyond)}"
            if beyond
            else f"no policy allows its symbol versions {audit.get('versioned_symbols')}",
        )
    fixed = Path(tempfile.mkdtemp(prefix="hami-nvidia-repaired-", dir=wheel.parent))
    # --plat stays "auto" (the tag just shown): its named choices are only this
    # machine's, and a cross-built wheel is another machine's
    repaired = _auditwheel("repair", "--patcher", "none", "-w", str(fixed), str(wheel))
    made = list(fixed.glob("*.whl"))
    if repaired.returncode != 0 or len(made) != 1:
        raise refusal(wheel, _said(repaired))
    if tag not in made[0].name.removesuffix(".whl").split("-")[-1].split("."):
        raise refusal(wheel, f"repair wrote {made[0].name}, show said {tag}")
    (result,) = made
    with zipfile.ZipFile(result) as zf:
        grafted = [n for n in zf.namelist() if ".libs/" in n]
    if grafted:  # --patcher none cannot graft; never ship a copied library
        raise refusal(wheel, f"it grafted {grafted}")
    shutil.move(str(result), out / result.name)
    return result.name
