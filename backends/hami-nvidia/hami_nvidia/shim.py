"""Where the installed libvgpu.so is (built from ``shim/`` when hami-nvidia is installed)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from hami_core.errors import HamiError


def library_path() -> Path:
    """Absolute path of the libvgpu.so shipped in this package.

    Raises:
        HamiError: the package was installed without the library (a broken build).
    """
    path = Path(str(resources.files("hami_nvidia") / "lib" / "libvgpu.so"))
    if not path.is_file():
        raise HamiError(
            f"libvgpu.so is missing at {path}: reinstall hami-nvidia from a checkout "
            "(pip install ./backends/hami-nvidia) with make and a C compiler available"
        )
    return path
